// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/format/zip.h"

#include <zlib.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI {

// The readers (parse_zip_end, parse_zip64_end, parse_zip_directory,
// zip_data_offset) are in the header tier: dlfeed/format/zip-inl.h.

uint32_t zip_crc32(std::span<const std::byte> bytes, uint32_t crc) {
  const Bytef* p = reinterpret_cast<const Bytef*>(bytes.data());
  size_t left = bytes.size();
  while (left > 0) {
    const uInt n = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, n));
    p += n;
    left -= n;
  }
  return crc;
}

absl::Status inflate_raw(std::span<const std::byte> in, std::span<std::byte> out, absl::string_view path,
                         uint64_t offset, absl::string_view what) {
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return absl::InternalError("zlib inflateInit2 failed");
  constexpr size_t kChunk = size_t(1) << 30;  // zlib counts in 32-bit uInt
  size_t in_pos = 0, out_pos = 0;
  unsigned char probe = 0;
  bool probing = false;
  int rc = Z_OK;
  do {
    if (zs.avail_in == 0 && in_pos < in.size()) {
      const size_t n = std::min(in.size() - in_pos, kChunk);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data() + in_pos));
      zs.avail_in = static_cast<uInt>(n);
      in_pos += n;
    }
    if (zs.avail_out == 0) {
      if (out_pos < out.size()) {
        const size_t n = std::min(out.size() - out_pos, kChunk);
        zs.next_out = reinterpret_cast<Bytef*>(out.data() + out_pos);
        zs.avail_out = static_cast<uInt>(n);
        out_pos += n;
      } else if (!probing) {
        // Output is full: one more byte tells a stream longer than declared.
        probing = true;
        zs.next_out = &probe;
        zs.avail_out = 1;
      } else {
        break;
      }
    }
    rc = inflate(&zs, Z_NO_FLUSH);
  } while (rc == Z_OK);
  const uint64_t consumed = zs.total_in, produced = zs.total_out;
  const std::string zmsg = zs.msg ? zs.msg : "corrupt data";
  inflateEnd(&zs);
  if (rc == Z_STREAM_END && produced == out.size()) return absl::OkStatus();
  if (rc == Z_DATA_ERROR) {
    return format_error(path, offset + consumed, absl::StrCat("valid deflate data in ", what), zmsg);
  }
  return format_error(path, offset + consumed, absl::StrCat(out.size(), " inflated bytes of ", what),
                      produced > out.size() ? "a stream longer than declared"
                      : rc == Z_STREAM_END  ? absl::StrCat("a stream of only ", produced, " bytes")
                                            : "a deflate stream cut short (truncated)");
}

}  // namespace dlfeed
