// SPDX-License-Identifier: Apache-2.0
// The storage's own limit for a dataset's access pattern: read exactly the
// sample extents a loader would read, in a given order, with no planning,
// decode or batching, and time it. `dlfeed calibrate` and bench/raw_read
// measure with it; `dlfeed run` compares the loader against the result.
//
//   auto index = dlfeed::open_dataset({"data/train"}, {}).value();
//   DLFEED_RETURN_IF_ERROR(dlfeed::evict_pages(index.files));   // cold cache
//   auto ids = dlfeed::rank_order(dlfeed::FileLayout::of(index), spec).value();
//   dlfeed::RawReadOptions o;
//   o.reader = dlfeed::RawReader::kIoUring;
//   o.queue_depth = 32;
//   o.max_bytes = 256 << 20;                                   // a prefix of the order
//   dlfeed::RawReadResult r = dlfeed::raw_read(index, ids, o).value();
//   printf("%.0f MiB/s\n", r.mib_per_s());
//
// Cold cache without root: fdatasync (dirty pages cannot be dropped), then
// posix_fadvise(POSIX_FADV_DONTNEED) on the whole file. Some file systems
// (tmpfs, some network file systems) ignore the hint; resident_bytes()
// (mincore) tells whether it worked.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI {

struct SampleIndex;

/// How raw_read() reads: io_uring keeping `queue_depth` reads in flight, or
/// one thread issuing one pread at a time.
enum class RawReader { kIoUring, kPread };

/// "io_uring" or "pread".
absl::string_view raw_reader_name(RawReader reader);

/// What raw_read() reads and when it stops.
struct RawReadOptions {
  RawReader reader = RawReader::kIoUring;
  /// io_uring: reads in flight at once (ring entries).
  uint32_t queue_depth = 32;
  /// Stop after the sample that brings the bytes read to at least this many
  /// (0: no limit). A bounded measurement reads a prefix of the order.
  uint64_t max_bytes = 0;
  /// Stop submitting once this much time has passed (0: no limit).
  double max_seconds = 0;
  /// Called with each extent's bytes as it completes (in completion order;
  /// for checking what was read, never set when timing).
  std::function<void(uint64_t sample_id, size_t extent, std::span<const std::byte> bytes)> on_extent;
};

/// What one raw_read() measured.
struct RawReadResult {
  uint64_t samples = 0;    // samples whose extents were all read
  uint64_t requests = 0;   // read requests (one per extent, no coalescing)
  uint64_t bytes = 0;      // bytes read
  double seconds = 0;      // from the first submission to the last completion
  bool truncated = false;  // stopped by max_bytes or max_seconds before the end of `ids`

  double mib_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1048576.0 : 0; }
  double samples_per_s() const { return seconds > 0 ? static_cast<double>(samples) / seconds : 0; }
};

/// Reads the extents of the samples `ids` of `index` (every extent of every
/// sample, in the order of `ids`, one request per extent) into scratch
/// buffers and discards them. Errors name the file, the offset and what was
/// expected (a short file, a missing file, io_uring refused).
absl::StatusOr<RawReadResult> raw_read(const SampleIndex& index, std::span<const uint64_t> ids,
                                       const RawReadOptions& options);

/// Drops the cached pages of `path` (fdatasync, then
/// posix_fadvise(DONTNEED)). Errors name the file.
absl::Status evict_pages(const std::string& path);
/// evict_pages() for every file.
absl::Status evict_pages(std::span<const std::string> paths);

/// Bytes of `path` in the page cache now (mincore over a read-only mapping;
/// 0 for an empty file). Errors name the file.
absl::StatusOr<uint64_t> resident_bytes(const std::string& path);

}  // namespace dlfeed
