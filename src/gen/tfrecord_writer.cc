// Placeholder: being written.
#include "dlfeed/gen/generate.h"

namespace dlfeed::gen {
absl::Status write_tfrecord_file(const FileSpec& spec) {
  return absl::UnimplementedError(spec.path + ": tfrecord writer not built yet");
}
}  // namespace dlfeed::gen
