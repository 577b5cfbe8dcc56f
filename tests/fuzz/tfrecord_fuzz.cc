// SPDX-License-Identifier: Apache-2.0
// Fuzz target: a .tfrecord file: record framing (length, masked CRC32C of the
// length, payload, masked CRC32C of the payload) scanned by open_tfrecord,
// the first record's tf.train.Example, then sample reads (unframe, CRCs,
// feature lookup and decode). The first byte picks options: CRC checks on or
// off (off lets mutations reach the Example parser), the feature's name, and
// a shape feature's.
#include <cstddef>
#include <cstdint>

#include "dlfeed/format/format.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dlfeed;
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  const std::string path = dlfeed::fuzz::write_input("input.tfrecord", data + 1, size - 1);
  FormatOptions o;
  o.use_index_files = false;
  o.verify_crc = (flags & 1) != 0;
  static const char* const kFeatures[] = {"image", "label", "x", "y"};
  o.feature = kFeatures[(flags >> 1) & 3];
  if (flags & 8) o.feature_dtype = DType::f32();
  if (flags & 16) o.feature_shape = Shape{2, 3};
  // A shape feature read from record 0 (skipped where it is the feature itself).
  static const char* const kShapeFeatures[] = {"size", "label", "y", "image"};
  if (flags & 32) o.shape_feature = kShapeFeatures[(flags >> 6) & 3];
  auto index = open_tfrecord(path, o);
  if (!index.ok()) {
    fuzz::check_error_names(index.status(), path, "open_tfrecord");
    return 0;
  }
  fuzz::check_index(*index, path, size - 1);
  return 0;
}
