// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/detail/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>

namespace dlfeed::inline DLFEED_ABI::detail {

namespace {

// The length of the well-formed UTF-8 sequence at p (at most `left` bytes),
// or 0: a stray continuation byte, a cut sequence, an overlong form, a
// surrogate or a code point above U+10FFFF.
size_t utf8_length(const unsigned char* p, size_t left) {
  const unsigned char c = p[0];
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (n > left) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
    return 0;
  }
  return n;
}

}  // namespace

void json_append_quoted(std::string& out, absl::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + s.size() + 2);
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      // JSON is UTF-8: a byte that is not (a file name in another encoding) is
      // written as the lone surrogate U+DC80 + byte, as Python's
      // surrogateescape reads it (os.fsencode gives the bytes back), so the
      // document stays readable and two such names stay two.
      const size_t n = utf8_length(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i);
      if (n == 0) {
        out += "\\udc";
        out += kHex[static_cast<unsigned char>(c) >> 4];
        out += kHex[static_cast<unsigned char>(c) & 0xf];
      } else {
        out.append(s.data() + i, n);
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[static_cast<unsigned char>(c) >> 4];
          out += kHex[static_cast<unsigned char>(c) & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string json_quote(absl::string_view s) {
  std::string out;
  json_append_quoted(out, s);
  return out;
}

void json_append_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += '0';
    return;
  }
  // The shortest digits that read back as v, laid out as printf's %g lays
  // them out: plain decimals from 1e-4 up to (here) 1e17, so counts and
  // nanoseconds stay whole numbers ("100000", not "1e+05"); an exponent
  // beyond.
  char buf[64];
  std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const char* e = std::find(buf, r.ptr, 'e');
  int exponent = 0;
  std::from_chars(e + (e[1] == '+' ? 2 : 1), r.ptr, exponent);
  if (v == 0 || (exponent >= -4 && exponent < 17)) {
    r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
  }
  out.append(buf, r.ptr);
}

std::string json_number(double v) {
  std::string out;
  json_append_number(out, v);
  return out;
}

}  // namespace dlfeed::detail
