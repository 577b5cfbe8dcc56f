// SPDX-License-Identifier: Apache-2.0
// Private to the TFRecord source (tfrecord.cc): what a record's features say
// beside the sample's own (its shape feature), what the options make of a
// feature's kind, and the error for a feature that is not there.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dlfeed/format/example.h"
#include "dlfeed/format/format.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::detail::tfr {

using example::FeatureKind;

/// Feature `name` of `payload` (kind kNone when absent), and its values when
/// it is an int64_list.
absl::Status int64_feature(std::span<const std::byte> payload, const std::string& name, const example::Context& ctx,
                           example::FeatureSlice& slice, std::vector<int64_t>& values);
/// What int64_feature found, for messages: "'dims' = [2, 3]", "no feature
/// 'dims'", "'dims' as a float_list".
std::string found_text(const std::string& name, const example::FeatureSlice& slice, const std::vector<int64_t>& values);
/// The shape a shape feature's values give a feature of `count` elements:
/// one value s with s*s == count is [s, s] (DLIO's `size`); values whose
/// product is `count` are the shape; otherwise none.
std::optional<Shape> shape_of(const std::vector<int64_t>& values, uint64_t count);
/// Whether a record's shape feature (`slice`, `values`) says `shape`: the
/// same values, or DLIO's one side s of an s x s shape.
bool says_shape(const example::FeatureSlice& slice, const std::vector<int64_t>& values, const Shape& shape);

/// The sample dtype of a feature of `kind`: float32, int64, or the options'
/// for raw bytes.
DType dtype_of(FeatureKind kind, DType bytes_dtype);
/// The shape feature to read for the feature (of `kind`) of `path`
/// (FormatOptions::shape_feature), or "" for none; *required: its absence or
/// mismatch is an error. "auto" shapes only raw bytes, in DLIO's places.
std::string shape_feature_for(const FormatOptions& options, const std::string& path, FeatureKind kind, bool* required);

/// Record `item`'s (at `rec_off` of `where`) sample feature `feature`
/// ([0]: there, and of `kind` unless kNone: the first record's) and, when
/// `shape_feature` is not "", that feature ([1]), found in one walk of its
/// Example `payload`; an error naming the record otherwise.
using Found = std::array<example::FeatureSlice, 2>;
absl::StatusOr<Found> find_sample_features(std::span<const std::byte> payload, const std::string& feature,
                                           const std::string& shape_feature, FeatureKind kind, const std::string& where,
                                           uint64_t item, uint64_t rec_off, const example::Context& ctx);

/// NotFound for feature `feature` missing from record `item` (at `rec_off`
/// of `where`), naming the features it has; a SequenceExample's own error.
absl::Status missing_feature(const std::string& where, const std::string& feature, std::span<const std::byte> payload,
                             uint64_t item, uint64_t rec_off, const example::Context& ctx);

}  // namespace dlfeed::detail::tfr
