// Placeholder: being written (see docs/formats.md).
#include "dlfeed/format/format.h"

namespace dlfeed {
absl::StatusOr<SampleIndex> open_hdf5(const std::string& path, const FormatOptions&) {
  return absl::UnimplementedError(path + ": hdf5 reader not built yet");
}
}  // namespace dlfeed
