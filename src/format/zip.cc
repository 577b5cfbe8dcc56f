// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/format/zip.h"

#include <zlib.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "gen/generate.h"

namespace dlfeed::inline DLFEED_ABI {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;

void put16(std::string& s, uint16_t v) {
  s.push_back(char(v & 0xff));
  s.push_back(char(v >> 8));
}
void put32(std::string& s, uint32_t v) {
  put16(s, uint16_t(v));
  put16(s, uint16_t(v >> 16));
}
void put64(std::string& s, uint64_t v) {
  put32(s, uint32_t(v));
  put32(s, uint32_t(v >> 32));
}

}  // namespace

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

absl::Status ZipWriter::add(absl::string_view name, std::span<const std::byte> data, bool deflate, int level) {
  Entry e{std::string(name), uint16_t(deflate ? 8 : 0), zip_crc32(data), 0, data.size(), out_.size()};
  std::string body;
  if (deflate) {
    z_stream zs{};
    if (deflateInit2(&zs, level, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      return absl::InternalError("zlib deflateInit2 failed");
    }
    body.resize(deflateBound(&zs, data.size()));
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(data.data()));
    zs.avail_in = static_cast<uInt>(data.size());
    zs.next_out = reinterpret_cast<Bytef*>(body.data());
    zs.avail_out = static_cast<uInt>(body.size());
    const int rc = ::deflate(&zs, Z_FINISH);
    body.resize(zs.total_out);
    deflateEnd(&zs);
    if (rc != Z_STREAM_END) return absl::InternalError(absl::StrCat(path_, ": deflate failed"));
  } else {
    body.assign(reinterpret_cast<const char*>(data.data()), data.size());
  }
  e.csize = body.size();
  // Local header with saturated sizes and a Zip64 extra field, as numpy writes.
  put32(out_, kLocalSig);
  put16(out_, 45);  // version needed: Zip64
  put16(out_, 0);
  put16(out_, e.method);
  put16(out_, 0);     // time
  put16(out_, 0x21);  // date: 1980-01-01
  put32(out_, e.crc);
  put32(out_, 0xffffffff);
  put32(out_, 0xffffffff);
  put16(out_, static_cast<uint16_t>(e.name.size()));
  put16(out_, 20);
  out_ += e.name;
  put16(out_, 1);
  put16(out_, 16);
  put64(out_, e.usize);
  put64(out_, e.csize);
  out_ += body;
  entries_.push_back(std::move(e));
  return absl::OkStatus();
}

absl::Status ZipWriter::finish() {
  const uint64_t dir_offset = out_.size();
  for (const Entry& e : entries_) {
    const bool big = e.csize >= 0xffffffff || e.usize >= 0xffffffff || e.offset >= 0xffffffff;
    std::string extra;
    if (big) {
      put16(extra, 1);
      put16(extra, 24);
      put64(extra, e.usize);
      put64(extra, e.csize);
      put64(extra, e.offset);
    }
    put32(out_, kCentralSig);
    put16(out_, 45);
    put16(out_, 45);
    put16(out_, 0);
    put16(out_, e.method);
    put16(out_, 0);
    put16(out_, 0x21);
    put32(out_, e.crc);
    put32(out_, big ? 0xffffffff : uint32_t(e.csize));
    put32(out_, big ? 0xffffffff : uint32_t(e.usize));
    put16(out_, static_cast<uint16_t>(e.name.size()));
    put16(out_, static_cast<uint16_t>(extra.size()));
    put16(out_, 0);
    put16(out_, 0);
    put16(out_, 0);
    put32(out_, 0x01800000);  // external attributes: -rw-------
    put32(out_, big ? 0xffffffff : uint32_t(e.offset));
    out_ += e.name;
    out_ += extra;
  }
  const uint64_t dir_size = out_.size() - dir_offset;
  if (dir_offset >= 0xffffffff || entries_.size() >= 0xffff) {
    const uint64_t z64 = out_.size();
    put32(out_, kZip64EndSig);
    put64(out_, 44);
    put16(out_, 45);
    put16(out_, 45);
    put32(out_, 0);
    put32(out_, 0);
    put64(out_, entries_.size());
    put64(out_, entries_.size());
    put64(out_, dir_size);
    put64(out_, dir_offset);
    put32(out_, kZip64LocatorSig);
    put32(out_, 0);
    put64(out_, z64);
    put32(out_, 1);
  }
  put32(out_, kEndSig);
  put16(out_, 0);
  put16(out_, 0);
  const uint16_t n16 = entries_.size() >= 0xffff ? 0xffff : uint16_t(entries_.size());
  put16(out_, n16);
  put16(out_, n16);
  put32(out_, dir_size >= 0xffffffff ? 0xffffffff : uint32_t(dir_size));
  put32(out_, dir_offset >= 0xffffffff ? 0xffffffff : uint32_t(dir_offset));
  put16(out_, 0);
  return gen::write_file(path_, out_);
}

}  // namespace dlfeed
