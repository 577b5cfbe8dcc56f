// SPDX-License-Identifier: Apache-2.0
// Private: the collate filter (serial, in order) and the consumer's queue.
// A decoded batch goes to the queue as shared_ptr<const Batch>, whose
// deleter gives its buffers back to the pool and its bytes back to the
// budget; a failed one goes as its error, and planning stops.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "batch/budget.h"
#include "batch/work.h"
#include "dlfeed/batch/batch.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::batch {

/// What the pipeline hands the consumer, in order.
struct Delivery {
  std::shared_ptr<const Batch> batch;
  absl::Status error;
  bool end = false;
  std::shared_ptr<Ticket> ticket;  // the batch's admission (to mark it handed over)
  bool chained = false;            // end: the pipeline goes on with the next epoch (overlap_epochs)
};

class DeliveryQueue {
 public:
  void push(Delivery d);
  /// The next delivery, waiting for one. While it waits with nothing ready,
  /// `budget` knows the consumer waits (so admission lets a batch in
  /// whatever the policy: never a hang).
  Delivery pop(Budget& budget);
  void clear();
  void wake() { cv_.notify_all(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Delivery> ready_;
};

class Collator {
 public:
  /// `counters` may be null; `failed` is raised by a failed batch.
  Collator(std::shared_ptr<BufferPool> pool, counters::Counters* counters, DeliveryQueue& queue,
           std::atomic<bool>& failed);

  /// Hands `w`'s batch (or its error) to the queue.
  void collate(Work& w);
  /// The epoch ended: its last delivery (`chained`: the next epoch's follow).
  void end(bool chained = false) { queue_.push({nullptr, absl::OkStatus(), true, nullptr, chained}); }
  /// The pipeline itself failed.
  void fail(absl::Status error) { queue_.push({nullptr, std::move(error), false, nullptr}); }

 private:
  void deliver(Work& w);

  std::shared_ptr<BufferPool> pool_;
  counters::Counters* counters_;
  DeliveryQueue& queue_;
  std::atomic<bool>& failed_;
};

}  // namespace dlfeed::batch
