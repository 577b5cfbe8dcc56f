// SPDX-License-Identifier: Apache-2.0
// ZipWriter: NPZ archives as numpy writes them (development library).
#include "dev/zip_writer.h"

#include <zlib.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dev/generate.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "dlfeed/format/zip.h"

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
