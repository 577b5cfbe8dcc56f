// SPDX-License-Identifier: Apache-2.0
// tf.train.Example on the protobuf wire, parsed without libprotobuf: the
// bodies of dlfeed/format/example.h (header tier: see dlfeed/detail/inline.h).
#pragma once

#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/inline.h"
#include "dlfeed/error.h"
#include "dlfeed/format/example.h"

namespace dlfeed::inline DLFEED_ABI::example {
namespace example_detail {
DLFEED_DETAIL_BEGIN

inline constexpr int kMaxGroupDepth = 64;

// Reads protobuf fields from buf[pos, end); positions are offsets within the
// Example (origin is the Example offset of buf[0]).
class Reader {
 public:
  Reader(std::span<const std::byte> buf, uint64_t origin, const Context& ctx) : buf_(buf), origin_(origin), ctx_(ctx) {}

  bool done() const { return pos_ >= buf_.size(); }
  uint64_t where() const { return origin_ + pos_; }  // offset within the Example

  absl::Status error(uint64_t at, absl::string_view expected, absl::string_view found) const {
    return format_error(ctx_.path, ctx_.base + at, absl::StrCat(expected, " (byte ", at, " of the tf.train.Example)"),
                        found);
  }

  absl::Status varint(uint64_t& v, absl::string_view what) {
    const uint64_t start = where();
    v = 0;
    for (int i = 0; i < 10; ++i) {
      if (pos_ >= buf_.size()) {
        return error(start, absl::StrCat("a varint (", what, ")"),
                     absl::StrCat("the end of the enclosing message after ", i, " bytes"));
      }
      const uint8_t b = static_cast<uint8_t>(buf_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if ((b & 0x80) == 0) return absl::OkStatus();
    }
    return error(start, absl::StrCat("a varint of at most 10 bytes (", what, ")"), "a longer one");
  }

  absl::Status tag(uint32_t& field, uint32_t& type) {
    const uint64_t start = where();
    uint64_t t = 0;
    DLFEED_RETURN_IF_ERROR(varint(t, "field tag"));
    field = static_cast<uint32_t>(t >> 3);
    type = static_cast<uint32_t>(t & 7);
    if (t > 0xffffffffull || field == 0) {
      return error(start, "a field tag with a field number in 1..536870911",
                   absl::StrCat("tag ", t, " (field ", t >> 3, ")"));
    }
    if (type > 5) {
      return error(start, "a wire type in 0..5", absl::StrCat("wire type ", type, " for field ", field));
    }
    return absl::OkStatus();
  }

  // A length-delimited body: view and its offset within the Example.
  absl::Status bytes(std::span<const std::byte>& out, uint64_t& offset, uint32_t field) {
    const uint64_t start = where();
    uint64_t n = 0;
    DLFEED_RETURN_IF_ERROR(varint(n, absl::StrCat("length of field ", field)));
    const uint64_t left = buf_.size() - pos_;
    if (n > left) {
      return error(start, absl::StrCat("field ", field, " of ", n, " bytes within the enclosing message"),
                   absl::StrCat("only ", left, " bytes left in it"));
    }
    offset = where();
    out = buf_.subspan(pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  absl::Status fixed(size_t n, void* out, uint32_t field) {
    const uint64_t left = buf_.size() - pos_;
    if (n > left) {
      return error(where(), absl::StrCat(n, "-byte value of field ", field),
                   absl::StrCat("only ", left, " bytes left in the enclosing message"));
    }
    std::memcpy(out, buf_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  // Skips the value of a field whose tag was just read.
  absl::Status skip(uint32_t field, uint32_t type, int depth = 0) {
    switch (type) {
      case 0: {
        uint64_t v;
        return varint(v, absl::StrCat("value of field ", field));
      }
      case 1: {
        uint64_t v;
        return fixed(8, &v, field);
      }
      case 2: {
        std::span<const std::byte> s;
        uint64_t off;
        return bytes(s, off, field);
      }
      case 5: {
        uint32_t v;
        return fixed(4, &v, field);
      }
      case 3: {
        const uint64_t start = where();
        if (depth >= kMaxGroupDepth) {
          return error(start, absl::StrCat("groups nested at most ", kMaxGroupDepth, " deep"), "deeper nesting");
        }
        while (true) {
          if (done()) {
            return error(start, absl::StrCat("end-group tag of field ", field), "the end of the enclosing message");
          }
          uint32_t f, t;
          DLFEED_RETURN_IF_ERROR(tag(f, t));
          if (t == 4) {
            if (f != field) {
              return error(where(), absl::StrCat("end-group tag of field ", field),
                           absl::StrCat("end-group tag of field ", f));
            }
            return absl::OkStatus();
          }
          DLFEED_RETURN_IF_ERROR(skip(f, t, depth + 1));
        }
      }
      case 4: return error(where(), "a field", absl::StrCat("an end-group tag of field ", field, " outside any group"));
    }
    return error(where(), "a wire type in 0..5", absl::StrCat(type));
  }

 private:
  std::span<const std::byte> buf_;
  size_t pos_ = 0;
  uint64_t origin_ = 0;
  const Context& ctx_;
};

// Calls fn(key, slice) for every map entry of every Features of the Example.
template <typename Fn>
absl::Status for_each_feature(std::span<const std::byte> example, const Context& ctx, Fn&& fn) {
  Reader top(example, 0, ctx);
  while (!top.done()) {
    uint32_t field, type;
    const uint64_t tag_at = top.where();
    DLFEED_RETURN_IF_ERROR(top.tag(field, type));
    if (field == 2 && type == 2) {
      // tf.train.SequenceExample { Features context = 1; FeatureLists
      // feature_lists = 2; }: read as an Example it would silently give its
      // context alone. (One without feature_lists is wire-identical to an
      // Example and is read as one.)
      return top.error(tag_at, "a tf.train.Example",
                       "field 2 (feature_lists) at the top level: this record is a tf.train.SequenceExample, "
                       "which dlfeed does not read");
    }
    if (field != 1 || type != 2) {
      DLFEED_RETURN_IF_ERROR(top.skip(field, type));
      continue;
    }
    std::span<const std::byte> features;
    uint64_t features_off;
    DLFEED_RETURN_IF_ERROR(top.bytes(features, features_off, field));
    Reader fr(features, features_off, ctx);
    while (!fr.done()) {
      DLFEED_RETURN_IF_ERROR(fr.tag(field, type));
      if (field != 1 || type != 2) {
        DLFEED_RETURN_IF_ERROR(fr.skip(field, type));
        continue;
      }
      std::span<const std::byte> entry;
      uint64_t entry_off;
      DLFEED_RETURN_IF_ERROR(fr.bytes(entry, entry_off, field));
      Reader er(entry, entry_off, ctx);
      absl::string_view key;
      FeatureSlice slice;
      bool has_value = false;
      while (!er.done()) {
        const uint64_t entry_tag_at = er.where();
        DLFEED_RETURN_IF_ERROR(er.tag(field, type));
        if (field == 1 && type == 2) {
          std::span<const std::byte> k;
          uint64_t k_off;
          DLFEED_RETURN_IF_ERROR(er.bytes(k, k_off, field));
          key = absl::string_view(reinterpret_cast<const char*>(k.data()), k.size());
        } else if (field == 2 && type == 2) {
          // One Feature of one value list: protobuf merges repeated ones (and
          // keeps the last of two kinds), TensorFlow's parser does otherwise,
          // and no writer of TensorFlow's makes them: an error, not a choice.
          if (has_value) {
            return er.error(entry_tag_at, "one tf.train.Feature per feature map entry",
                            "a second one (a protobuf writer's merge, not TensorFlow's writers)");
          }
          has_value = true;
          std::span<const std::byte> feature;
          uint64_t feature_off;
          DLFEED_RETURN_IF_ERROR(er.bytes(feature, feature_off, field));
          Reader vr(feature, feature_off, ctx);
          while (!vr.done()) {
            const uint64_t list_tag_at = vr.where();
            DLFEED_RETURN_IF_ERROR(vr.tag(field, type));
            if (field >= 1 && field <= 3 && type == 2) {
              if (slice.kind != FeatureKind::kNone) {
                return vr.error(list_tag_at, "one value list in a tf.train.Feature",
                                absl::StrCat("a second one (", kind_name(static_cast<FeatureKind>(field)), " after ",
                                             kind_name(slice.kind), ")"));
              }
              DLFEED_RETURN_IF_ERROR(vr.bytes(slice.list, slice.offset, field));
              slice.kind = static_cast<FeatureKind>(field);
            } else {
              DLFEED_RETURN_IF_ERROR(vr.skip(field, type));
            }
          }
        } else {
          DLFEED_RETURN_IF_ERROR(er.skip(field, type));
        }
      }
      DLFEED_RETURN_IF_ERROR(fn(key, slice));
    }
  }
  return absl::OkStatus();
}

DLFEED_INLINE absl::Status wrong_kind(const FeatureSlice& f, FeatureKind want, const Context& ctx) {
  return format_error(ctx.path, ctx.base + f.offset, kind_name(want), kind_name(f.kind));
}

// The walk the three list decoders share: BytesList, FloatList and Int64List
// are each `repeated T value = 1`. Checks the feature is of `kind`, then calls
// read_value(reader, wire type) at every field 1, which reads the value and
// returns true, or returns false for a wire type the list does not use; those
// and other fields are skipped, as protobuf's parser skips them.
template <typename ReadValue>
absl::Status for_each_value(const FeatureSlice& f, FeatureKind kind, const Context& ctx, ReadValue&& read_value) {
  if (f.kind != kind) return wrong_kind(f, kind, ctx);
  Reader r(f.list, f.offset, ctx);
  while (!r.done()) {
    uint32_t field, type;
    DLFEED_RETURN_IF_ERROR(r.tag(field, type));
    if (field == 1) {
      DLFEED_ASSIGN_OR_RETURN(const bool read, read_value(r, type));
      if (read) continue;
    }
    DLFEED_RETURN_IF_ERROR(r.skip(field, type));
  }
  return absl::OkStatus();
}

DLFEED_DETAIL_END
}  // namespace example_detail
using namespace example_detail;  // NOLINT: the parser's pieces, for the definitions below

DLFEED_INLINE const char* kind_name(FeatureKind kind) {
  switch (kind) {
    case FeatureKind::kNone: return "none";
    case FeatureKind::kBytes: return "bytes_list";
    case FeatureKind::kFloat: return "float_list";
    case FeatureKind::kInt64: return "int64_list";
  }
  return "?";
}

DLFEED_INLINE absl::StatusOr<FeatureSlice> find_feature(std::span<const std::byte> example, absl::string_view name,
                                                        const Context& ctx) {
  FeatureSlice found;
  DLFEED_RETURN_IF_ERROR(for_each_feature(example, ctx, [&](absl::string_view key, const FeatureSlice& s) {
    if (key == name) found = s;
    return absl::OkStatus();
  }));
  return found;
}

DLFEED_INLINE absl::Status find_features(std::span<const std::byte> example, std::span<const absl::string_view> names,
                                         std::span<FeatureSlice> out, const Context& ctx) {
  for (FeatureSlice& s : out) s = FeatureSlice{};
  return for_each_feature(example, ctx, [&](absl::string_view key, const FeatureSlice& s) {
    for (size_t i = 0; i < names.size() && i < out.size(); ++i) {
      if (key == names[i]) out[i] = s;
    }
    return absl::OkStatus();
  });
}

DLFEED_INLINE absl::StatusOr<std::vector<std::string>> feature_names(std::span<const std::byte> example,
                                                                     const Context& ctx) {
  std::vector<std::string> names;
  absl::flat_hash_map<std::string, size_t> seen;
  DLFEED_RETURN_IF_ERROR(for_each_feature(example, ctx, [&](absl::string_view key, const FeatureSlice&) {
    if (seen.emplace(std::string(key), names.size()).second) names.emplace_back(key);
    return absl::OkStatus();
  }));
  return names;
}

DLFEED_INLINE absl::Status decode_bytes_list(const FeatureSlice& f, std::vector<std::span<const std::byte>>& out,
                                             const Context& ctx) {
  return for_each_value(f, FeatureKind::kBytes, ctx, [&](Reader& r, uint32_t type) -> absl::StatusOr<bool> {
    if (type != 2) return false;
    std::span<const std::byte> v;
    uint64_t off;
    DLFEED_RETURN_IF_ERROR(r.bytes(v, off, 1));
    out.push_back(v);
    return true;
  });
}

DLFEED_INLINE absl::Status decode_float_list(const FeatureSlice& f, std::vector<float>& out, const Context& ctx) {
  return for_each_value(f, FeatureKind::kFloat, ctx, [&](Reader& r, uint32_t type) -> absl::StatusOr<bool> {
    if (type == 2) {  // packed
      std::span<const std::byte> v;
      uint64_t off;
      DLFEED_RETURN_IF_ERROR(r.bytes(v, off, 1));
      if (v.size() % 4 != 0) {
        return r.error(off, "a packed float list whose length is a multiple of 4", absl::StrCat(v.size(), " bytes"));
      }
      const size_t base = out.size();
      out.resize(base + v.size() / 4);
      if (!v.empty()) std::memcpy(out.data() + base, v.data(), v.size());  // little-endian host
      return true;
    }
    if (type != 5) return false;
    float x;  // unpacked
    DLFEED_RETURN_IF_ERROR(r.fixed(4, &x, 1));
    out.push_back(x);
    return true;
  });
}

DLFEED_INLINE absl::Status decode_int64_list(const FeatureSlice& f, std::vector<int64_t>& out, const Context& ctx) {
  return for_each_value(f, FeatureKind::kInt64, ctx, [&](Reader& r, uint32_t type) -> absl::StatusOr<bool> {
    if (type == 2) {  // packed
      std::span<const std::byte> v;
      uint64_t off;
      DLFEED_RETURN_IF_ERROR(r.bytes(v, off, 1));
      Reader p(v, off, ctx);
      while (!p.done()) {
        uint64_t x;
        DLFEED_RETURN_IF_ERROR(p.varint(x, "packed int64 value"));
        out.push_back(static_cast<int64_t>(x));
      }
      return true;
    }
    if (type != 0) return false;
    uint64_t x;  // unpacked
    DLFEED_RETURN_IF_ERROR(r.varint(x, "int64 value"));
    out.push_back(static_cast<int64_t>(x));
    return true;
  });
}

DLFEED_INLINE absl::StatusOr<uint64_t> count_values(const FeatureSlice& f, const Context& ctx) {
  switch (f.kind) {
    case FeatureKind::kNone: return 0;
    case FeatureKind::kBytes: {
      std::vector<std::span<const std::byte>> v;
      DLFEED_RETURN_IF_ERROR(decode_bytes_list(f, v, ctx));
      return v.size();
    }
    case FeatureKind::kFloat: {
      std::vector<float> v;
      DLFEED_RETURN_IF_ERROR(decode_float_list(f, v, ctx));
      return v.size();
    }
    case FeatureKind::kInt64: {
      std::vector<int64_t> v;
      DLFEED_RETURN_IF_ERROR(decode_int64_list(f, v, ctx));
      return v.size();
    }
  }
  return 0;
}

DLFEED_INLINE absl::StatusOr<std::vector<std::pair<std::string, Feature>>> parse_example(
    std::span<const std::byte> example, const Context& ctx) {
  std::vector<std::pair<std::string, Feature>> features;
  absl::flat_hash_map<std::string, size_t> at;
  DLFEED_RETURN_IF_ERROR(for_each_feature(example, ctx, [&](absl::string_view key, const FeatureSlice& s) {
    Feature f;
    f.kind = s.kind;
    switch (s.kind) {
      case FeatureKind::kNone: break;
      case FeatureKind::kBytes: DLFEED_RETURN_IF_ERROR(decode_bytes_list(s, f.bytes, ctx)); break;
      case FeatureKind::kFloat: DLFEED_RETURN_IF_ERROR(decode_float_list(s, f.floats, ctx)); break;
      case FeatureKind::kInt64: DLFEED_RETURN_IF_ERROR(decode_int64_list(s, f.int64s, ctx)); break;
    }
    auto [it, inserted] = at.emplace(std::string(key), features.size());
    if (inserted) {
      features.emplace_back(std::string(key), std::move(f));
    } else {
      features[it->second].second = std::move(f);
    }
    return absl::OkStatus();
  }));
  return features;
}

// ---- writing ----

namespace wire {
DLFEED_INLINE void append_varint(std::vector<std::byte>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<std::byte>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<std::byte>(v));
}
DLFEED_INLINE void append_tag(std::vector<std::byte>& out, uint32_t field, WireType type) {
  append_varint(out, (static_cast<uint64_t>(field) << 3) | type);
}
DLFEED_INLINE void append_length_delimited(std::vector<std::byte>& out, uint32_t field,
                                           std::span<const std::byte> body) {
  append_tag(out, field, kLengthDelimited);
  append_varint(out, body.size());
  out.insert(out.end(), body.begin(), body.end());
}
DLFEED_INLINE void append_fixed32(std::vector<std::byte>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
DLFEED_INLINE void append_fixed64(std::vector<std::byte>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
}  // namespace wire

DLFEED_INLINE void ExampleBuilder::add_entry(absl::string_view name, int kind_field,
                                             const std::vector<std::byte>& list) {
  std::vector<std::byte> feature;
  wire::append_length_delimited(feature, static_cast<uint32_t>(kind_field), list);
  std::vector<std::byte> entry;
  wire::append_length_delimited(entry, 1, std::as_bytes(std::span<const char>(name.data(), name.size())));
  wire::append_length_delimited(entry, 2, feature);
  wire::append_length_delimited(features_, 1, entry);
}

DLFEED_INLINE ExampleBuilder& ExampleBuilder::add_bytes(absl::string_view name,
                                                        std::span<const std::span<const std::byte>> values) {
  std::vector<std::byte> list;
  for (const auto& v : values) wire::append_length_delimited(list, 1, v);
  add_entry(name, 1, list);
  return *this;
}

DLFEED_INLINE ExampleBuilder& ExampleBuilder::add_bytes(absl::string_view name, std::span<const std::byte> value) {
  const std::span<const std::byte> one[1] = {value};
  return add_bytes(name, std::span<const std::span<const std::byte>>(one));
}

DLFEED_INLINE ExampleBuilder& ExampleBuilder::add_floats(absl::string_view name, std::span<const float> values) {
  std::vector<std::byte> list;
  if (!values.empty()) wire::append_length_delimited(list, 1, std::as_bytes(values));
  add_entry(name, 2, list);
  return *this;
}

DLFEED_INLINE ExampleBuilder& ExampleBuilder::add_int64s(absl::string_view name, std::span<const int64_t> values) {
  std::vector<std::byte> packed;
  for (int64_t v : values) wire::append_varint(packed, static_cast<uint64_t>(v));
  std::vector<std::byte> list;
  if (!values.empty()) wire::append_length_delimited(list, 1, packed);
  add_entry(name, 3, list);
  return *this;
}

DLFEED_INLINE void ExampleBuilder::serialize_to(std::vector<std::byte>& out) const {
  wire::append_length_delimited(out, 1, features_);
}

DLFEED_INLINE std::vector<std::byte> ExampleBuilder::serialize() const {
  std::vector<std::byte> out;
  serialize_to(out);
  return out;
}

}  // namespace dlfeed::example
