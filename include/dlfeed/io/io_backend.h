// SPDX-License-Identifier: Apache-2.0
// Batched positional reads: the layer under the prefetch planner.
//
// A backend takes batches of read requests (file id, offset, length,
// destination) and hands back one completion per request, in any order:
//
//   auto files = std::make_shared<dlfeed::FileTable>();
//   auto io = dlfeed::make_io_backend(files, {});   // io_uring if it works
//   std::vector<dlfeed::ReadRequest> reqs = ...;    // dest buffers owned by caller
//   DLFEED_RETURN_IF_ERROR((*io)->submit(reqs));
//   std::vector<dlfeed::ReadCompletion> done;
//   while ((*io)->in_flight() > 0) (*io)->reap(done, 1, std::chrono::seconds(1));
//
// Why this shape: the planner knows many reads ahead, so submission is a
// batch (one io_uring_enter for the batch) and reaping is a batch with a
// minimum count and a timeout, so the caller can block for "at least one" or
// poll with a zero timeout. user_data is returned untouched to match
// completions to requests.
//
// Contract:
// - A completion is delivered once the whole request is read (short reads are
//   resubmitted for the remainder, EINTR/EAGAIN retried) or it has failed.
//   Reading past the end of the file fails, naming the file, the offset, the
//   length expected and the bytes available.
// - Every accepted request yields exactly one completion, errors included (a
//   file that cannot be opened is an error completion, not a submit error).
// - `dest` must stay valid until the request's completion is reaped or the
//   backend is destroyed. Destroying a backend with reads in flight drops
//   them (waiting for those already handed to the kernel / a thread) and
//   joins its threads.
// - One thread drives a backend: submit() and reap() must not be called
//   concurrently with each other.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI {

class FileTable;

/// One destination of a scattered read (ReadRequest::pieces).
struct DLFEED_EXPORT ReadPiece {
  std::byte* dest = nullptr;
  uint64_t length = 0;
};
/// Most pieces one scattered read may have.
inline constexpr uint32_t kMaxReadPieces = 8;

/// Read `length` bytes at `offset` of file `file` (an id in the backend's
/// FileTable) into `dest`.
struct DLFEED_EXPORT ReadRequest {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::byte* dest = nullptr;
  uint64_t user_data = 0;
  /// Also give the CRC32C of the bytes read (ReadCompletion::crc32c), taken
  /// by the backend as the read completes, while the bytes are still in the
  /// caches, rather than by the caller later from memory. A backend may
  /// leave it out (has_crc32c false); the built-in ones do not.
  bool checksum = false;
  /// A scattered read (when piece_count > 0): the `length` bytes at `offset`
  /// go to the pieces in order (their lengths add up to `length`; `dest` is
  /// not used), one request and one read of the file, as preadv and
  /// IORING_OP_READV do; O_DIRECT reads it into a bounce buffer and copies
  /// the pieces out. The array must stay valid until the completion is
  /// reaped. The checksum is then of piece `checksum_piece` only.
  const ReadPiece* pieces = nullptr;
  uint32_t piece_count = 0;
  uint32_t checksum_piece = 0;
  /// A hint: this read is a piece of a large extent, so large that handing
  /// it to another thread costs little beside its copy. A backend whose
  /// page-cache hits are copied by the thread that submits (io_uring) may
  /// give it to kernel workers instead (IOSQE_ASYNC), so the pieces of one
  /// batch copy on many cores at once. Backends may ignore it.
  bool hand_off = false;
  /// The step of the loader's known order this read is for
  /// (ObjectUses::step(epoch, batch)), so that an object store's bounded
  /// cache keeps what is used soonest; ~0: not known. Backends may ignore it.
  uint64_t use_at = ~uint64_t{0};
};

/// The outcome of one ReadRequest.
struct DLFEED_EXPORT ReadCompletion {
  uint64_t user_data = 0;
  absl::Status status;      // OK, or an error naming file, offset, expected vs got
  uint64_t bytes = 0;       // bytes placed in dest (== length when OK)
  bool has_crc32c = false;  // OK and the request asked for its checksum
  uint32_t crc32c = 0;      // CRC32C of the `bytes` placed in dest (when has_crc32c)
};

/// Counters of a backend (a snapshot; monotonic since creation).
struct DLFEED_EXPORT IoStats {
  uint64_t requests = 0;      // requests accepted by submit()
  uint64_t completions = 0;   // completions delivered by reap()
  uint64_t errors = 0;        // ... of which failed
  uint64_t bytes = 0;         // bytes delivered to dest by successful requests
  uint64_t device_bytes = 0;  // bytes read from files (> bytes with O_DIRECT alignment)
  uint64_t reads = 0;         // read operations issued (SQEs / pread calls)
  uint64_t retries = 0;       // short_reads + eagain + eintr
  uint64_t short_reads = 0;   // reads resubmitted for the remainder
  uint64_t eagain = 0;
  uint64_t eintr = 0;
  uint64_t submit_calls = 0;          // io_uring_submit calls (io_uring only)
  uint64_t peak_bytes_in_kernel = 0;  // most bytes of reads in the ring at once (io_uring only)
  /// Reads complete when the call that submitted them returned: page-cache
  /// hits, which the kernel copies on the submitting thread (io_uring: CQEs
  /// that appeared during io_uring_submit; sync: every read; thread_pool: 0).
  uint64_t completed_at_submit = 0;
  /// Reads given to kernel workers (ReadRequest::hand_off; io_uring only):
  /// they never complete at submit, whether or not the page cache held them.
  uint64_t handed_off = 0;
};

enum class IoKind {
  kAuto,        // io_uring when it works here, else the thread pool
  kIoUring,     // io_uring or an error
  kThreadPool,  // N threads doing pread
  kSync,        // pread inside submit(): the baseline
};

/// "auto", "io_uring", "thread_pool", "sync".
DLFEED_EXPORT absl::string_view io_kind_name(IoKind kind);
/// Parses io_kind_name()'s strings.
DLFEED_EXPORT absl::StatusOr<IoKind> parse_io_kind(absl::string_view name);

struct DLFEED_EXPORT IoOptions {
  IoKind kind = IoKind::kAuto;
  /// io_uring: ring entries and most reads in the kernel at once.
  uint32_t queue_depth = 64;
  /// io_uring: most bytes of reads in the kernel at once (0: no limit; one
  /// read is always let in, whatever its size). Small random reads are
  /// bounded by queue_depth; this bounds large ones, so a sequential stream
  /// is a few large reads in file order (which the kernel's read-ahead
  /// follows) rather than dozens scattered over the file.
  uint64_t max_bytes_in_flight = 16ull << 20;
  /// io_uring: while reads complete when submitted (page-cache hits, copied
  /// by the submitting thread), the reads asking for a checksum go to the
  /// kernel in rounds of at most this many bytes, so each one's bytes are
  /// still in the core's caches when its CRC is taken (0: no rounds).
  uint64_t checksum_round_bytes = 512 * 1024;
  /// io_uring: register the files with the ring (reads then skip the
  /// kernel's per-read file lookup and reference count) when the table has
  /// at most 1024 files and at most half its fd cap: each file stays open
  /// from its first read until the backend is destroyed, or until the table
  /// redirects a file (staging), when every registration is dropped and made
  /// again on next use. Larger datasets keep the plain path, where the fd
  /// cache may close files.
  bool register_files = true;
  /// thread_pool: number of reader threads.
  uint32_t threads = 4;
  /// Read with O_DIRECT: the FileTable must be opened with direct = true.
  /// Each request reads the 4096-aligned superset of its extent into an
  /// aligned bounce buffer and copies the exact bytes out (a copy, unless
  /// offset, length and dest are all aligned, which reads straight to dest).
  bool direct = false;
};

class DLFEED_EXPORT IoBackend {
 public:
  virtual ~IoBackend() = default;

  /// Accepts a batch. Returns InvalidArgument (accepting none of the batch)
  /// for an unknown file id or a null dest with a nonzero length; every
  /// other problem becomes an error completion.
  virtual absl::Status submit(std::span<const ReadRequest> requests) = 0;

  /// Appends completions to `out`. Returns when at least `min_completions`
  /// were appended, when `timeout` has passed (std::chrono::nanoseconds::max()
  /// waits without limit, zero only drains what is ready), or when nothing is
  /// in flight any more. Returns the number appended.
  virtual size_t reap(std::vector<ReadCompletion>& out, size_t min_completions, std::chrono::nanoseconds timeout) = 0;

  /// Requests submitted whose completion has not been reaped yet.
  virtual size_t in_flight() const = 0;

  /// Asks the requests in flight now to end soon, each as a completion (an
  /// error when it did not finish): their epoch is given up, or the loader
  /// is closing. Requests submitted later run as usual. A backend whose
  /// reads end on their own (files) need do nothing; one whose requests wait
  /// on a network and retry (dlfeed::s3) stops waiting. Wrappers pass it on
  /// (a backend of an io_factory that wraps another must too). It may be
  /// called from another thread while submit() or reap() run.
  virtual void cancel() {}

  /// "io_uring", "thread_pool", "sync" (with "+direct" in O_DIRECT mode).
  virtual std::string name() const = 0;
  virtual IoStats stats() const = 0;

  /// Why kAuto did not pick io_uring ("" when it did, or for explicit kinds).
  const std::string& fallback_reason() const { return fallback_reason_; }

 protected:
  std::string fallback_reason_;
  friend absl::StatusOr<std::unique_ptr<IoBackend>> make_io_backend(std::shared_ptr<FileTable>, IoOptions);
};

/// Makes a backend reading the files of `files` (shared: the table outlives
/// the backend). kAuto probes io_uring (ring set-up and one tiny read); when
/// the kernel or a sandbox refuses it (ENOSYS, EPERM, ENOMEM, ...) it falls
/// back to the thread pool, records fallback_reason() and logs it once per
/// process to stderr. kIoUring returns Unavailable with the reason instead.
DLFEED_EXPORT absl::StatusOr<std::unique_ptr<IoBackend>> make_io_backend(std::shared_ptr<FileTable> files,
                                                                         IoOptions options = {});

/// Makes a backend for a table: what AdvancedOptions::io_factory holds, so a
/// caller can put its own backend (or a wrapper around make_io_backend's,
/// e.g. one injecting faults in tests) under a Loader.
using IoBackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<IoBackend>>(std::shared_ptr<FileTable>, IoOptions)>;

/// Wraps `inner` and enforces the contract above on what it returns: an OK
/// completion whose byte count is not its request's length, a completion
/// for no request in flight, or a second completion for one request becomes
/// an error completion naming the file, the offset and the counts (or is
/// dropped and counted in stats().errors when it cannot be matched), so a
/// broken backend yields a clear error, never a sample with stale bytes. The
/// Loader wraps every backend from AdvancedOptions::io_factory in it; the
/// built-in backends keep the contract by construction and are not wrapped.
DLFEED_EXPORT std::unique_ptr<IoBackend> make_checked_backend(std::unique_ptr<IoBackend> inner,
                                                              std::shared_ptr<FileTable> files);

/// Whether io_uring works in this process (OK) or why not. Cached after the
/// first call.
DLFEED_EXPORT absl::Status io_uring_available();

/// posix_fadvise(WILLNEED) for each request's extent: a hint so buffered
/// reads (thread_pool, sync, io_uring without O_DIRECT) find the pages
/// cached. Errors (unknown id, open failure) are ignored: it is only a hint.
DLFEED_EXPORT void advise_willneed(FileTable& files, std::span<const ReadRequest> requests);

}  // namespace dlfeed
