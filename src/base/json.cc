// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/detail/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace dlfeed::inline DLFEED_ABI::detail {

void json_append_quoted(std::string& out, absl::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + s.size() + 2);
  out += '"';
  for (const char c : s) {
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
