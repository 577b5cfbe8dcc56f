// SPDX-License-Identifier: Apache-2.0
// Read planning: the extents of a window of samples become few, large,
// offset-sorted reads (nearby extents of a file coalesced), and every extent
// becomes a view into the window's read buffer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::prefetch {

/// One extent to fetch: a file (an id of the loader's file table) and bytes.
struct DLFEED_EXPORT ExtentRef {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

/// One read to issue: bytes of a file landing at buffer_offset of the window's buffer.
struct DLFEED_EXPORT PlannedRead {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t buffer_offset = 0;
};

/// Where one requested extent lies in the window's buffer after the reads.
struct DLFEED_EXPORT PieceView {
  uint64_t buffer_offset = 0;
  uint64_t length = 0;
};

/// How aggressively extents are merged.
struct DLFEED_EXPORT CoalesceOptions {
  /// Extents of one file at most this many bytes apart are read as one
  /// (the gap is read and thrown away). 0: only touching or overlapping ones.
  uint64_t max_gap = 64 * 1024;
  /// A merged read never grows past this (unless one extent alone is
  /// bigger; the loader issues such a read in pieces of this size).
  uint64_t max_read = 4 * 1024 * 1024;
  /// false: one read per extent, as requested (for measuring the difference).
  bool enabled = true;
  /// The loader's batches merge across gaps no longer than the batch's mean
  /// extent (at most max_gap): a read then carries at most about as many
  /// bytes nobody asked for as it was asked for. 1 KiB samples 1-64 KiB
  /// apart read 18x their bytes with a fixed 64 KiB gap (docs/performance.md,
  /// "The coalescing gap"). false: max_gap for every batch.
  bool adaptive_gap = true;
  /// Buffered reads (not io.direct) longer than split_above go to the
  /// backend in pieces of split_piece (at most max_read). On a cold page
  /// cache a buffered read advances one read-ahead window at a time; more,
  /// smaller reads in flight fill more windows at once: sequential 16 KiB
  /// samples (a 512 KiB run per batch) read 1.3-1.6x faster cold, 4 MiB
  /// samples 1.1-1.5x, and a 128 KiB sample, which splitting slows, stays
  /// whole (docs/performance.md, "Cold, in order"). 0: no such split.
  uint64_t split_above = 256 * 1024;
  uint64_t split_piece = 64 * 1024;
  /// The piece while the I/O engine's recent reads miss the page cache
  /// (fewer than 95% complete at submit in its last 5 ms window with reads;
  /// read-ahead makes cold reads in order hit 70-83%): cold,
  /// smaller pieces keep more read-ahead windows filling (sequential 16 KiB
  /// samples 1.1-1.2x faster than 64 KiB pieces), while warm each piece is a
  /// request's overhead on the copy (0.6-0.9x). 0: split_piece always.
  uint64_t split_piece_cold = 16 * 1024;
  /// Reads of at least large_above bytes (a large sample's extent, or a
  /// merged run of them) go to the backend in pieces of large_piece (at
  /// most max_read), not split_piece, each marked ReadRequest::hand_off: io_uring gives them to
  /// its kernel workers, so the pieces of one batch are copied on as many
  /// cores as the process may use, where a page-cache hit read the usual way
  /// is copied by the one I/O engine that submitted it. A 64 MiB sample is
  /// then 32 reads, not a thousand (docs/performance.md, "Large samples").
  /// 0: no such route.
  uint64_t large_above = 1024 * 1024;
  uint64_t large_piece = 2 * 1024 * 1024;
};

/// The reads for a window and the view of each requested extent.
struct DLFEED_EXPORT ReadPlan {
  std::vector<PlannedRead> reads;  // sorted by (file, offset)
  std::vector<PieceView> pieces;   // pieces[i] is extents[i]'s bytes
  uint64_t buffer_bytes = 0;       // sum of read lengths
  uint64_t requested_bytes = 0;    // sum of extent lengths (overlaps counted twice)
};

/// Plans the reads for `extents`: sorted per file by offset; neighbours
/// within max_gap merged; overlapping extents (e.g. the strided samples of
/// one DLIO array) share bytes of one read.
DLFEED_EXPORT ReadPlan plan_reads(std::span<const ExtentRef> extents, const CoalesceOptions& options);

}  // namespace dlfeed::prefetch
