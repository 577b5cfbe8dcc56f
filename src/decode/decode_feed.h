// SPDX-License-Identifier: Apache-2.0
// Private: how batches reach the decode stage without a oneTBB worker
// waiting on a read (issue 27). The pipeline thread, outside the loader's
// arena, takes each batch from the look-ahead (its reads issued) and hands
// it to the feed; the batch's decode is queued in the arena only when its
// reads have completed, by the engine's completion callback (or at once when
// they already had). Workers so only ever decode: a batch whose reads are
// slow holds no thread, and the threads it would have held decode the
// batches that are ready (or another batch's samples). A batch with
// nothing to decode (Work::nothing_to_decode: every sample read into place)
// is finished on the thread its reads completed on: its bookkeeping costs
// less than waking a worker for it.
//
// Batches are collated strictly in hand-out order, by whichever worker
// finishes the next one; at most `tokens` batches are between hand-out and
// collation (the pipeline thread waits for a token, outside the arena).
#pragma once

#include <oneapi/tbb/task_arena.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

#include "batch/work.h"
#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::decode {

/// The hand-off from the pipeline thread to the arena's workers, an epoch at
/// a time. It outlives every task it queues (the pipeline's).
class DecodeFeed {
 public:
  DecodeFeed(tbb::task_arena& arena, size_t tokens);
  /// Batches whose reads complete from now on are decoded in `arena`
  /// (initialized, outliving every task queued in it). Any thread.
  void set_arena(tbb::task_arena& arena) { arena_.store(&arena, std::memory_order_release); }
  ~DecodeFeed() { wait_all(); }
  DecodeFeed(const DecodeFeed&) = delete;
  DecodeFeed& operator=(const DecodeFeed&) = delete;

  /// Starts an epoch: `decode` runs on a worker once a batch's reads
  /// completed (an exception it throws becomes the batch's error); `collate`
  /// once per batch, in hand-out order, one at a time. Both stay valid until
  /// finish() returns. The pipeline thread only, with nothing in flight.
  void begin(std::function<void(batch::Work&)> decode, std::function<void(batch::Work&)> collate);
  /// Waits (on the calling thread) until fewer than `tokens` batches are in
  /// flight. The pipeline thread only.
  void wait_for_token();
  /// Hands `w` (its reads issued; kept alive by w.self until collated) over.
  /// The pipeline thread only, after wait_for_token().
  void hand(batch::Work& w);
  /// Waits until every batch handed over was collated, then rethrows the
  /// first exception a collate threw (if any).
  void finish();

 private:
  void wait_all();
  // On a worker: decodes `w`, then collates every batch ready in order.
  void run(batch::Work& w);
  void collate_in_order(batch::Work& w);

  std::atomic<tbb::task_arena*> arena_;
  const size_t tokens_;
  std::function<void(batch::Work&)> decode_, collate_;
  std::mutex mu_;
  std::condition_variable cv_;         // a batch was collated
  uint64_t handed_ = 0, next_ = 0;     // batches handed over; the next to collate
  std::vector<batch::Work*> decoded_;  // by Work::handed % tokens: decoded, not yet collated
  bool collating_ = false;             // a worker is collating (the others leave theirs to it)
  std::exception_ptr thrown_;
};

}  // namespace dlfeed::decode
