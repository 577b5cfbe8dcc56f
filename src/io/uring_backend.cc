// SPDX-License-Identifier: Apache-2.0
// The io_uring backend: one ring per backend, driven by the thread that calls
// submit()/reap(). Requests wait in `pending_` until the ring has room (at
// most queue_depth reads are in the kernel, so the completion queue, twice
// that size, never overflows); a batch is handed over with one
// io_uring_submit. Reads also wait while `max_bytes_in_flight` bytes are in
// the kernel, so a large read's pieces go in a few at a time (in the order
// the I/O engine gives: IoEngine::interleave_large). Completions
// are turned into done / again / failed by the shared ReadOp step, so a short
// read goes back to the front of `pending_` for its remainder.
//
// Reads asking for a checksum (ReadRequest::checksum) have their CRC taken
// as their completion is processed, before the next submit copies more. While
// the last submit's reads all completed in it (page-cache hits), they go to
// the kernel in rounds of at most `checksum_round_bytes`, so the bytes a CRC
// reads were copied a few hundred KiB ago and are still in the core's caches;
// a cold read's completion comes later anyway, and rounds would only cut the
// queue depth, so then there are none.
//
// Reads marked ReadRequest::hand_off (pieces of large extents) go in with
// IOSQE_ASYNC while the page cache holds them: a kernel worker (io-wq) does
// each, so the copies of one batch's page-cache hits run on many cores rather
// than on the engine thread that submits. The ring lets at most as many
// workers run as the process has cores, keeps at most twice that many
// handed-off reads in the kernel, and leaves them out of max_bytes_in_flight
// (the workers, not the bytes, are what bounds them; the bytes are the
// batch's own slots). While the cache does not hold them they go in as plain
// reads instead, which the kernel serves asynchronously with its read-ahead,
// as many at once as max_bytes_in_flight allows and at least twice the
// workers: a worker blocks on the device for its whole read, so the workers
// would bound the reads in flight to the cores
// (bench/results/vm-2026-11-30-cold-plain). Which of the two: cold from a submit
// that held large pieces in the ring and not all of its plain reads
// completed in it (while warm, one piece in kProbeEvery probes the cache
// there); warm again after kWarmAfter such submits in a row that all did.
//
// Files are pinned when a read is put in the ring (not at submit), with
// FileTable::try_pin, so a ring with many requests for many files keeps no
// more descriptors open than the table's cap: when the cap is reached the
// next request waits for one of ours to complete. A small dataset's files are
// instead registered with the ring on first use (IoOptions::register_files)
// and held open by one pin each until the backend goes.

#include <liburing.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlfeed/error.h"
#include "io/read_op.h"

namespace dlfeed::inline DLFEED_ABI::detail {
namespace {

constexpr uint32_t kMaxQueueDepth = 4096;
// Most files registered with a ring (IoOptions::register_files).
constexpr size_t kMaxRegisteredFiles = 1024;

std::string errno_text(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

class UringBackend final : public IoBackend {
 public:
  UringBackend(std::shared_ptr<FileTable> files, const IoOptions& options, uint32_t depth)
      : files_(std::move(files)),
        direct_(options.direct),
        depth_(depth),
        max_bytes_(options.max_bytes_in_flight),
        checksum_round_(options.checksum_round_bytes),
        want_registered_(options.register_files) {}

  absl::Status init() {
    int ret = io_uring_queue_init(depth_, &ring_, 0);
    if (ret < 0) {
      return absl::UnavailableError(absl::StrCat("io_uring_queue_init(", depth_, ") failed: ", errno_text(-ret)));
    }
    ring_ok_ = true;
    if (direct_) register_bounce_buffers();
    // Kernel workers for handed-off reads: as many as the cores we may run
    // on. A kernel without the call (before 5.15) keeps its own bound.
    cpu_set_t set;
    CPU_ZERO(&set);
    const int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
    workers_ = static_cast<uint32_t>(std::max(1, cpus));
    unsigned limits[2] = {workers_, 0};  // bounded (regular files), unbounded: unchanged
    (void)io_uring_register_iowq_max_workers(&ring_, limits);
    const size_t n = files_->size();
    if (want_registered_ && n > 0 && n <= kMaxRegisteredFiles && n <= files_->max_open() / 2 &&
        io_uring_register_files_sparse(&ring_, static_cast<unsigned>(n)) == 0) {
      registered_.assign(n, false);
      registered_pins_.resize(n);
      registered_redirections_ = files_->redirections();
    }
    return absl::OkStatus();
  }

  ~UringBackend() override {
    if (!ring_ok_) return;
    pending_.clear();
    // Reads the kernel owns write into caller buffers and our bounce
    // buffers: wait for them before anything is freed.
    flush();
    while (in_ring_ > unsubmitted_) {
      struct io_uring_cqe* cqe = nullptr;
      int ret = io_uring_wait_cqe(&ring_, &cqe);
      if (ret == -EINTR) continue;
      if (ret < 0) break;  // ring broken: nothing more will arrive
      unsigned head;
      unsigned seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        if (cqe->user_data != LIBURING_UDATA_TIMEOUT) --in_ring_;
      }
      io_uring_cq_advance(&ring_, seen);
    }
    io_uring_queue_exit(&ring_);
  }

  absl::Status submit(std::span<const ReadRequest> requests) override {
    DLFEED_RETURN_IF_ERROR(validate_requests(*files_, requests));
    StatsCounters::add(stats_.requests, requests.size());
    in_flight_ += requests.size();
    for (const ReadRequest& r : requests) {
      uint32_t slot = alloc_slot();
      ops_[slot]->req = r;
      pending_.push_back(slot);
    }
    fill();
    flush();
    return absl::OkStatus();
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_completions, std::chrono::nanoseconds timeout) override {
    using Clock = std::chrono::steady_clock;
    bool forever = timeout >= std::chrono::hours(24 * 365);
    Clock::time_point deadline = forever ? Clock::time_point::max() : Clock::now() + timeout;
    size_t got = 0;
    for (;;) {
      process_completions();
      fill();
      flush();
      while (!ready_.empty()) {
        out.push_back(std::move(ready_.front()));
        ready_.pop_front();
        --in_flight_;
        ++got;
      }
      if (got >= min_completions || in_flight_ == 0) return got;
      Clock::time_point now = Clock::now();
      if (now >= deadline) return got;
      if (in_ring_ == unsubmitted_) {
        // Nothing the kernel can complete (submission refused for now): back off.
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      struct io_uring_cqe* cqe = nullptr;
      int ret;
      if (forever) {
        ret = io_uring_wait_cqe(&ring_, &cqe);
      } else {
        auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
        struct __kernel_timespec ts {};
        ts.tv_sec = left / 1000000000;
        ts.tv_nsec = left % 1000000000;
        ret = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
      }
      (void)ret;  // -ETIME, -EINTR or a CQE: the loop looks again either way
    }
  }

  size_t in_flight() const override { return in_flight_; }
  std::string name() const override {
    std::string s = direct_ ? (fixed_.empty() ? "io_uring+direct" : "io_uring+direct+fixed") : "io_uring";
    if (!registered_.empty()) s += "+files";
    return s;
  }
  IoStats stats() const override { return stats_.snapshot(); }

 private:
  // O_DIRECT reads at unaligned offsets or into unaligned destinations go
  // through a bounce buffer. One registered buffer per ring slot serves the
  // common sizes with read_fixed (the kernel maps it once, not per read);
  // larger reads, or a kernel/memlock limit that refuses registration, use
  // the plain pool.
  void register_bounce_buffers() {
    std::vector<AlignedBuffer> bufs;
    std::vector<struct iovec> iov;
    for (uint32_t i = 0; i < depth_; ++i) {
      bufs.emplace_back(kFixedBytes);
      iov.push_back({bufs.back().data(), kFixedBytes});
    }
    if (io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size())) < 0) return;
    fixed_ = std::move(bufs);
    for (uint32_t i = 0; i < depth_; ++i) free_fixed_.push_back(static_cast<int>(depth_ - 1 - i));
  }

  // The file's index in the ring's file table, registering it on first use;
  // -1 when it is not (to be) registered: the read then pins an fd as usual,
  // which also reports an open failure.
  int registered_file(uint32_t id) {
    if (id >= registered_.size()) return -1;
    if (const uint64_t r = files_->redirections(); r != registered_redirections_) {
      // A file may now be elsewhere (a staged copy): drop every registration
      // and its pin, and register again on next use. Reads in the ring keep
      // the file they were issued with.
      registered_redirections_ = r;
      for (uint32_t f = 0; f < registered_.size(); ++f) {
        if (!registered_[f]) continue;
        int none = -1;
        io_uring_register_files_update(&ring_, f, &none, 1);
        registered_[f] = false;
        registered_pins_[f].reset();
      }
    }
    if (registered_[id]) return static_cast<int>(id);
    auto pin = in_ring_ > 0 ? files_->try_pin(id) : files_->pin(id);
    if (!pin.ok() || !*pin) return -1;
    int fd = pin->fd();
    if (io_uring_register_files_update(&ring_, id, &fd, 1) != 1) return -1;
    registered_[id] = true;
    registered_pins_[id] = *std::move(pin);
    return static_cast<int>(id);
  }

  uint32_t alloc_slot() {
    if (free_slots_.empty()) {
      ops_.push_back(std::make_unique<ReadOp>());
      return static_cast<uint32_t>(ops_.size() - 1);
    }
    uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }

  void release_slot(uint32_t slot) {
    *ops_[slot] = ReadOp();
    free_slots_.push_back(slot);
  }

  void complete(uint32_t slot, ReadCompletion c) {
    ready_.push_back(std::move(c));
    if (ops_[slot]->fixed >= 0) free_fixed_.push_back(ops_[slot]->fixed);
    release_slot(slot);
  }

  enum class Prep { kReady, kDone, kWait };
  // Sets up the front pending read `slot` once: its file pinned (or its
  // registered index) and its target. kDone: it completed instead (empty, or
  // its file failed) and left the queue; kWait: the descriptor cap is
  // reached (a completion of ours frees one).
  Prep prepare_front(uint32_t slot) {
    ReadOp& op = *ops_[slot];
    if (op.prepared) return Prep::kReady;
    if (op.req.length == 0) {
      pending_.pop_front();
      complete(slot, op.finish(nullptr, stats_));
      return Prep::kDone;
    }
    op.fixed_file = registered_file(op.req.file);
    if (op.fixed_file < 0) {
      // With reads of ours in the ring we can wait for their fds; with
      // none, go over the cap rather than stall.
      auto pin = in_ring_ > 0 ? files_->try_pin(op.req.file) : files_->pin(op.req.file);
      if (!pin.ok()) {
        pending_.pop_front();
        complete(slot, failed_completion(op.req, *files_, std::move(pin).status(), stats_));
        return Prep::kDone;
      }
      if (!*pin) return Prep::kWait;  // fd cap reached: wait for a completion
      op.pin = *std::move(pin);
    }
    op.prepared = true;
    if (!free_fixed_.empty()) {
      const int f = free_fixed_.back();
      if (op.prepare(direct_, &pool_, fixed_[f].data(), kFixedBytes)) {
        op.fixed = f;
        free_fixed_.pop_back();
      }
    } else {
      op.prepare(direct_, &pool_);
    }
    return Prep::kReady;
  }

  // Moves pending reads into SQEs while the ring has room.
  void fill() {
    while (!pending_.empty() && in_ring_ < depth_) {
      uint32_t slot = pending_.front();
      ReadOp& op = *ops_[slot];
      const Prep prep = prepare_front(slot);
      if (prep == Prep::kDone) continue;
      if (prep == Prep::kWait) break;
      const uint64_t len = op.next_length();
      const bool large = op.req.hand_off && !op.direct && op.fixed < 0 && !op.scattered();
      const bool hand_off = large && !large_cold_ && large_seen_ % kProbeEvery != 0;
      // Large pieces as plain reads (cold): at least as many in flight as
      // handed off (twice the workers), whatever max_bytes_in_flight.
      const uint64_t cap = large ? std::max<uint64_t>(max_bytes_, uint64_t{2} * workers_ * len) : max_bytes_;
      if (hand_off ? handed_in_ring_ >= 2 * workers_
                   : cap > 0 && in_ring_ > handed_in_ring_ && bytes_in_ring_ + len > cap) {
        break;  // in order: wait
      }
      const bool checksum = op.req.checksum && !op.direct;
      if (checksum && warm_ && checksum_round_ > 0 && checksum_in_ring_ > 0 &&
          checksum_in_ring_ + len > checksum_round_) {
        break;  // the round is full: its CRCs first, while its bytes are in the caches
      }
      struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {
        flush();
        sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) break;
      }
      const int fd = op.fixed_file >= 0 ? op.fixed_file : op.pin.fd();
      if (op.fixed >= 0) {
        io_uring_prep_read_fixed(sqe, fd, op.next_dest(), static_cast<unsigned>(len), op.next_offset(), op.fixed);
      } else if (op.scattered()) {
        io_uring_prep_readv(sqe, fd, op.iov, static_cast<unsigned>(op.next_iovecs()), op.next_offset());
      } else {
        io_uring_prep_read(sqe, fd, op.next_dest(), static_cast<unsigned>(len), op.next_offset());
      }
      if (op.fixed_file >= 0) sqe->flags |= IOSQE_FIXED_FILE;
      op.in_kernel = len;
      op.handed_off = hand_off;
      if (hand_off) {
        sqe->flags |= IOSQE_ASYNC;
        ++handed_in_ring_;
        ++handed_unsubmitted_;
        StatsCounters::add(stats_.handed_off);
      } else {
        bytes_in_ring_ += len;
        if (large) ++large_unsubmitted_;
      }
      if (large) ++large_seen_;
      if (checksum) checksum_in_ring_ += len;
      if (bytes_in_ring_ > stats_.peak_bytes_in_kernel.load(std::memory_order_relaxed)) {
        stats_.peak_bytes_in_kernel.store(bytes_in_ring_, std::memory_order_relaxed);  // one writer: this thread
      }
      io_uring_sqe_set_data64(sqe, slot);
      pending_.pop_front();
      ++in_ring_;
      ++unsubmitted_;
      StatsCounters::add(stats_.reads);
    }
  }

  // Hands prepared SQEs to the kernel (one syscall for the batch).
  void flush() {
    if (unsubmitted_ == 0) return;
    const unsigned ready_before = io_uring_cq_ready(&ring_);
    int ret = io_uring_submit(&ring_);
    StatsCounters::add(stats_.submit_calls);
    if (ret > 0) {
      unsubmitted_ -= std::min<size_t>(unsubmitted_, static_cast<size_t>(ret));
      const unsigned ready_after = io_uring_cq_ready(&ring_);
      const unsigned at_submit = ready_after > ready_before ? std::min<unsigned>(ready_after - ready_before, ret) : 0;
      if (at_submit > 0) StatsCounters::add(stats_.completed_at_submit, at_submit);
      warm_ = at_submit == static_cast<unsigned>(ret);
      // Handed-off reads do not complete at submit (but rarely, on another
      // core, during a long one): of the rest, did all?
      const unsigned plain = static_cast<unsigned>(ret) - std::min<unsigned>(handed_unsubmitted_, ret);
      // A partial submit (an SQE the kernel refused) says nothing reliable.
      if (large_unsubmitted_ > 0 && unsubmitted_ == 0) {
        // Cold at the first miss; warm again only after kWarmAfter submits
        // in a row that all hit (a cold file's read-ahead makes many hit).
        if (at_submit < plain) {
          large_cold_ = true;
          large_hits_in_row_ = 0;
        } else if (large_cold_ && ++large_hits_in_row_ >= kWarmAfter) {
          large_cold_ = false;
        }
      }
      large_unsubmitted_ = 0;
      handed_unsubmitted_ = 0;
    }
    // ret < 0 (EAGAIN, EBUSY, EINTR): the SQEs stay queued; the next flush
    // hands them over.
  }

  void process_completions() {
    unsigned head;
    unsigned seen = 0;
    struct io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      if (cqe->user_data == LIBURING_UDATA_TIMEOUT) continue;
      auto slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
      --in_ring_;
      ReadOp& op = *ops_[slot];
      if (op.handed_off) {
        --handed_in_ring_;
        op.handed_off = false;
      } else {
        bytes_in_ring_ -= op.in_kernel;
      }
      if (op.req.checksum && !op.direct) checksum_in_ring_ -= op.in_kernel;
      op.in_kernel = 0;
      switch (op.on_result(cqe->res, *files_, stats_)) {
        case ReadOp::Step::kAgain:
          pending_.push_front(slot);  // the remainder, ahead of new work
          break;
        case ReadOp::Step::kDone:
        case ReadOp::Step::kFailed: complete(slot, op.finish(&pool_, stats_)); break;
      }
    }
    io_uring_cq_advance(&ring_, seen);
  }

  std::shared_ptr<FileTable> files_;
  bool direct_;
  uint32_t depth_;
  uint64_t max_bytes_;             // bytes in the kernel at once (0: no limit)
  uint64_t bytes_in_ring_ = 0;     // ... now (handed-off reads not counted)
  uint32_t workers_ = 1;           // kernel workers for handed-off reads (the cores we may use)
  uint32_t handed_in_ring_ = 0;    // handed-off reads in the ring
  uint64_t checksum_round_;        // bytes of checksum reads per round while warm (0: no rounds)
  uint64_t checksum_in_ring_ = 0;  // bytes of checksum reads in the ring now
  bool warm_ = false;              // the last submit's reads all completed in it
  // Large pieces (ReadRequest::hand_off): whether the cache did not hold the
  // last ones put in the ring as plain reads; those seen so far; and, since
  // the last submit, those put in as plain reads and all handed-off reads.
  static constexpr uint64_t kProbeEvery = 16;
  static constexpr uint32_t kWarmAfter = 16;
  bool large_cold_ = false;
  uint32_t large_hits_in_row_ = 0;
  uint64_t large_seen_ = 0;
  uint32_t large_unsubmitted_ = 0;
  uint32_t handed_unsubmitted_ = 0;
  bool want_registered_;
  std::vector<bool> registered_;                 // file id -> in the ring's file table (empty: not used)
  std::vector<FileTable::Pin> registered_pins_;  // ... held open until the backend goes
  uint64_t registered_redirections_ = 0;         // files_->redirections() when they were registered
  struct io_uring ring_ {};
  bool ring_ok_ = false;

  BouncePool pool_;
  static constexpr uint64_t kFixedBytes = 256 * 1024;
  std::vector<AlignedBuffer> fixed_;  // registered with the ring (O_DIRECT bounce)
  std::vector<int> free_fixed_;
  StatsCounters stats_;
  std::vector<std::unique_ptr<ReadOp>> ops_;  // slot -> op (user_data is the slot)
  std::vector<uint32_t> free_slots_;
  std::deque<uint32_t> pending_;      // accepted, not in the ring
  std::deque<ReadCompletion> ready_;  // done, not reaped
  size_t in_ring_ = 0;                // SQEs prepared or in the kernel
  size_t unsubmitted_ = 0;            // ... of which not yet submitted
  size_t in_flight_ = 0;              // accepted, not reaped
};

}  // namespace

absl::StatusOr<std::unique_ptr<IoBackend>> make_uring_backend(std::shared_ptr<FileTable> files,
                                                              const IoOptions& options) {
  uint32_t depth = std::clamp<uint32_t>(options.queue_depth, 1, kMaxQueueDepth);
  auto backend = std::make_unique<UringBackend>(std::move(files), options, depth);
  DLFEED_RETURN_IF_ERROR(backend->init());
  return std::unique_ptr<IoBackend>(std::move(backend));
}

absl::Status probe_io_uring() {
  struct io_uring ring {};
  int ret = io_uring_queue_init(4, &ring, 0);
  if (ret < 0) {
    std::string hint;
    if (ret == -ENOSYS) hint = " (kernel without io_uring)";
    if (ret == -EPERM) hint = " (refused: seccomp sandbox or kernel.io_uring_disabled)";
    if (ret == -ENOMEM) hint = " (RLIMIT_MEMLOCK too small for the ring?)";
    return absl::UnavailableError(absl::StrCat("io_uring_queue_init failed: ", errno_text(-ret), hint));
  }
  absl::Status status;
  int fds[2];
  if (::pipe(fds) != 0) {
    status = absl::UnavailableError(absl::StrCat("pipe for the io_uring probe: ", errno_text(errno)));
  } else {
    char out = 'x';
    static char in;  // static: stays valid even if the kernel were late
    in = 0;
    if (::write(fds[1], &out, 1) != 1) {
      status = absl::UnavailableError("write to the io_uring probe pipe failed");
    } else {
      struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_read(sqe, fds[0], &in, 1, 0);
      ret = io_uring_submit(&ring);
      struct io_uring_cqe* cqe = nullptr;
      struct __kernel_timespec ts {};
      ts.tv_sec = 1;
      if (ret != 1) {
        status = absl::UnavailableError(absl::StrCat("io_uring_submit of a probe read failed: ",
                                                     ret < 0 ? errno_text(-ret) : absl::StrCat("returned ", ret)));
      } else if ((ret = io_uring_wait_cqe_timeout(&ring, &cqe, &ts)) < 0) {
        status = absl::UnavailableError(absl::StrCat("no completion for an io_uring probe read: ", errno_text(-ret)));
      } else if (cqe->res != 1 || in != 'x') {
        status = absl::UnavailableError(absl::StrCat(
            "io_uring probe read returned ", cqe->res < 0 ? errno_text(-cqe->res) : absl::StrCat(cqe->res, " bytes"),
            " (IORING_OP_READ unsupported?)"));
        io_uring_cqe_seen(&ring, cqe);
      } else {
        io_uring_cqe_seen(&ring, cqe);
      }
    }
    ::close(fds[0]);
    ::close(fds[1]);
  }
  io_uring_queue_exit(&ring);
  return status;
}

}  // namespace dlfeed::detail
