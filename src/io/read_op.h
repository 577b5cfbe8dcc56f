// SPDX-License-Identifier: Apache-2.0
// Internal: what every backend shares. One ReadOp per request in flight: where
// it reads (dest, or an aligned bounce buffer in O_DIRECT mode), how much is
// done, and the step that turns one read()'s result into "done / again /
// failed", so io_uring and pread behave identically on short reads, EINTR,
// EAGAIN and end of file.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/io/io_backend.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// O_DIRECT alignment of offsets, lengths and buffers. 4096 covers devices
/// with 512 and 4096 byte logical blocks.
inline constexpr uint64_t kDirectAlign = 4096;
/// Largest single read issued (io_uring's length is 32-bit; pread caps near
/// 2 GiB); bigger requests continue like short reads.
inline constexpr uint64_t kMaxChunk = uint64_t{1} << 30;
/// EAGAIN/EINTR retries of one request before it fails.
inline constexpr uint32_t kMaxRetries = 1000;

/// A 4096-aligned heap buffer.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t capacity);
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), capacity_(o.capacity_) {
    o.data_ = nullptr;
    o.capacity_ = 0;
  }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  ~AlignedBuffer();
  std::byte* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  std::byte* data_ = nullptr;
  size_t capacity_ = 0;
};

/// Reuses bounce buffers (power-of-two capacities); thread-safe.
class BouncePool {
 public:
  AlignedBuffer take(size_t size);
  void give(AlignedBuffer buf);

 private:
  static constexpr size_t kMaxKept = 64;
  std::mutex mu_;
  std::vector<AlignedBuffer> free_;
};

/// Atomic counters behind IoStats.
struct StatsCounters {
  std::atomic<uint64_t> requests{0}, completions{0}, errors{0}, bytes{0}, device_bytes{0}, reads{0}, short_reads{0},
      eagain{0}, eintr{0}, submit_calls{0}, peak_bytes_in_kernel{0}, completed_at_submit{0}, handed_off{0};
  IoStats snapshot() const;
  static void add(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
};

/// One request in flight.
struct ReadOp {
  ReadRequest req;
  FileTable::Pin pin;
  AlignedBuffer bounce;         // O_DIRECT with an unaligned extent or dest
  std::byte* target = nullptr;  // where the reads land
  uint64_t target_offset = 0;   // file offset of target[0]
  uint64_t target_length = 0;   // bytes to ask for
  uint64_t need = 0;            // bytes of target that must be read (covers the extent)
  uint64_t done = 0;            // bytes of target read so far
  uint32_t retries = 0;
  bool direct = false;
  int fixed = -1;           // io_uring: index of the registered buffer used as bounce
  uint64_t in_kernel = 0;   // io_uring: length of the read in the ring
  int fixed_file = -1;      // io_uring: the file's index in the ring's registered files
  bool prepared = false;    // io_uring: file and target set up (pinned or registered)
  bool handed_off = false;  // io_uring: in the ring with IOSQE_ASYNC
  absl::Status status;      // set when the op fails

  /// Sets target/need for buffered or O_DIRECT reading. When O_DIRECT needs
  /// a bounce buffer it uses `fixed_buf` (a registered buffer of
  /// `fixed_capacity` bytes) if the read fits, else one from `pool`. Returns
  /// whether `fixed_buf` was used.
  bool prepare(bool direct_mode, BouncePool* pool, std::byte* fixed_buf = nullptr, uint64_t fixed_capacity = 0);
  /// The next read: file offset, destination and length. A buffered
  /// scattered read (req.piece_count > 0, not O_DIRECT) has no one
  /// destination (target is null): it reads into next_iovecs().
  uint64_t next_offset() const { return target_offset + done; }
  std::byte* next_dest() const { return target == nullptr ? nullptr : target + done; }
  uint64_t next_length() const;
  bool scattered() const { return target == nullptr && req.piece_count > 0; }
  /// A scattered read's pieces from `done` on, in iov (valid until the next
  /// call; io_uring keeps it for the read in the ring). Returns the count.
  int next_iovecs();
  struct iovec iov[kMaxReadPieces];

  enum class Step { kDone, kAgain, kFailed };
  /// Applies one read's result (bytes, or -errno). kDone: the extent is in
  /// dest (bounce copied out). kFailed: `status` says why. kAgain: issue
  /// next_*() again. Counts retries in `stats`.
  Step on_result(int64_t res, const FileTable& files, StatsCounters& stats);

  /// The completion for this op (and gives the bounce buffer back).
  ReadCompletion finish(BouncePool* pool, StatsCounters& stats);
};

/// Test-only: rewrites read results where every backend sees them, so tests
/// can make the kernel "return" short reads, EINTR/EAGAIN storms or EIO and
/// check that the real retry path (the same for io_uring and pread) handles
/// them. Injecting here rather than around IoBackend is deliberate: a
/// wrapper around a backend only sees final completions, after the retries
/// this is meant to exercise.
class ReadFaultInjector {
 public:
  virtual ~ReadFaultInjector() = default;
  /// Given the read the backend just issued (file offset, the buffer it
  /// read into (null for a scattered read, which reads into its pieces), the length asked for, whether it was O_DIRECT)
  /// and its result (bytes, or -errno), returns the result to act on. Returning fewer bytes than were read (whole
  /// 4096-byte blocks with O_DIRECT), -EINTR or -EAGAIN is always safe: the rest is read again. -EIO fails the request.
  /// Called concurrently from backend threads.
  virtual int64_t on_read(const ReadRequest& req, uint64_t offset, std::byte* target, uint64_t length, bool direct,
                          int64_t res) = 0;
};
/// Installs `injector` for every backend in the process (nullptr removes
/// it). Set it while no read is in flight; it must outlive those reads.
void set_read_fault_injector(ReadFaultInjector* injector);

/// Checks a batch before accepting it (ids known, dest or pieces set).
absl::Status validate_requests(const FileTable& files, std::span<const ReadRequest> requests);
/// A scattered read's pieces (`path`: its file's, for the error): at most
/// kMaxReadPieces, each with a destination, their lengths adding up to the
/// read's, the checksum's piece one of them.
absl::Status validate_pieces(const std::string& path, const ReadRequest& r);

/// The request's `length` bytes, lying end to end at `from`, to its dest or
/// in order to its pieces, each by copy(to, from, n).
template <typename Copy>
void copy_out(const ReadRequest& r, const std::byte* from, Copy&& copy) {
  if (r.piece_count == 0) {
    if (r.length > 0) copy(r.dest, from, r.length);
    return;
  }
  for (uint32_t k = 0; k < r.piece_count; from += r.pieces[k].length, ++k) {
    if (r.pieces[k].length > 0) copy(r.pieces[k].dest, from, r.pieces[k].length);
  }
}
/// Sets c's CRC32C when `r` asked for one: of its dest, or of its
/// checksum_piece when scattered. Call as the bytes land.
void take_checksum(const ReadRequest& r, ReadCompletion& c);

/// An error completion for a request that never started because its file
/// would not open: `status` is the open's error ("PATH: open failed..."),
/// which the completion names with the offset the read was for.
ReadCompletion failed_completion(const ReadRequest& req, const FileTable& files, absl::Status status,
                                 StatsCounters& stats);

/// Backend factories (defined in uring_backend.cc / pread_backend.cc).
absl::StatusOr<std::unique_ptr<IoBackend>> make_uring_backend(std::shared_ptr<FileTable> files,
                                                              const IoOptions& options);
std::unique_ptr<IoBackend> make_pread_backend(std::shared_ptr<FileTable> files, const IoOptions& options,
                                              uint32_t threads);
/// Sets up a small ring and reads one byte through it; the error says why not.
absl::Status probe_io_uring();

}  // namespace dlfeed::detail
