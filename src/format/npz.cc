// Placeholder: being written.
#include "dlfeed/format/format.h"
#include "dlfeed/gen/generate.h"

namespace dlfeed {
absl::StatusOr<SampleIndex> open_npz(const std::string& path, const FormatOptions&) {
  return absl::UnimplementedError(path + ": npz reader not built yet");
}
namespace gen {
absl::Status write_npz_file(const FileSpec& spec) {
  return absl::UnimplementedError(spec.path + ": npz writer not built yet");
}
}
}  // namespace dlfeed
