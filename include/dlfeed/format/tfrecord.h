// SPDX-License-Identifier: Apache-2.0
// TFRecord framing, the DALI/DLIO .idx sidecar, and record writing.
//
// A record on disk:
//   uint64 length (little endian)
//   uint32 masked CRC32C of the 8 length bytes
//   length bytes of payload (a serialized tf.train.Example)
//   uint32 masked CRC32C of the payload
// with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
//
// A sidecar holds one ASCII line "offset length" per record, length being
// the whole framed record (16 + payload), as DALI's tfrecord2idx and the DLIO
// benchmark write it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/format/format.h"
#include "dlfeed/format/tfrecord_framing.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::tfrecord {

// The framing (kHeaderSize, mask_crc, parse_header, unframe_record, ...):
// dlfeed/format/tfrecord_framing.h, in the header tier.

/// The sidecar text for `records`: "offset length\n" per record.
DLFEED_EXPORT std::string format_idx(const std::vector<Extent>& records);
/// Writes the sidecar (via a temporary file and a rename).
DLFEED_EXPORT absl::Status write_idx(const std::string& idx_path, const std::vector<Extent>& records);
/// Parses a sidecar; errors name the idx file and line.
DLFEED_EXPORT absl::StatusOr<std::vector<Extent>> read_idx(const std::string& idx_path);
// validate_idx, scan_records and scan_compressed take a dlfeed-internal
// file handle: they are declared in src/format/tfrecord_scan.h.

// ---- compressed files (TFRecordWriter with options GZIP or ZLIB) ----
//
// A compressed TFRecord file is one gzip (RFC 1952) or zlib (RFC 1950)
// stream whose inflated bytes are the framed records. Random access uses
// inflate checkpoints (zran-style access points): at open the file is
// inflated once, which finds the record boundaries, checks the gzip CRC-32 /
// zlib Adler-32 trailer, and keeps, at deflate block boundaries at most one
// per kCheckpointSpan inflated bytes and only where a record starts after
// the previous one, the compressed bit position and the 32 KiB window
// (the history back-references may reach). A record is then read as the
// compressed bytes from its checkpoint to where the scan had consumed the
// input when the record's last byte came out, and inflated from there
// (raw deflate primed with the checkpoint's bits and window).

enum class Compression { kNone, kGzip, kZlib };
DLFEED_EXPORT const char* compression_name(Compression c);  // "none", "GZIP", "ZLIB"

/// What the first bytes of a file of `file_size` bytes say: GZIP (1f 8b 08),
/// ZLIB (a valid RFC 1950 header: CM 8, CINFO <= 7, FCHECK, no preset
/// dictionary), else kNone. A plain TFRecord whose first 12 bytes are a valid
/// record header (its length CRC holds and the length fits the file) stays
/// kNone even when its length bytes look like a magic number.
DLFEED_EXPORT Compression detect_compression(std::span<const std::byte> head, uint64_t file_size);

/// Inflated bytes between checkpoints (at least; a checkpoint sits at the
/// last deflate block boundary before the first record that starts this
/// far past the previous checkpoint).
inline constexpr uint64_t kCheckpointSpan = uint64_t{1} << 20;
inline constexpr size_t kWindowSize = 32768;

/// A place where inflation can resume: a deflate block boundary.
struct DLFEED_EXPORT InflatePoint {
  uint64_t in = 0;                // compressed offset of the first whole byte after the boundary
  int bits = 0;                   // 0..7 bits of byte in-1 that belong to the block
  uint64_t out = 0;               // inflated offset of the boundary
  std::vector<std::byte> window;  // up to 32 KiB of inflated bytes before `out`
  uint64_t first_byte() const { return in - (bits ? 1 : 0); }
};

/// What the open-time scan of a compressed file finds.
struct DLFEED_EXPORT CompressedIndex {
  Compression compression = Compression::kNone;
  std::vector<InflatePoint> points;     // by `out`, the first at the stream's first block
  std::vector<uint64_t> record_start;   // inflated offset of each record (n + 1: the end)
  std::vector<uint64_t> record_point;   // checkpoint of each record
  std::vector<uint64_t> record_end_in;  // compressed offset that covers record k's last byte
  uint64_t compressed_size = 0;
  uint64_t inflated_size = 0;

  size_t num_records() const { return record_point.size(); }
  /// Bytes of checkpoint windows held in memory.
  uint64_t window_bytes() const;
  /// The compressed extent to read for record k.
  Extent extent(size_t k) const {
    const uint64_t b = points[record_point[k]].first_byte();
    return {b, record_end_in[k] - b};
  }
};

/// Called with each whole framed record (header CRC checked when verifying)
/// during the scan: `k` its number, `offset` its inflated offset.
using RecordVisitor = std::function<absl::Status(uint64_t k, uint64_t offset, std::span<const std::byte> framed)>;

/// Inflates the inflated bytes [skip_to, skip_to + out.size()) of a stream
/// from checkpoint `p`, given `raw`: the file's bytes from p.first_byte().
/// `stream_id` names the stream (a process-unique number): a thread that
/// inflates forward through one checkpoint's span continues where it
/// stopped instead of restarting at the checkpoint. Errors name `path` and
/// the compressed offset.
DLFEED_EXPORT absl::Status inflate_at(const InflatePoint& p, uint64_t point_index, std::span<const std::byte> raw,
                                      uint64_t skip_to, std::span<std::byte> out, uint64_t stream_id,
                                      absl::string_view path);

/// A process-unique id for inflate_at's continuation (never reused).
DLFEED_EXPORT uint64_t new_stream_id();

/// `data` as one gzip or zlib stream (level 0..9), as TFRecordWriter's
/// options write it. `block_every` > 0 ends a deflate block (Z_BLOCK) every
/// that many input bytes, for tests that need many blocks.
DLFEED_EXPORT std::vector<std::byte> compress(std::span<const std::byte> data, Compression c, int level = 6,
                                              size_t block_every = 0);

/// Where the sidecar of `data_path` is, if one exists: options.index_dir,
/// else DATA.idx, else the DLIO place {data}/index/{train|valid}/NAME.idx.
/// Returns "" when there is none.
DLFEED_EXPORT std::string find_idx(const std::string& data_path, const FormatOptions& options);
/// Where a new sidecar goes: options.index_dir/NAME.idx, else DATA.idx.
DLFEED_EXPORT std::string idx_path_for_write(const std::string& data_path, const FormatOptions& options);

}  // namespace dlfeed::tfrecord
