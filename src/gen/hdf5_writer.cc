// Placeholder: being written.
#include "dlfeed/gen/generate.h"

namespace dlfeed::gen {
absl::Status write_hdf5_file(const FileSpec& spec) {
  return absl::UnimplementedError(spec.path + ": hdf5 writer not built yet");
}
}  // namespace dlfeed::gen
