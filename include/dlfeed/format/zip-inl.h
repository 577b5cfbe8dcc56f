// SPDX-License-Identifier: Apache-2.0
// The zip directory reader, the parse side of dlfeed/format/zip.h, and
// inflate_raw (on dlfeed/format/deflate.h), from bytes (header tier: see
// dlfeed/detail/inline.h). The writer and CRC-32 (zlib) stay in
// src/format/zip.cc.
#pragma once

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/inline.h"
#include "dlfeed/format/deflate.h"
#include "dlfeed/format/zip.h"

namespace dlfeed::inline DLFEED_ABI {
namespace zip_detail {
DLFEED_DETAIL_BEGIN

inline constexpr uint32_t kLocalSig = 0x04034b50;
inline constexpr uint32_t kCentralSig = 0x02014b50;
inline constexpr uint32_t kEndSig = 0x06054b50;
inline constexpr uint32_t kZip64EndSig = 0x06064b50;
inline constexpr uint32_t kZip64LocatorSig = 0x07064b50;

inline uint16_t rd16(const std::byte* p) { return uint16_t(uint16_t(p[0]) | uint16_t(p[1]) << 8); }
inline uint32_t rd32(const std::byte* p) { return uint32_t(rd16(p)) | uint32_t(rd16(p + 2)) << 16; }
inline uint64_t rd64(const std::byte* p) { return uint64_t(rd32(p)) | uint64_t(rd32(p + 4)) << 32; }

DLFEED_DETAIL_END
}  // namespace zip_detail
using namespace zip_detail;  // NOLINT: the byte readers, for the definitions below

DLFEED_INLINE absl::StatusOr<ZipDirectory> parse_zip_end(std::span<const std::byte> tail, uint64_t file_size,
                                                         absl::string_view path) {
  const uint64_t tail_start = file_size - tail.size();
  if (tail.size() < 22) {
    return format_error(path, tail_start, "a zip end-of-central-directory record (22 bytes)",
                        absl::StrCat("a file of ", file_size, " bytes (truncated or not a zip/npz archive)"));
  }
  // The end record is the last 22 bytes plus a comment of up to 65535 bytes.
  for (size_t i = tail.size() - 22 + 1; i-- > 0;) {
    const std::byte* p = tail.data() + i;
    if (rd32(p) != kEndSig) continue;
    const uint16_t comment = rd16(p + 20);
    if (i + 22 + comment != tail.size()) continue;  // a signature inside data, not the record
    ZipDirectory d;
    d.entries = rd16(p + 10);
    d.size = rd32(p + 12);
    d.offset = rd32(p + 16);
    if (d.entries == 0xffff || d.size == 0xffffffff || d.offset == 0xffffffff) {
      // Zip64: the locator sits just before the end record.
      if (i < 20 || rd32(p - 20) != kZip64LocatorSig) {
        return format_error(path, tail_start + i - (i < 20 ? 0 : 20), "a Zip64 end-of-central-directory locator",
                            "none (the end record's fields say Zip64)");
      }
      ZipDirectory z;
      z.offset = rd64(p - 20 + 8);  // where the Zip64 end record is
      z.entries = UINT64_MAX;       // ask the caller to read parse_zip64_end()
      return z;
    }
    if (d.offset + d.size > tail_start + i) {
      return format_error(path, tail_start + i + 16, "a central directory that ends before its end record",
                          absl::StrCat("offset ", d.offset, " + size ", d.size));
    }
    return d;
  }
  return format_error(path, tail_start, "a zip end-of-central-directory record (signature PK\\5\\6)",
                      "none in the last 64 KiB (truncated, or not a zip/npz archive)");
}

DLFEED_INLINE absl::StatusOr<ZipDirectory> parse_zip64_end(std::span<const std::byte> z64, uint64_t offset,
                                                           absl::string_view path) {
  if (z64.size() < 56 || rd32(z64.data()) != kZip64EndSig) {
    return format_error(path, offset, "a Zip64 end-of-central-directory record (signature PK\\6\\6)",
                        z64.size() < 56 ? "end of file" : "other bytes");
  }
  ZipDirectory d;
  d.entries = rd64(z64.data() + 32);
  d.size = rd64(z64.data() + 40);
  d.offset = rd64(z64.data() + 48);
  if (d.offset > offset || d.size > offset - d.offset) {
    return format_error(path, offset + 40, "a central directory that ends before the Zip64 end record",
                        absl::StrCat("offset ", d.offset, " + size ", d.size));
  }
  return d;
}

DLFEED_INLINE absl::StatusOr<std::vector<ZipMember>> parse_zip_directory(std::span<const std::byte> dir,
                                                                         uint64_t dir_offset, uint64_t entries,
                                                                         uint64_t file_size, absl::string_view path) {
  std::vector<ZipMember> out;
  if (entries > dir.size() / 46) {
    return format_error(path, dir_offset, absl::StrCat("room for ", entries, " central directory entries"),
                        absl::StrCat(dir.size(), " bytes"));
  }
  out.reserve(entries);
  size_t pos = 0;
  for (uint64_t e = 0; e < entries; ++e) {
    const uint64_t at = dir_offset + pos;
    if (dir.size() - pos < 46) {
      return format_error(path, at, "a 46-byte central directory entry", "end of the directory");
    }
    const std::byte* p = dir.data() + pos;
    if (rd32(p) != kCentralSig) {
      return format_error(path, at, "a central directory entry (signature PK\\1\\2)", "other bytes");
    }
    ZipMember m;
    m.flags = rd16(p + 8);
    m.method = rd16(p + 10);
    m.crc32 = rd32(p + 16);
    m.compressed_size = rd32(p + 20);
    m.uncompressed_size = rd32(p + 24);
    const uint16_t name_len = rd16(p + 28), extra_len = rd16(p + 30), comment_len = rd16(p + 32);
    m.local_header_offset = rd32(p + 42);
    if (dir.size() - pos - 46 < uint64_t(name_len) + extra_len + comment_len) {
      return format_error(path, at + 28, "name, extra field and comment inside the directory", "lengths past its end");
    }
    m.name.assign(reinterpret_cast<const char*>(p + 46), name_len);
    // Zip64 extra field (id 1): 8-byte values for the fields saturated above, in order.
    const std::byte* x = p + 46 + name_len;
    size_t xl = extra_len;
    while (xl >= 4) {
      const uint16_t id = rd16(x), len = rd16(x + 2);
      if (len > xl - 4) {
        return format_error(path, at + 46 + name_len, "extra fields inside their declared length",
                            "a field running past it");
      }
      if (id == 1) {
        const std::byte* v = x + 4;
        size_t vl = len;
        auto take = [&](uint64_t& field) -> bool {
          if (vl < 8) return false;
          field = rd64(v);
          v += 8;
          vl -= 8;
          return true;
        };
        bool ok = true;
        if (m.uncompressed_size == 0xffffffff) ok = ok && take(m.uncompressed_size);
        if (m.compressed_size == 0xffffffff) ok = ok && take(m.compressed_size);
        if (m.local_header_offset == 0xffffffff) ok = ok && take(m.local_header_offset);
        if (!ok) {
          return format_error(path, at + 46 + name_len, "a Zip64 extra field with the 64-bit sizes", "one too short");
        }
      }
      x += 4 + len;
      xl -= 4 + len;
    }
    if (m.local_header_offset >= file_size || m.compressed_size > file_size) {
      return format_error(
          path, at + 42, absl::StrCat("member '", m.name, "' inside the file of ", file_size, " bytes"),
          absl::StrCat("local header offset ", m.local_header_offset, ", compressed size ", m.compressed_size));
    }
    out.push_back(std::move(m));
    pos += 46 + name_len + extra_len + comment_len;
  }
  return out;
}

DLFEED_INLINE absl::StatusOr<uint64_t> zip_data_offset(std::span<const std::byte> lh, const ZipMember& m,
                                                       uint64_t file_size, absl::string_view path) {
  if (lh.size() < 30 || rd32(lh.data()) != kLocalSig) {
    return format_error(path, m.local_header_offset,
                        absl::StrCat("the local header of member '", m.name, "' (signature PK\\3\\4)"),
                        lh.size() < 30 ? "end of file" : "other bytes");
  }
  const uint64_t data = m.local_header_offset + 30 + rd16(lh.data() + 26) + rd16(lh.data() + 28);
  if (data > file_size || m.compressed_size > file_size - data) {
    return format_error(path, data, absl::StrCat(m.compressed_size, " bytes of member '", m.name, "'"),
                        absl::StrCat(data > file_size ? 0 : file_size - data, " bytes before the end of the file"));
  }
  return data;
}

DLFEED_INLINE absl::Status inflate_raw(std::span<const std::byte> in, std::span<std::byte> out, absl::string_view path,
                                       uint64_t offset, absl::string_view what) {
  const InflateResult r = inflate_deflate(in, out);
  if (r.code == InflateResult::kOk && r.produced == out.size()) return absl::OkStatus();
  if (r.code == InflateResult::kCorrupt) {
    return format_error(path, offset + r.consumed, absl::StrCat("valid deflate data in ", what), r.what);
  }
  return format_error(path, offset + r.consumed, absl::StrCat(out.size(), " inflated bytes of ", what),
                      r.code == InflateResult::kTooLong ? "a stream longer than declared"
                      : r.code == InflateResult::kOk    ? absl::StrCat("a stream of only ", r.produced, " bytes")
                                                        : "a deflate stream cut short (truncated)");
}

}  // namespace dlfeed
