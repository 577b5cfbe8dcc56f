// SPDX-License-Identifier: Apache-2.0
#include "tfrecord_features.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "array_source.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI::detail::tfr {

absl::Status int64_feature(std::span<const std::byte> payload, const std::string& name, const example::Context& ctx,
                           example::FeatureSlice& slice, std::vector<int64_t>& values) {
  DLFEED_ASSIGN_OR_RETURN(slice, example::find_feature(payload, name, ctx));
  if (slice.kind == FeatureKind::kInt64) DLFEED_RETURN_IF_ERROR(example::decode_int64_list(slice, values, ctx));
  return absl::OkStatus();
}

std::string found_text(const std::string& name, const example::FeatureSlice& slice,
                       const std::vector<int64_t>& values) {
  if (slice.kind == FeatureKind::kInt64) return absl::StrCat("'", name, "' = [", absl::StrJoin(values, ", "), "]");
  if (slice.kind == FeatureKind::kNone) return absl::StrCat("no feature '", name, "'");
  return absl::StrCat("'", name, "' as a ", example::kind_name(slice.kind));
}

std::optional<Shape> shape_of(const std::vector<int64_t>& values, uint64_t count) {
  if (values.size() == 1 && values[0] > 0 &&
      static_cast<unsigned __int128>(values[0]) * static_cast<uint64_t>(values[0]) == count) {
    return Shape{values[0], values[0]};
  }
  if (values.empty() || values.size() > 32) return std::nullopt;
  unsigned __int128 product = 1;  // stays below 2^127: it is checked against count before each step
  for (int64_t v : values) {
    if (v < 0 || product > count) return std::nullopt;
    product *= static_cast<uint64_t>(v);
  }
  if (product != count) return std::nullopt;
  return Shape(values.begin(), values.end());
}

bool says_shape(const example::FeatureSlice& slice, const std::vector<int64_t>& values, const Shape& shape) {
  return (slice.kind == FeatureKind::kInt64 && std::equal(values.begin(), values.end(), shape.begin(), shape.end())) ||
         (values.size() == 1 && shape.size() == 2 && shape[0] == shape[1] && values[0] == shape[0]);
}

DType dtype_of(FeatureKind kind, DType bytes_dtype) {
  if (kind == FeatureKind::kFloat) return DType::f32();
  if (kind == FeatureKind::kInt64) return DType::i64();
  return bytes_dtype;
}

std::string shape_feature_for(const FormatOptions& options, const std::string& path, FeatureKind kind, bool* required) {
  *required = false;
  const std::string& f = options.shape_feature;
  if (options.feature_shape || f.empty() || f == "off" || f == options.feature) return "";
  if (f == "auto") return kind == FeatureKind::kBytes && in_dlio_layout(path) ? "size" : "";
  *required = true;
  return f;
}

absl::StatusOr<Found> find_sample_features(std::span<const std::byte> payload, const std::string& feature,
                                           const std::string& shape_feature, FeatureKind kind, const std::string& where,
                                           uint64_t item, uint64_t rec_off, const example::Context& ctx) {
  Found found;
  const std::array<absl::string_view, 2> names{feature, shape_feature};
  const size_t n = shape_feature.empty() ? 1 : 2;
  DLFEED_RETURN_IF_ERROR(example::find_features(payload, std::span(names.data(), n), std::span(found.data(), n), ctx));
  const example::FeatureSlice& slice = found[0];
  if (slice.kind == FeatureKind::kNone) return missing_feature(where, feature, payload, item, rec_off, ctx);
  if (kind != FeatureKind::kNone && slice.kind != kind) {
    return format_error(where, ctx.base + slice.offset,
                        absl::StrCat("feature '", feature, "' of record ", item, " as a ", example::kind_name(kind),
                                     " (as in the first record)"),
                        example::kind_name(slice.kind));
  }
  return found;
}

absl::Status missing_feature(const std::string& where, const std::string& feature, std::span<const std::byte> payload,
                             uint64_t item, uint64_t rec_off, const example::Context& ctx) {
  auto names = example::feature_names(payload, ctx);
  if (!names.ok()) return names.status();  // e.g. a SequenceExample: say that, not "no feature"
  std::string present;
  if (names->empty()) {
    present = "an Example with no features";
  } else if (std::find(names->begin(), names->end(), feature) != names->end()) {
    // There, but with no value list set (tf.train.Feature(), which
    // TensorFlow's VarLenFeature reads as []): not a list of any kind.
    present = absl::StrCat("feature '", feature, "' with no value list set (an empty tf.train.Feature)");
  } else {
    present = absl::StrCat("only features '", absl::StrJoin(*names, "', '"), "'");
  }
  // A name that is not there: NotFound, as a missing NPZ member or HDF5 dataset.
  return absl::NotFoundError(absl::StrCat(where, ": at offset ", rec_off, ": expected feature '", feature,
                                          "' in the tf.train.Example of record ", item, ", found ", present));
}

}  // namespace dlfeed::detail::tfr
