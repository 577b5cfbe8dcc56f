// SPDX-License-Identifier: Apache-2.0
// The bodies of dlfeed/dtype.h (header tier: see dlfeed/detail/inline.h).
#pragma once

#include <bit>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/inline.h"
#include "dlfeed/dtype.h"

namespace dlfeed::inline DLFEED_ABI {
namespace dtype_detail {
DLFEED_DETAIL_BEGIN

inline constexpr bool kNativeBig = std::endian::native == std::endian::big;

DLFEED_INLINE char kind_char(DType::Kind k) {
  switch (k) {
    case DType::Kind::kBool: return 'b';
    case DType::Kind::kInt: return 'i';
    case DType::Kind::kUInt: return 'u';
    case DType::Kind::kFloat: return 'f';
  }
  return '?';
}

// numpy's one-letter codes ('b' is int8 there, not bool; 'l' is a 64-bit
// long on the LP64 systems dlfeed runs on), or none.
DLFEED_INLINE std::optional<DType> numpy_letter(char c, bool big) {
  using Kind = DType::Kind;
  struct Letter {
    char c;
    Kind kind;
    uint8_t size;
  };
  static constexpr Letter kLetters[] = {
      {'?', Kind::kBool, 1},  {'b', Kind::kInt, 1},   {'B', Kind::kUInt, 1}, {'h', Kind::kInt, 2},
      {'H', Kind::kUInt, 2},  {'i', Kind::kInt, 4},   {'I', Kind::kUInt, 4}, {'l', Kind::kInt, 8},
      {'L', Kind::kUInt, 8},  {'q', Kind::kInt, 8},   {'Q', Kind::kUInt, 8}, {'p', Kind::kInt, 8},
      {'P', Kind::kUInt, 8},  {'n', Kind::kInt, 8},   {'N', Kind::kUInt, 8}, {'e', Kind::kFloat, 2},
      {'f', Kind::kFloat, 4}, {'d', Kind::kFloat, 8},
  };
  for (const Letter& l : kLetters) {
    if (c == l.c) return DType{l.kind, l.size, l.size > 1 && big};
  }
  return std::nullopt;
}

DLFEED_DETAIL_END
}  // namespace dtype_detail

DLFEED_INLINE std::string DType::str() const {
  char order = size == 1 ? '|' : (big_endian ? '>' : '<');
  return absl::StrCat(std::string(1, order), std::string(1, dtype_detail::kind_char(kind)), size);
}

DLFEED_INLINE std::string DType::name() const {
  std::string base;
  switch (kind) {
    case Kind::kBool: return "bool";
    case Kind::kInt: base = absl::StrCat("int", size * 8); break;
    case Kind::kUInt: base = absl::StrCat("uint", size * 8); break;
    case Kind::kFloat: base = absl::StrCat("float", size * 8); break;
  }
  if (size > 1 && big_endian) base = ">" + base;
  return base;
}

DLFEED_INLINE absl::StatusOr<DType> DType::parse(absl::string_view text) {
  // Plain names first.
  struct Named {
    absl::string_view name;
    DType t;
  };
  static constexpr Named kNames[] = {
      {"bool", {Kind::kBool, 1, false}},     {"int8", {Kind::kInt, 1, false}},
      {"int16", {Kind::kInt, 2, false}},     {"int32", {Kind::kInt, 4, false}},
      {"int64", {Kind::kInt, 8, false}},     {"uint8", {Kind::kUInt, 1, false}},
      {"uint16", {Kind::kUInt, 2, false}},   {"uint32", {Kind::kUInt, 4, false}},
      {"uint64", {Kind::kUInt, 8, false}},   {"float16", {Kind::kFloat, 2, false}},
      {"float32", {Kind::kFloat, 4, false}}, {"float64", {Kind::kFloat, 8, false}},
  };
  for (const auto& n : kNames) {
    if (text == n.name) return n.t;
  }
  absl::string_view s = text;
  bool big = dtype_detail::kNativeBig;
  if (!s.empty() && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=')) {
    if (s[0] == '<') big = false;
    if (s[0] == '>') big = true;
    s.remove_prefix(1);
  }
  if (s.empty()) return absl::InvalidArgumentError(absl::StrCat("empty dtype descriptor '", text, "'"));
  if (s.size() == 1) {
    if (const std::optional<DType> t = dtype_detail::numpy_letter(s[0], big)) return *t;
  }
  DType t;
  switch (s[0]) {
    case 'b': t.kind = Kind::kBool; break;
    case 'i': t.kind = Kind::kInt; break;
    case 'u': t.kind = Kind::kUInt; break;
    case 'f': t.kind = Kind::kFloat; break;
    case 'O':
      return absl::InvalidArgumentError(absl::StrCat(
          "dtype '", text, "' is an object array (pickled Python objects); dlfeed reads numeric arrays only"));
    case 'S':
    case 'U':
    case 'a':
    case 'V':
    case 'c':
    case 'M':
    case 'm':
    case 'g':  // long double
    case 'F':  // complex
    case 'D':
    case 'G':
      return absl::InvalidArgumentError(absl::StrCat(
          "dtype '", text, "' is not a numeric type dlfeed supports (bool, int8..64, uint8..64, float16/32/64)"));
    default: return absl::InvalidArgumentError(absl::StrCat("unknown dtype descriptor '", text, "'"));
  }
  s.remove_prefix(1);
  int size = 0;
  for (char c : s) {
    if (c < '0' || c > '9' || size > 1000) {
      return absl::InvalidArgumentError(absl::StrCat("unknown dtype descriptor '", text, "'"));
    }
    size = size * 10 + (c - '0');
  }
  bool ok = false;
  switch (t.kind) {
    case Kind::kBool: ok = size == 1; break;
    case Kind::kInt:
    case Kind::kUInt: ok = size == 1 || size == 2 || size == 4 || size == 8; break;
    case Kind::kFloat: ok = size == 2 || size == 4 || size == 8; break;
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype '", text, "' has an unsupported size (bool, int8..64, uint8..64, float16/32/64)"));
  }
  t.size = static_cast<uint8_t>(size);
  t.big_endian = size > 1 && big;
  return t;
}

}  // namespace dlfeed
