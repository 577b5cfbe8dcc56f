// SPDX-License-Identifier: Apache-2.0
// The bodies of dlfeed/format/tfrecord_framing.h (header tier: see
// dlfeed/detail/inline.h). CRC32C from dlfeed/detail/crc32c.h.
#pragma once

#include <cstring>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/inline.h"
#include "dlfeed/error.h"
#include "dlfeed/format/tfrecord_framing.h"

namespace dlfeed::inline DLFEED_ABI::tfrecord {
namespace framing_detail {
DLFEED_DETAIL_BEGIN

inline uint64_t load_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
inline uint32_t load_le32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
inline void store_le(std::byte* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline std::string hex32(uint32_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s = "0x00000000";
  for (int i = 0; i < 8; ++i) s[9 - i] = kDigits[(v >> (4 * i)) & 0xf];
  return s;
}

DLFEED_DETAIL_END
}  // namespace framing_detail
using namespace framing_detail;  // NOLINT: the byte helpers, for the definitions below

DLFEED_INLINE uint32_t masked_crc32c(std::span<const std::byte> data) { return mask_crc(detail::crc32c(data)); }

DLFEED_INLINE void append_record(std::vector<std::byte>& out, std::span<const std::byte> payload) {
  const size_t at = out.size();
  out.resize(at + kHeaderSize + payload.size() + kFooterSize);
  std::byte* p = out.data() + at;
  store_le(p, payload.size(), 8);
  store_le(p + 8, masked_crc32c(std::span<const std::byte>(p, 8)), 4);
  if (!payload.empty()) std::memcpy(p + kHeaderSize, payload.data(), payload.size());
  store_le(p + kHeaderSize + payload.size(), masked_crc32c(payload), 4);
}

DLFEED_INLINE absl::StatusOr<uint64_t> parse_header(std::span<const std::byte> header, bool verify,
                                                    absl::string_view path, uint64_t offset) {
  if (header.size() < kHeaderSize) {
    return format_error(path, offset, "a 12-byte TFRecord header", absl::StrCat(header.size(), " bytes"));
  }
  const uint64_t length = load_le64(header.data());
  if (verify) {
    const uint32_t stored = load_le32(header.data() + 8);
    const uint32_t computed = masked_crc32c(header.first(8));
    if (stored != computed) {
      return format_error(path, offset + 8,
                          absl::StrCat("length CRC ", hex32(computed), " (masked CRC32C of the length field ", length,
                                       " at offset ", offset, ")"),
                          absl::StrCat(hex32(stored), ": the record header is corrupt"));
    }
  }
  return length;
}

DLFEED_INLINE absl::StatusOr<std::span<const std::byte>> unframe_record(std::span<const std::byte> framed, bool verify,
                                                                        absl::string_view path, uint64_t offset) {
  if (framed.size() < kOverhead) {
    return format_error(path, offset, "a framed TFRecord of at least 16 bytes", absl::StrCat(framed.size(), " bytes"));
  }
  DLFEED_ASSIGN_OR_RETURN(const uint64_t length, parse_header(framed, verify, path, offset));
  if (length != framed.size() - kOverhead) {
    return format_error(path, offset,
                        absl::StrCat("a record length of ", framed.size() - kOverhead,
                                     " bytes (the record's extent is ", framed.size(), " bytes)"),
                        absl::StrCat("length ", length, " in the record header"));
  }
  std::span<const std::byte> payload = framed.subspan(kHeaderSize, length);
  if (verify) {
    const uint32_t stored = load_le32(framed.data() + kHeaderSize + length);
    const uint32_t computed = masked_crc32c(payload);
    if (stored != computed) {
      return format_error(path, offset + kHeaderSize + length,
                          absl::StrCat("payload CRC ", hex32(computed), " (masked CRC32C of the ", length,
                                       "-byte payload of the record at offset ", offset, ")"),
                          absl::StrCat(hex32(stored), ": the record is corrupt"));
    }
  }
  return payload;
}

}  // namespace dlfeed::tfrecord
