// SPDX-License-Identifier: Apache-2.0
// A small protobuf wire-format parser and serializer for tf.train.Example:
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }
//   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//                           Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1; }
//   Int64List { repeated int64 value = 1; }
// Bytes values are views into the buffer (zero copy); floats and int64s are
// read from packed and unpacked encodings alike. Unknown fields of every wire
// type are skipped, except a length-delimited field 2 at the top level: that
// is a tf.train.SequenceExample's feature_lists, refused (an error naming
// SequenceExample) rather than read as an Example's features. Every read is
// bounded by the buffer. Errors name the byte offset within the Example
// (plus `base`, the Example's offset in `path`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::example {

/// Which list a Feature holds (kNone: the feature is empty or absent).
enum class FeatureKind { kNone, kBytes, kFloat, kInt64 };
/// "bytes_list", "float_list", "int64_list", "none".
DLFEED_EXPORT const char* kind_name(FeatureKind kind);

/// Where errors point: the file and the Example's offset in it.
struct DLFEED_EXPORT Context {
  absl::string_view path = "<tf.train.Example>";
  uint64_t base = 0;  // file offset of the Example's first byte
};

/// One feature as found in an Example: its kind and the bytes of its list
/// message (BytesList / FloatList / Int64List), a view into the Example.
struct DLFEED_EXPORT FeatureSlice {
  FeatureKind kind = FeatureKind::kNone;
  std::span<const std::byte> list;
  uint64_t offset = 0;  // of `list` within the Example
};

/// Looks up feature `name`. Returns kind kNone when the Example has no such
/// feature (use feature_names() to list what it has). Where a key repeats,
/// the last entry wins, as protobuf map parsing does.
DLFEED_EXPORT absl::StatusOr<FeatureSlice> find_feature(std::span<const std::byte> example, absl::string_view name,
                                                        const Context& ctx = {});

/// Looks up several features in one walk of the Example: out[i] becomes
/// names[i]'s (kind kNone when absent; the last entry wins, as find_feature).
/// `out` has names.size() elements.
DLFEED_EXPORT absl::Status find_features(std::span<const std::byte> example, std::span<const absl::string_view> names,
                                         std::span<FeatureSlice> out, const Context& ctx = {});

/// The feature names of an Example, in wire order, each once.
DLFEED_EXPORT absl::StatusOr<std::vector<std::string>> feature_names(std::span<const std::byte> example,
                                                                     const Context& ctx = {});

/// Decodes a feature's list, appending to `out`. Errors name ctx.base + offset.
DLFEED_EXPORT absl::Status decode_bytes_list(const FeatureSlice& f, std::vector<std::span<const std::byte>>& out,
                                             const Context& ctx = {});
DLFEED_EXPORT absl::Status decode_float_list(const FeatureSlice& f, std::vector<float>& out, const Context& ctx = {});
DLFEED_EXPORT absl::Status decode_int64_list(const FeatureSlice& f, std::vector<int64_t>& out, const Context& ctx = {});
/// Number of values in a list without decoding them.
DLFEED_EXPORT absl::StatusOr<uint64_t> count_values(const FeatureSlice& f, const Context& ctx = {});

/// A fully decoded feature (bytes are views into the parsed buffer).
struct DLFEED_EXPORT Feature {
  FeatureKind kind = FeatureKind::kNone;
  std::vector<std::span<const std::byte>> bytes;
  std::vector<float> floats;
  std::vector<int64_t> int64s;
};

/// Every feature of an Example, in wire order (last entry wins per name).
DLFEED_EXPORT absl::StatusOr<std::vector<std::pair<std::string, Feature>>> parse_example(
    std::span<const std::byte> example, const Context& ctx = {});

/// Builds a serialized Example. Features are written in the order added;
/// floats and int64s use packed encoding, as TensorFlow writes them.
class DLFEED_EXPORT ExampleBuilder {
 public:
  ExampleBuilder& add_bytes(absl::string_view name, std::span<const std::span<const std::byte>> values);
  ExampleBuilder& add_bytes(absl::string_view name, std::span<const std::byte> value);
  ExampleBuilder& add_floats(absl::string_view name, std::span<const float> values);
  ExampleBuilder& add_int64s(absl::string_view name, std::span<const int64_t> values);
  /// Appends the serialized Example to `out`.
  void serialize_to(std::vector<std::byte>& out) const;
  std::vector<std::byte> serialize() const;

 private:
  void add_entry(absl::string_view name, int kind_field, const std::vector<std::byte>& list);
  std::vector<std::byte> features_;  // the Features message body
};

/// Low-level wire helpers (also used by tests to hand-craft encodings).
namespace wire {
enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5
};
DLFEED_EXPORT void append_varint(std::vector<std::byte>& out, uint64_t v);
DLFEED_EXPORT void append_tag(std::vector<std::byte>& out, uint32_t field, WireType type);
DLFEED_EXPORT void append_length_delimited(std::vector<std::byte>& out, uint32_t field,
                                           std::span<const std::byte> body);
DLFEED_EXPORT void append_fixed32(std::vector<std::byte>& out, uint32_t v);
DLFEED_EXPORT void append_fixed64(std::vector<std::byte>& out, uint64_t v);
}  // namespace wire

}  // namespace dlfeed::example

#include "dlfeed/detail/inline.h"
#ifdef DLFEED_HEADER_ONLY
#include "dlfeed/format/example-inl.h"
#endif
