// SPDX-License-Identifier: Apache-2.0
// The NPY header parser: the parse side of dlfeed/format/npy.h (header tier:
// see dlfeed/detail/inline.h). The writer and the array source stay in
// src/format/npy.cc.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/inline.h"
#include "dlfeed/error.h"
#include "dlfeed/format/npy.h"

namespace dlfeed::inline DLFEED_ABI {
namespace npy_detail {
DLFEED_DETAIL_BEGIN

inline constexpr char kMagic[] = "\x93NUMPY";
inline constexpr uint64_t kMaxHeader = 1 << 20;  // numpy itself refuses headers over 10 KB by default

DLFEED_INLINE uint32_t le32(const std::byte* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// A tiny reader for the Python dict literal in an NPY header, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class DictParser {
 public:
  DictParser(absl::string_view s, absl::string_view path, uint64_t offset) : s_(s), path_(path), base_(offset) {}

  absl::Status parse(NpyHeader& h) {
    bool have_descr = false, have_order = false, have_shape = false;
    skip_ws();
    if (!eat('{')) return error("'{' opening the header dictionary");
    while (true) {
      skip_ws();
      if (eat('}')) break;
      std::string key;
      DLFEED_RETURN_IF_ERROR(parse_string(key));
      skip_ws();
      if (!eat(':')) return error("':' after a dictionary key");
      skip_ws();
      if (key == "descr") {
        if (peek() == '[') {
          return unsupported("a dtype descriptor string, found a list: structured dtypes are not supported");
        }
        std::string descr;
        DLFEED_RETURN_IF_ERROR(parse_string(descr));
        auto t = DType::parse(descr);
        if (!t.ok()) return unsupported(absl::StrCat("a supported dtype, found ", t.status().message()));
        h.dtype = *t;
        have_descr = true;
      } else if (key == "fortran_order") {
        if (consume("True"))
          h.fortran_order = true;
        else if (consume("False"))
          h.fortran_order = false;
        else
          return error("True or False for fortran_order");
        have_order = true;
      } else if (key == "shape") {
        DLFEED_RETURN_IF_ERROR(parse_shape(h.shape));
        have_shape = true;
      } else {
        return error("only the keys 'descr', 'fortran_order' and 'shape'", absl::StrCat("key '", key, "'"));
      }
      skip_ws();
      if (eat(',')) continue;
      skip_ws();
      if (eat('}')) break;
      return error("',' or '}' in the header dictionary");
    }
    if (!have_descr || !have_order || !have_shape) {
      return error("all of 'descr', 'fortran_order' and 'shape' in the header", "some missing");
    }
    return absl::OkStatus();
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool eat(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  bool consume(absl::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  // A valid header of an array dlfeed does not read (a structured or string dtype).
  absl::Status unsupported(absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": at offset ", base_ + pos_, ": expected ", what));
  }

  absl::Status error(absl::string_view expected, absl::string_view found = "") {
    std::string f(found);
    if (f.empty()) {
      f = pos_ < s_.size() ? absl::StrCat("'", s_.substr(pos_, 16), "'") : "the end of the header";
    }
    return format_error(path_, base_ + pos_, expected, f);
  }
  absl::Status parse_string(std::string& out) {
    const char q = peek();
    if (q != '\'' && q != '"') return error("a quoted string");
    ++pos_;
    const size_t end = s_.find(q, pos_);
    if (end == absl::string_view::npos) return error("a closing quote");
    out = std::string(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return absl::OkStatus();
  }
  absl::Status parse_shape(Shape& shape) {
    if (!eat('(')) return error("'(' opening the shape tuple");
    shape.clear();
    while (true) {
      skip_ws();
      if (eat(')')) return absl::OkStatus();
      const size_t start = pos_;
      while (pos_ < s_.size() && absl::ascii_isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      if (pos_ == start) return error("a non-negative integer dimension");
      // numpy may print 3L on Python 2 files.
      int64_t d = 0;
      if (!absl::SimpleAtoi(s_.substr(start, pos_ - start), &d)) {
        return error("a dimension that fits 63 bits", absl::StrCat("'", s_.substr(start, pos_ - start), "'"));
      }
      eat('L');
      shape.push_back(d);
      if (shape.size() > 32) return error("at most 32 dimensions");
      skip_ws();
      if (eat(',')) continue;
      skip_ws();
      // (12) is the int 12 to Python, which numpy refuses as a shape: a tuple of one is (12,).
      if (shape.size() == 1 && pos_ < s_.size() && s_[pos_] == ')') {
        return error("a shape tuple: one dimension is written (N,)", absl::StrCat("(", d, ")"));
      }
      if (eat(')')) return absl::OkStatus();
      return error("',' or ')' in the shape tuple");
    }
  }

  absl::string_view s_;
  absl::string_view path_;
  uint64_t base_;
  size_t pos_ = 0;
};

DLFEED_DETAIL_END

// What of `shape` (sizes 0 or more) does not fit, or null: its element count
// in 64 bits (set in `elements`), or its strides in 63 bits. The strides
// multiply the sizes with an empty dimension counted as 1 (sample_geometry),
// so (0, 10^9, 10^9, 10^9) has no elements but strides past 63 bits.
DLFEED_INLINE const char* shape_overflow(const Shape& shape, uint64_t& elements) {
  uint64_t strided = 1;
  elements = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements)) {
      return "a shape whose size fits 64 bits";
    }
    if (__builtin_mul_overflow(strided, static_cast<uint64_t>(std::max<int64_t>(d, 1)), &strided) ||
        strided > static_cast<uint64_t>(INT64_MAX)) {
      return "a shape whose strides fit 63 bits (empty dimensions as 1)";
    }
  }
  return nullptr;
}

}  // namespace npy_detail
using namespace npy_detail;  // NOLINT: the parser's pieces, for the definitions below

DLFEED_INLINE uint64_t NpyHeader::num_elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

DLFEED_INLINE absl::StatusOr<uint64_t> npy_header_size(std::span<const std::byte> pre, absl::string_view path,
                                                       uint64_t base) {
  if (pre.size() < 10) {
    return format_error(path, base, "an NPY preamble of at least 10 bytes",
                        absl::StrCat(pre.size(), " bytes (file truncated)"));
  }
  if (std::memcmp(pre.data(), kMagic, 6) != 0) {
    return format_error(path, base, "the NPY magic \\x93NUMPY", "other bytes (not an .npy file)");
  }
  const int major = static_cast<int>(pre[6]);
  if (major == 1) return 10 + (uint64_t(pre[8]) | uint64_t(pre[9]) << 8);
  if (major == 2 || major == 3) {
    if (pre.size() < 12) {
      return format_error(path, base + pre.size(), "a 4-byte header length (NPY 2.0/3.0)", "end of data");
    }
    const uint64_t len = le32(pre.data() + 8);
    if (len > kMaxHeader) {
      return format_error(path, base + 8, absl::StrCat("a header length of at most ", kMaxHeader), absl::StrCat(len));
    }
    return 12 + len;
  }
  return format_error(path, base + 6, "NPY format version 1, 2 or 3",
                      absl::StrCat("version ", major, ".", static_cast<int>(pre[7])));
}

DLFEED_INLINE absl::StatusOr<NpyHeader> parse_npy_header(std::span<const std::byte> header, absl::string_view path,
                                                         uint64_t base) {
  DLFEED_ASSIGN_OR_RETURN(uint64_t size, npy_header_size(header, path, base));
  if (header.size() < size) {
    return format_error(path, base + header.size(), absl::StrCat("an NPY header of ", size, " bytes"),
                        absl::StrCat("only ", header.size(), " bytes (file truncated)"));
  }
  NpyHeader h;
  h.major = static_cast<int>(header[6]);
  h.minor = static_cast<int>(header[7]);
  h.data_offset = size;
  const size_t dict_start = h.major == 1 ? 10 : 12;
  absl::string_view dict(reinterpret_cast<const char*>(header.data()) + dict_start, size - dict_start);
  DLFEED_RETURN_IF_ERROR(DictParser(dict, path, base + dict_start).parse(h));
  uint64_t n = 0;
  if (const char* expected = shape_overflow(h.shape, n)) {
    return format_error(path, base + dict_start, expected, absl::StrCat("shape ", shape_str(h.shape)));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(h.dtype.size), &bytes) || bytes > (uint64_t(1) << 62)) {
    return format_error(path, base + dict_start, "a shape whose byte size fits 62 bits",
                        absl::StrCat("shape ", shape_str(h.shape)));
  }
  return h;
}

}  // namespace dlfeed
