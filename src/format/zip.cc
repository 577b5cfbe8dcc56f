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

uint16_t rd16(const std::byte* p) { return uint16_t(uint16_t(p[0]) | uint16_t(p[1]) << 8); }
uint32_t rd32(const std::byte* p) { return uint32_t(rd16(p)) | uint32_t(rd16(p + 2)) << 16; }
uint64_t rd64(const std::byte* p) { return uint64_t(rd32(p)) | uint64_t(rd32(p + 4)) << 32; }

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

absl::StatusOr<ZipDirectory> parse_zip_end(std::span<const std::byte> tail, uint64_t file_size,
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

absl::StatusOr<ZipDirectory> parse_zip64_end(std::span<const std::byte> z64, uint64_t offset, absl::string_view path) {
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

absl::StatusOr<std::vector<ZipMember>> parse_zip_directory(std::span<const std::byte> dir, uint64_t dir_offset,
                                                           uint64_t entries, uint64_t file_size,
                                                           absl::string_view path) {
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

absl::StatusOr<uint64_t> zip_data_offset(std::span<const std::byte> lh, const ZipMember& m, uint64_t file_size,
                                         absl::string_view path) {
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
