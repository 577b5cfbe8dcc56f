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

#include "batch/collator.h"
#include "decode/decode_feed.h"
#include "decode/decoder.h"
#include "plan/lookahead.h"

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::pipeline {

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
  bool run(plan::Lookahead& source, const decode::Decoder& decoder, batch::Collator& collator,
           const std::atomic<bool>& stop, bool in_turn = false, const std::function<bool()>& then = nullptr);

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
  void decode_counted(const decode::Decoder& decoder, batch::Work& w);
  void run_stages(plan::Lookahead& source, const decode::Decoder& decoder, batch::Collator& collator,
                  const std::atomic<bool>& stop);

  struct Arena;
  Arena& current() const { return *current_.load(std::memory_order_acquire); }
  bool serial_;
  uint32_t threads_;
  std::mutex arenas_mu_;                        // making arenas
  std::vector<std::unique_ptr<Arena>> arenas_;  // by width (index), made on first use, kept to the end
  std::atomic<Arena*> current_{nullptr};
  std::unique_ptr<decode::DecodeFeed> feed_;  // the decode stage's hand-off (its tasks point to it)
  std::atomic<uint32_t> decoding_{0}, peak_decoding_{0};
};

}  // namespace dlfeed::pipeline
