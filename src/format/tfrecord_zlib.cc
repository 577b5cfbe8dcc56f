// SPDX-License-Identifier: Apache-2.0
// Compressed TFRecord files: the open-time scan that finds records and
// inflate checkpoints, and inflating one record from its checkpoint.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/format/deflate.h"
#include "dlfeed/format/tfrecord.h"
#include "tfrecord_scan.h"

namespace dlfeed::inline DLFEED_ABI::tfrecord {
namespace {

uint64_t load_le(const std::byte* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

struct Inflater {
  z_stream zs{};
  bool ok = false;
  explicit Inflater(int window_bits) { ok = inflateInit2(&zs, window_bits) == Z_OK; }
  ~Inflater() {
    if (ok) inflateEnd(&zs);
  }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
};

std::string zmessage(const z_stream& zs) { return zs.msg ? zs.msg : "corrupt data"; }

// The error for a Z_DATA_ERROR during the scan, in the user's terms.
absl::Status stream_error(const std::string& path, Compression c, const z_stream& zs) {
  const std::string msg = zmessage(zs);
  const char* name = compression_name(c);
  if (msg == "incorrect data check") {
    return format_error(path, zs.total_in,
                        absl::StrCat("the ", name, " trailer's ", c == Compression::kGzip ? "CRC-32" : "Adler-32",
                                     " of the inflated data"),
                        "a different checksum (incorrect data check): the file is corrupt");
  }
  if (msg == "incorrect length check") {
    return format_error(path, zs.total_in, "the GZIP trailer's length of the inflated data (ISIZE)",
                        "a different length (incorrect length check): the file is corrupt");
  }
  return format_error(path, zs.total_in, absl::StrCat("valid ", name, " (deflate) data"),
                      absl::StrCat(msg, ": the compressed stream is corrupt"));
}

// Inflated bytes a thread keeps from its current checkpoint span (at most).
constexpr uint64_t kSpanCache = 2 * kCheckpointSpan + (uint64_t{1} << 20);

// One thread's inflated span, kept between calls: the checkpoint's window,
// then the bytes inflated from it. A record of the same span already
// inflated is a copy; a later one goes on from the last deflate block begun
// (decoding at most one block again), so a sequential epoch inflates each
// byte about once.
struct ThreadSpan {
  bool valid = false;
  uint64_t stream_id = 0, point = 0;
  std::vector<std::byte> buf;  // window, then inflated bytes from the checkpoint's `out`
  size_t window = 0;
  uint64_t reached = 0;  // inflated bytes after the checkpoint held in buf
  InflateResume mark;    // the last block begun: a bit of raw, a place in buf
};

// The error for an inflate that stopped before `need` bytes past the
// checkpoint (or found corrupt data), in the user's terms.
absl::Status inflate_error(const InflateResult& r, uint64_t have, uint64_t need, uint64_t want_end, uint64_t base,
                           size_t raw_size, absl::string_view path) {
  const uint64_t at = base + r.consumed;
  if (r.code == InflateResult::kCorrupt) {
    return format_error(path, at, "valid deflate data", absl::StrCat(r.what, ": the compressed stream is corrupt"));
  }
  return format_error(
      path, at, absl::StrCat(need - have, " more inflated bytes (up to inflated offset ", want_end, ")"),
      r.code == InflateResult::kOk ? std::string("the end of the deflate stream")
                                   : absl::StrCat("the end of the ", raw_size, " compressed bytes read from offset ",
                                                  base, " (did the file change since it was opened?)"));
}

}  // namespace

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kNone: return "none";
    case Compression::kGzip: return "GZIP";
    case Compression::kZlib: return "ZLIB";
  }
  return "?";
}

Compression detect_compression(std::span<const std::byte> head, uint64_t file_size) {
  if (head.size() < 2) return Compression::kNone;
  if (head.size() >= kHeaderSize && file_size >= kOverhead) {
    // A valid first record header wins: its length bytes may look like magic.
    const uint64_t length = load_le(head.data(), 8);
    const uint32_t stored = static_cast<uint32_t>(load_le(head.data() + 8, 4));
    if (stored == masked_crc32c(head.first(8)) && length <= file_size - kOverhead) return Compression::kNone;
  }
  const uint8_t b0 = static_cast<uint8_t>(head[0]), b1 = static_cast<uint8_t>(head[1]);
  if (b0 == 0x1f && b1 == 0x8b && (head.size() < 3 || static_cast<uint8_t>(head[2]) == 8)) {
    return Compression::kGzip;
  }
  // RFC 1950: CM = 8 (deflate), CINFO <= 7 (window <= 32 KiB), CMF*256+FLG a
  // multiple of 31, and no preset dictionary (TensorFlow never sets one).
  if ((b0 & 0x0f) == 8 && (b0 >> 4) <= 7 && ((b0 << 8) | b1) % 31 == 0 && (b1 & 0x20) == 0) {
    return Compression::kZlib;
  }
  return Compression::kNone;
}

uint64_t CompressedIndex::window_bytes() const {
  uint64_t n = 0;
  for (const InflatePoint& p : points) n += p.window.size();
  return n;
}

namespace {
// When a file read as compressed begins with a valid plain TFRecord header
// whose payload passes the file's end (what made it read as compressed: its
// first bytes also look like a ZLIB or GZIP header), its error says so: a
// plain file cut inside its first record, not only a corrupt stream.
absl::Status with_plain_cut_note(const detail::File& file, absl::Status st) {
  if (st.ok() || absl::IsResourceExhausted(st) || absl::IsCancelled(st) || file.size() < kHeaderSize) return st;
  std::array<std::byte, kHeaderSize> head{};
  if (!file.read_exact(0, head, "TFRecord header").ok()) return st;
  const uint64_t length = load_le(head.data(), 8);
  if (static_cast<uint32_t>(load_le(head.data() + 8, 4)) != masked_crc32c(std::span(head).first(8))) return st;
  return absl::Status(st.code(), absl::StrCat(st.message(), "; or a plain TFRecord file cut inside its first record: ",
                                              "its first 12 bytes are a valid record header whose ", length,
                                              "-byte payload passes the end of the ", file.size(), "-byte file"));
}

absl::StatusOr<CompressedIndex> scan_stream(const detail::File& file, Compression c, bool verify_crc,
                                            const RecordVisitor& visit, uint64_t span);
}  // namespace

absl::StatusOr<CompressedIndex> scan_compressed(const detail::File& file, Compression c, bool verify_crc,
                                                const RecordVisitor& visit, uint64_t span) {
  absl::StatusOr<CompressedIndex> out = scan_stream(file, c, verify_crc, visit, span);
  if (out.ok()) return out;
  return with_plain_cut_note(file, out.status());
}

namespace {
absl::StatusOr<CompressedIndex> scan_stream(const detail::File& file, Compression c, bool verify_crc,
                                            const RecordVisitor& visit, uint64_t span) {
  const std::string& path = file.path();
  const uint64_t size = file.size();
  const char* name = compression_name(c);
  if (c == Compression::kNone) return absl::InvalidArgumentError(absl::StrCat(path, ": not a compressed file"));
  CompressedIndex ix;
  ix.compression = c;
  ix.compressed_size = size;
  Inflater inf(c == Compression::kGzip ? 16 + MAX_WBITS : MAX_WBITS);
  if (!inf.ok) return absl::ResourceExhaustedError("zlib inflateInit2 failed");
  z_stream& zs = inf.zs;

  constexpr size_t kInChunk = size_t(1) << 18, kOutChunk = size_t(1) << 18;
  std::vector<std::byte> in(std::min<uint64_t>(kInChunk, std::max<uint64_t>(size, 1)));
  uint64_t next_read = 0;
  std::vector<std::byte> rec;  // the current record's inflated bytes so far
  uint64_t out = 0;            // inflated bytes so far
  uint64_t rec_off = 0;        // inflated offset of the current record
  uint64_t need = kHeaderSize;
  bool have_length = false;
  // The latest block boundary, and the latest one at or before the current
  // record's start: the candidate checkpoint for that record.
  std::shared_ptr<InflatePoint> cand, start_cand;
  int rc = Z_OK;
  while (true) {
    if (zs.avail_in == 0 && next_read < size) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(in.size(), size - next_read));
      DLFEED_RETURN_IF_ERROR(
          file.read_exact(next_read, std::span<std::byte>(in.data(), n), absl::StrCat(name, " stream")));
      zs.next_in = reinterpret_cast<Bytef*>(in.data());
      zs.avail_in = static_cast<uInt>(n);
      next_read += n;
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>(need - rec.size(), kOutChunk));
    const size_t at = rec.size();
    rec.resize(at + want);
    zs.next_out = reinterpret_cast<Bytef*>(rec.data() + at);
    zs.avail_out = static_cast<uInt>(want);
    rc = inflate(&zs, Z_BLOCK);
    const size_t got = want - zs.avail_out;
    rec.resize(at + got);
    out += got;
    if (rc == Z_NEED_DICT) {
      return format_error(path, 2, "a ZLIB stream without a preset dictionary (as TensorFlow writes)",
                          "the FDICT flag: a stream that needs a preset dictionary");
    }
    if (rc == Z_DATA_ERROR) return stream_error(path, c, zs);
    if (rc == Z_MEM_ERROR) return absl::ResourceExhaustedError(absl::StrCat(path, ": zlib ran out of memory"));
    if (rc == Z_BUF_ERROR || (rc == Z_OK && got == 0 && zs.avail_in == 0 && next_read >= size)) {
      // No progress possible: the input is used up before the stream's end.
      if (zs.avail_in == 0 && next_read >= size) {
        return format_error(
            path, size,
            absl::StrCat("the rest of the ", name, " stream (more deflate data and the ",
                         c == Compression::kGzip ? "8-byte trailer" : "4-byte trailer", ")"),
            absl::StrCat("the end of the ", size, "-byte file (truncated) after ", out, " inflated bytes"));
      }
      if (rc == Z_BUF_ERROR) return absl::InternalError(absl::StrCat(path, ": inflate made no progress"));
    }
    if ((zs.data_type & 128) && !(zs.data_type & 64)) {
      auto p = std::make_shared<InflatePoint>();
      p->in = zs.total_in;
      p->bits = zs.data_type & 7;
      p->out = out;
      p->window.resize(kWindowSize);
      uInt wlen = kWindowSize;
      if (inflateGetDictionary(&zs, reinterpret_cast<Bytef*>(p->window.data()), &wlen) != Z_OK) {
        return absl::InternalError("zlib inflateGetDictionary failed");
      }
      p->window.resize(wlen);
      cand = p;
      if (out == rec_off) start_cand = p;  // nothing of the current record out yet
    }
    if (rec.size() == need && !have_length) {
      DLFEED_ASSIGN_OR_RETURN(
          const uint64_t length,
          parse_header(rec, verify_crc, absl::StrCat(path, " (inflated ", name, " stream)"), rec_off));
      // Deflate expands at most 1032:1; a longer length is a corrupt header.
      if (length > size * 1032 + (uint64_t{1} << 20)) {
        return format_error(absl::StrCat(path, " (inflated ", name, " stream)"), rec_off,
                            absl::StrCat("a record length a ", size, "-byte compressed file can hold"),
                            absl::StrCat("length ", length, ": the record header is corrupt"));
      }
      need = length + kOverhead;
      have_length = true;
    }
    if (have_length && rec.size() == need) {
      const uint64_t k = ix.record_point.size();
      if (!start_cand) return absl::InternalError(absl::StrCat(path, ": no deflate block before record ", k));
      if (ix.points.empty() || rec_off - ix.points.back().out >= span) {
        if (ix.points.empty() || ix.points.back().out != start_cand->out) ix.points.push_back(*start_cand);
      }
      if (visit) DLFEED_RETURN_IF_ERROR(visit(k, rec_off, rec));
      ix.record_start.push_back(rec_off);
      ix.record_point.push_back(ix.points.size() - 1);
      ix.record_end_in.push_back(zs.total_in);
      rec_off += need;
      rec.clear();
      need = kHeaderSize;
      have_length = false;
      start_cand = cand;  // the latest boundary is at or before the next record's start
    }
    if (rc == Z_STREAM_END) break;
  }
  if (!rec.empty()) {
    return format_error(absl::StrCat(path, " (inflated ", name, " stream)"), rec_off,
                        absl::StrCat(have_length ? need : kHeaderSize, " bytes of record ", ix.record_point.size(),
                                     " (", have_length ? "the whole record" : "its header", ")"),
                        absl::StrCat("the end of the ", name, " stream after ", rec.size(),
                                     " bytes (a record cut short: the file was written incompletely)"));
  }
  if (zs.total_in < size) {
    return format_error(path, zs.total_in, absl::StrCat("the end of the file after the ", name, " stream"),
                        absl::StrCat(size - zs.total_in,
                                     " more bytes (a second concatenated stream, or trailing garbage; dlfeed "
                                     "reads one stream per file, as TFRecordWriter writes)"));
  }
  ix.record_start.push_back(out);
  ix.inflated_size = out;
  return ix;
}
}  // namespace

uint64_t new_stream_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

absl::Status inflate_at(const InflatePoint& p, uint64_t point_index, std::span<const std::byte> raw, uint64_t skip_to,
                        std::span<std::byte> out, uint64_t stream_id, absl::string_view path) {
  thread_local ThreadSpan t;
  const uint64_t base = p.first_byte();
  if (skip_to < p.out) {
    return absl::InternalError(absl::StrCat(path, ": inflated offset ", skip_to, " is before its checkpoint"));
  }
  const uint64_t end = skip_to + out.size();
  const uint64_t need = end - p.out;                   // inflated bytes past the checkpoint
  const uint64_t first_bit = p.bits ? 8 - p.bits : 0;  // the block's first bit, in raw[0]
  const bool same = t.valid && t.stream_id == stream_id && t.point == point_index;
  if (same && need <= t.reached) {  // inflated already (raw, shorter, is not needed)
    if (!out.empty()) std::memcpy(out.data(), t.buf.data() + t.window + (skip_to - p.out), out.size());
    return absl::OkStatus();
  }
  if (skip_to == p.out && p.window.empty() && need > kSpanCache) {
    // A large record at its checkpoint, which needs no window (CosmoFlow: one
    // record per file): inflated in place, nothing kept.
    const InflateResult r = inflate_deflate_at(raw, InflateResume{first_bit, 0}, out);
    if (r.code == InflateResult::kCorrupt || r.produced < out.size()) {
      return inflate_error(r, r.produced, need, end, base, raw.size(), path);
    }
    return absl::OkStatus();
  }
  InflateResume start{first_bit, p.window.size()};
  if (same && t.mark.in_bit <= uint64_t(raw.size()) * 8) {
    start = t.mark;  // go on from the last block begun
  } else {
    t.stream_id = stream_id;
    t.point = point_index;
    t.buf.assign(p.window.begin(), p.window.end());
    t.window = p.window.size();
    t.reached = 0;
  }
  t.valid = false;
  t.buf.resize(t.window + need);
  InflateResume mark;
  const InflateResult r = inflate_deflate_at(raw, start, t.buf, &mark);
  const uint64_t have = r.produced > t.window ? r.produced - t.window : 0;
  if (r.code == InflateResult::kCorrupt || have < need) {  // raw DEFLATE: no checksum to fail
    return inflate_error(r, have, need, end, base, raw.size(), path);
  }
  if (!out.empty()) std::memcpy(out.data(), t.buf.data() + t.window + (skip_to - p.out), out.size());
  if (need <= kSpanCache) {
    // Keep what is inflated: later records of this span are copies.
    t.reached = need;
    t.mark = mark;
    t.valid = true;
  } else {
    std::vector<std::byte>().swap(t.buf);  // too far for the cache: not kept
  }
  return absl::OkStatus();
}

std::vector<std::byte> compress(std::span<const std::byte> data, Compression c, int level, size_t block_every) {
  z_stream zs{};
  const int bits = c == Compression::kGzip ? 16 + MAX_WBITS : c == Compression::kZlib ? MAX_WBITS : -MAX_WBITS;
  if (deflateInit2(&zs, level, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  std::vector<std::byte> out(deflateBound(&zs, data.size()) + 64 + (block_every ? data.size() / block_every * 8 : 0));
  size_t pos = 0;
  const size_t step = block_every ? block_every : std::max<size_t>(data.size(), 1);
  int rc = Z_OK;
  do {
    const size_t n = std::min(step, data.size() - pos);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(data.data() + pos));
    zs.avail_in = static_cast<uInt>(n);
    pos += n;
    const int flush = pos >= data.size() ? Z_FINISH : Z_BLOCK;
    do {
      if (out.size() - zs.total_out < 64) out.resize(out.size() * 2);
      zs.next_out = reinterpret_cast<Bytef*>(out.data() + zs.total_out);
      zs.avail_out = static_cast<uInt>(out.size() - zs.total_out);
      rc = deflate(&zs, flush);
    } while (zs.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
  } while (rc != Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

}  // namespace dlfeed::tfrecord
