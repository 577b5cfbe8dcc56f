// SPDX-License-Identifier: Apache-2.0
// Private: the I/O engine. One thread owns an IoBackend, submits each batch
// of reads handed to it as one submission and reaps completions, so the ring
// is long-lived and submission is batched. It knows nothing of the pipeline:
// a batch is a list of reads and a callback for when they have all landed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/io/io_backend.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// Reads submitted together and reported on once.
struct ReadBatch {
  /// What to read (user_data is the engine's own). The buffers under `dest`
  /// must stay valid until `done` has been called.
  std::vector<ReadRequest> reads;
  /// Called once: OK when every read completed, else the first error (a read's,
  /// the backend's refusal, or Cancelled). On the engine's thread, or on the
  /// thread calling cancel_pending().
  std::function<void(const absl::Status&)> done;
  /// Per read of `reads` asking for its checksum (ReadRequest::checksum):
  /// its CRC32C, where crc_known is 1 (the backend gave it). Sized like
  /// `reads` by the submitter when any read asks; written by the engine
  /// before done(). A read the engine issues in pieces (IoEngine's
  /// max_piece, split_above) is not answered, nor is any past the first
  /// 65,535 of a batch: the caller takes their CRC from the bytes.
  std::vector<uint32_t> crcs;
  std::vector<uint8_t> crc_known;
};

/// The engine thread's share of a measuring window spent on a CPU, and the
/// share of its reads that were page-cache hits (complete when their submit
/// call returned, IoStats::completed_at_submit), both in permille. A window
/// closes at the first update() at least kWindowNs after it opened.
class BusyMeter {
 public:
  static constexpr uint64_t kWindowNs = 5'000'000;

  /// Opens the first window (the thread's wall and CPU clocks, in ns).
  void start(uint64_t wall_ns, uint64_t cpu_ns) {
    wall_ = wall_ns;
    cpu_ = cpu_ns;
  }
  /// Whether update() at `wall_ns` would close the window (so the CPU clock,
  /// a system call, is read only then).
  bool due(uint64_t wall_ns) const { return wall_ns - wall_ >= kWindowNs; }
  /// `reads` and `hits`: the backend's totals so far. Returns true when it
  /// closed a window (and published its shares).
  bool update(uint64_t wall_ns, uint64_t cpu_ns, uint64_t reads, uint64_t hits);
  uint32_t busy_permille() const { return busy_.load(std::memory_order_relaxed); }
  /// 0 for a window without reads.
  uint32_t hits_permille() const { return hits_.load(std::memory_order_relaxed); }
  /// The last window's with reads (0 before the first): an idle gap, such
  /// as the one between two epochs, does not make a warm cache look cold.
  uint32_t last_hits_permille() const { return last_hits_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint32_t> busy_{0}, hits_{0}, last_hits_{0};
  uint64_t wall_ = 0, cpu_ = 0, reads_ = 0, hits_total_ = 0;  // the updating thread only
};

/// Which engine takes the next batch. The first takes every batch until its
/// thread spent at least 75% of its last window on a CPU with at least 90% of
/// its reads page-cache hits (the kernel copies on the thread that submits,
/// io_uring included: the engine is then the bottleneck); then batches go
/// round all engines (batch index mod N), until together they are busy less
/// than 50% of one thread or fewer than half their reads are hits. Reads that
/// wait on the device stay on one engine: more rings, each with its own queue
/// and its own thread taking completions, made a cold global shuffle slower
/// (docs/performance.md).
class Spreader {
 public:
  static constexpr uint32_t kOnBusy = 750, kOnHits = 900;
  static constexpr uint32_t kOffBusy = 500, kOffHits = 500;

  struct Load {
    uint32_t busy_permille = 0;
    uint32_t hits_permille = 0;
  };
  /// The engine (an index into `loads`, one per engine) for batch `index`;
  /// `always`: spread whatever the loads (LoaderOptions::io_spread_always).
  size_t pick(std::span<const Load> loads, uint64_t index, bool always);
  bool spreading() const { return spreading_; }

 private:
  bool spreading_ = false;
};

/// Adds `b`'s counts to `a` (peak_bytes_in_kernel: the larger; it is per ring).
void accumulate(IoStats& a, const IoStats& b);

class IoEngine {
 public:
  /// Reads longer than `max_piece` are issued as pieces of that size (in file
  /// order; a batch's large reads of several files in turns across them:
  /// interleave_large), so the backend can keep several in flight (0: never split);
  /// reads longer than `split_above` (when not 0) in pieces of `split_piece`
  /// (CoalesceOptions::split_above), or of `split_piece_cold` (when not 0)
  /// while fewer than 95% of the engine's recent reads were page-cache hits
  /// (BusyMeter::last_hits_permille); reads of at least `large_above` (when
  /// not 0) in pieces of `large_piece` marked ReadRequest::hand_off, warm or
  /// cold (CoalesceOptions::large_above; the backend decides whether to hand
  /// them off). `number` names the thread (0: the first engine, which is
  /// always used). `counters` outlives the engine.
  IoEngine(std::unique_ptr<IoBackend> backend, counters::Counters* counters, uint64_t max_piece, uint32_t number,
           uint64_t split_above = 0, uint64_t split_piece = 0, uint64_t split_piece_cold = 0, uint64_t large_above = 0,
           uint64_t large_piece = 0);
  /// Fails batches not yet submitted (Cancelled), waits for the reads in the
  /// backend, joins the thread.
  ~IoEngine();
  IoEngine(const IoEngine&) = delete;
  IoEngine& operator=(const IoEngine&) = delete;

  void submit(std::shared_ptr<ReadBatch> batch);
  /// Batches not yet handed to the backend complete at once as cancelled;
  /// reads already in the backend end as the backend's cancel() lets them
  /// (files: they finish; objects: soon, as errors).
  void cancel_pending();
  /// After cancel_pending, once no batch of the epoch given up can arrive
  /// (the loader's pipeline joined): batches are read again.
  void resume();
  const IoBackend& backend() const { return *backend_; }
  /// Per FileTable id: reads of that file go to a staged copy (counted as
  /// bytes_read_staged). Set before the first submit().
  void set_staged_flags(const std::atomic<uint8_t>* flags, size_t n) {
    staged_ = flags;
    staged_n_ = n;
  }
  IoStats stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }
  /// The thread's CPU share of its last window (BusyMeter): near 1000 when
  /// its reads hit the page cache and the engine is the pipeline's
  /// bottleneck; low when its reads wait on the device or it waits for work.
  uint32_t busy_permille() const { return meter_.busy_permille(); }
  uint32_t hits_permille() const { return meter_.hits_permille(); }
  Spreader::Load load() const { return {busy_permille(), hits_permille()}; }

 private:
  void loop();
  void start_batch(const std::shared_ptr<ReadBatch>& b, std::vector<ReadRequest>& reqs);
  void add_pieces(std::vector<ReadRequest>& reqs, const ReadRequest& r, uint64_t user_data, uint64_t rest) const;
  void interleave_large(std::vector<ReadRequest>& reqs);

  struct Active {
    std::shared_ptr<ReadBatch> batch;
    size_t left = 0;
    absl::Status status;  // the first error
    uint64_t submit_ns = 0;
  };
  std::unique_ptr<IoBackend> backend_;
  counters::Counters* counters_;
  uint64_t max_piece_;
  uint64_t split_above_, split_piece_, split_piece_cold_;
  uint64_t large_above_, large_piece_;
  // Warm, for the split: at least this share (permille) of the last window's
  // reads were page-cache hits. Cold reads in order still hit often (pages
  // the kernel read ahead), so the bar is high: a warm cache hits ~100%.
  static constexpr uint32_t kWarmHits = 950;
  uint32_t number_;
  // start_batch's: the [begin, end) in its requests of each large read's
  // pieces; interleave_large's: the files' streams of them and the requests
  // reordered, in turns of kInterleaveBytes of each file.
  static constexpr uint64_t kInterleaveBytes = 8u << 20;
  std::vector<std::pair<size_t, size_t>> large_runs_;
  struct Stream {
    uint32_t file = 0;
    std::vector<std::pair<size_t, size_t>> runs;
    size_t pieces = 0;
  };
  std::vector<Stream> streams_;
  std::vector<ReadRequest> scratch_;
  const std::atomic<uint8_t>* staged_ = nullptr;
  size_t staged_n_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<ReadBatch>> pending_;
  bool stop_ = false;
  // Set by cancel_pending until resume(): batches of the epoch given up that
  // reach this engine after it complete as cancelled, never at the backend.
  std::atomic<bool> cancelled_{false};
  std::unordered_map<ReadBatch*, Active> active_;  // engine thread only
  uint64_t sampled_ = 0;                           // engine thread only
  mutable std::mutex stats_mu_;
  IoStats stats_;
  BusyMeter meter_;
  std::thread thread_;
};

/// The loader's engines (AdvancedOptions::io_engines), each with a backend of
/// its own over the same files, and the Spreader choosing among them.
class EngineSet {
 public:
  explicit EngineSet(bool spread_always = false) : spread_always_(spread_always) {}
  void add(std::unique_ptr<IoEngine> engine) { engines_.push_back(std::move(engine)); }
  void set_spread_always(bool always) { spread_always_ = always; }
  /// Hands batch `index`'s reads to the engine the Spreader picks. The
  /// look-ahead's thread only.
  void submit(uint64_t index, std::shared_ptr<ReadBatch> batch);
  void cancel_pending();
  void resume();
  void set_staged_flags(const std::atomic<uint8_t>* flags, size_t n);
  /// Every engine's IoStats added up.
  IoStats stats() const;
  size_t size() const { return engines_.size(); }
  /// Batches are spread over the first `n` engines only (1..size(); the
  /// autotuner moves it while reads run). All of them by default.
  void set_active(uint32_t n) { active_.store(n, std::memory_order_relaxed); }
  uint32_t active() const;
  /// The active engines' mean CPU share of their last window (BusyMeter).
  uint32_t active_busy_permille() const;
  const IoBackend& backend() const { return engines_[0]->backend(); }
  /// Batches that went to an engine other than the first.
  uint64_t batches_spread() const { return spread_.load(std::memory_order_relaxed); }
  /// Each engine drains its reads in flight and joins its thread.
  void clear() { engines_.clear(); }

 private:
  std::vector<std::unique_ptr<IoEngine>> engines_;
  bool spread_always_;
  Spreader spreader_;
  std::vector<Spreader::Load> loads_;  // submit()'s scratch
  std::atomic<uint64_t> spread_{0};
  std::atomic<uint32_t> active_{0};  // 0: all
};

}  // namespace dlfeed::detail
