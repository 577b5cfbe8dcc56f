// SPDX-License-Identifier: Apache-2.0
// Writes a synthetic TFRecord file as the DLIO benchmark does: one
// tf.train.Example per sample with `image` (the sample's raw bytes) and
// `size` (the side of a square sample, as DLIO writes it, else the element
// count: FileSpec::size_feature), plus `label` unless labels are DLIO's zeros.
#include <vector>

#include "dev/generate.h"
#include "dlfeed/error.h"
#include "dlfeed/format/example.h"
#include "dlfeed/format/tfrecord.h"

namespace dlfeed::inline DLFEED_ABI::gen {

absl::Status write_tfrecord_file(const FileSpec& spec) {
  for (int64_t d : spec.sample_shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(spec.path, ": sample shape has a negative dimension"));
  }
  DLFEED_ASSIGN_OR_RETURN(tfrecord::RecordWriter writer, tfrecord::RecordWriter::create(spec.path));
  const uint64_t nbytes = static_cast<uint64_t>(num_elements(spec.sample_shape)) * spec.dtype.size;
  std::vector<std::byte> sample(nbytes);
  const Shape& d = spec.sample_shape;
  const int64_t size = spec.size_feature >= 0                      ? spec.size_feature
                       : d.size() == 2 && d[0] == d[1] && d[0] > 0 ? d[0]
                                                                   : num_elements(d);
  std::vector<std::byte> payload;
  for (uint64_t k = 0; k < spec.num_samples; ++k) {
    const uint64_t g = spec.first_global_id + k;
    fill_sample(spec.seed, g, spec.dtype, sample);
    example::ExampleBuilder b;
    b.add_bytes("image", sample);
    b.add_int64s("size", std::span<const int64_t>(&size, 1));
    if (!spec.zero_labels) {
      const int64_t label = sample_label(g);
      b.add_int64s("label", std::span<const int64_t>(&label, 1));
    }
    payload.clear();
    b.serialize_to(payload);
    DLFEED_RETURN_IF_ERROR(writer.write(payload));
  }
  DLFEED_RETURN_IF_ERROR(writer.close());
  if (!spec.index_path.empty()) DLFEED_RETURN_IF_ERROR(tfrecord::write_idx(spec.index_path, writer.records()));
  return absl::OkStatus();
}

}  // namespace dlfeed::gen
