// SPDX-License-Identifier: Apache-2.0
// Private: the oneTBB wiring. Per epoch one thread (the loader's pipeline
// thread, outside the loader's task arena) runs the look-ahead: it plans,
// waits for admission and issues each batch's reads, and hands the batch to
// a DecodeFeed, which queues its decode in the arena when its reads have
// completed (the engine's callback); the arena's workers decode in parallel
// and collate in order, passing Work* tokens, and never wait on a read.
// When every batch is only copies from held files (Planner::copies_only),
// the three stages run in turn on the pipeline thread instead: a batch with
// nothing to decode gains nothing from a hand-off between threads, and pays
// for it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "batch/collator.h"
#include "decode/decode_feed.h"
#include "decode/decoder.h"
#include "plan/lookahead.h"

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::pipeline {

// oneTBB's own synchronization is inside libtbb, which ThreadSanitizer does
// not see; in TSan builds every task body passes through one mutex at its
// start and end (and the threads that spawn and join the tasks do too), so
// the happens-before edges TBB provides are visible to the checker.
// Elsewhere it compiles to nothing.
#if defined(__SANITIZE_THREAD__)
std::mutex& tsan_handshake_mutex();
inline void tsan_handshake() { std::lock_guard<std::mutex> lock(tsan_handshake_mutex()); }
#else
inline void tsan_handshake() {}
#endif

/// OK, or why this process cannot run a pipeline: it was forked while
/// pipelines were running in its parent. oneTBB's threads and locks do not
/// survive fork(), and a pipeline started in such a child crashes inside
/// libtbb (a torch DataLoader's fork workers after the parent iterated).
absl::Status fork_check();

/// True in a child of fork() whose parent (or an ancestor before it) had
/// started oneTBB's workers: the child inherits the pool's bookkeeping but
/// none of its threads, so work queued to an arena would wait forever.
/// Pipelines made in such a process run every stage in turn on their own
/// thread and never call into oneTBB (a DataLoader worker forked after the
/// parent finished an epoch decodes there, on one thread).
bool tbb_unusable();
/// Called before work is handed to oneTBB: from then on a child forked from
/// this process knows that oneTBB's workers may have started here.
void note_tbb_started();

class Pipeline {
 public:
  /// An arena of `threads` decode workers (and a slot for the pipeline
  /// thread, which joins only to spread copies), its own whatever other
  /// pipelines the process holds: oneTBB's worker pool is grown to serve
  /// them all.
  /// In a process where tbb_unusable(), no arena is made: threads() is 1
  /// and every epoch runs in turn on the calling thread.
  explicit Pipeline(uint32_t threads);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  /// Runs one epoch from the calling thread: `source`'s batches decoded in
  /// parallel (each once its reads completed) and collated in order, until
  /// the source runs dry or `stop` is raised (later batches are then
  /// dropped, not delivered); then the end of the epoch (after an error
  /// from the pipeline itself, that error first) goes to the collator's
  /// queue. `in_turn`: the stages run one batch at a time on the calling
  /// thread, not handed to the arena's workers. `then` (when
  /// set, and not stopped) is asked before the end goes out whether the
  /// caller runs the next epoch at once; its answer marks the end chained.
  /// Returns that answer.
  bool run(Lookahead& source, const Decoder& decoder, Collator& collator, const std::atomic<bool>& stop,
           bool in_turn = false, const std::function<bool()>& then = nullptr);

  /// The decode workers made (the most there can be).
  uint32_t threads() const { return threads_; }
  /// No oneTBB here (tbb_unusable() when it was made): stages run in turn.
  bool in_turn_only() const { return serial_; }
  /// The decode workers batches go to now: threads() until set_width().
  uint32_t width() const;
  /// Sends batches (and parallel()'s work) from now on to an arena of
  /// `width` workers (1 .. threads(), clamped), made on first use and kept:
  /// a oneTBB arena's concurrency is fixed, so the width changes by which
  /// arena is fed, with no worker held waiting. Batches already queued
  /// finish where they are. Any thread, while an epoch runs or not.
  void set_width(uint32_t width);
  /// body(0) .. body(n - 1), spread over this pipeline's arena (joined by
  /// the calling thread); returns when all are done.
  void parallel(size_t n, const std::function<void(size_t)>& body);
  /// The most batches seen in the decode stage at once (this pipeline's).
  uint32_t peak_decoding() const { return peak_decoding_.load(std::memory_order_relaxed); }

 private:
  void decode_counted(const Decoder& decoder, Work& w);
  void run_stages(Lookahead& source, const Decoder& decoder, Collator& collator, const std::atomic<bool>& stop);

  struct Arena;
  Arena& current() const { return *current_.load(std::memory_order_acquire); }
  bool serial_;
  uint32_t threads_;
  std::mutex arenas_mu_;                        // making arenas
  std::vector<std::unique_ptr<Arena>> arenas_;  // by width (index), made on first use, kept to the end
  std::atomic<Arena*> current_{nullptr};
  std::unique_ptr<DecodeFeed> feed_;  // the decode stage's hand-off (its tasks point to it)
  std::atomic<uint32_t> decoding_{0}, peak_decoding_{0};
};

}  // namespace dlfeed::pipeline
