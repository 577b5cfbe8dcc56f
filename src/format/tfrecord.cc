// Placeholder: being written (see docs/formats.md).
#include "dlfeed/format/format.h"

namespace dlfeed {
absl::StatusOr<SampleIndex> open_tfrecord(const std::string& path, const FormatOptions&) {
  return absl::UnimplementedError(path + ": tfrecord reader not built yet");
}
}  // namespace dlfeed
