// Placeholder: being written.
#include "dlfeed/format/format.h"
#include "dlfeed/gen/generate.h"

namespace dlfeed {
absl::StatusOr<SampleIndex> open_npy(const std::string& path, const FormatOptions&) {
  return absl::UnimplementedError(path + ": npy reader not built yet");
}
namespace gen {
absl::Status write_npy_file(const FileSpec& spec) {
  return absl::UnimplementedError(spec.path + ": npy writer not built yet");
}
}
}  // namespace dlfeed
