// SPDX-License-Identifier: Apache-2.0
#include "batch/collator.h"

#include "counters/record.h"

namespace dlfeed::inline DLFEED_ABI::batch {

void DeliveryQueue::push(Delivery d) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(std::move(d));
  }
  cv_.notify_all();
}

Delivery DeliveryQueue::pop(Budget& budget) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ready_.empty()) {
    // Let the look-ahead know: with nothing on the way it must admit a batch.
    lock.unlock();
    budget.set_consumer_waiting(true);
    lock.lock();
    cv_.wait(lock, [&] { return !ready_.empty(); });
    lock.unlock();
    budget.set_consumer_waiting(false);
    lock.lock();
  }
  Delivery d = std::move(ready_.front());
  ready_.pop_front();
  return d;
}

void DeliveryQueue::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  ready_.clear();
}

Collator::Collator(std::shared_ptr<BufferPool> pool, counters::Counters* counters, DeliveryQueue& queue,
                   std::atomic<bool>& failed)
    : pool_(std::move(pool)), counters_(counters), queue_(queue), failed_(failed) {}

void Collator::collate(Work& w) {
  counters::Span span(counters_, counters::kCollateSpan);
  span.args(w.epoch, w.index);
  deliver(w);
}

void Collator::deliver(Work& w) {
  if (!w.error.ok()) {
    failed_ = true;
    queue_.push({nullptr, w.error, false, nullptr});
    return;
  }
  // The consumer's handle returns the buffers and the admission when dropped.
  Batch* raw = w.batch.get();
  auto holder = std::make_shared<std::shared_ptr<Batch>>(std::move(w.batch));
  std::shared_ptr<BufferPool> p = pool_;
  std::shared_ptr<Ticket> ticket = w.ticket;
  std::shared_ptr<Ticket> t = std::move(w.ticket);
  std::shared_ptr<const Batch> handed(raw, [holder, p, t](const Batch*) mutable {
    for (auto& s : (*holder)->storage) p->give(std::move(s));
    holder.reset();
    t.reset();
  });
  queue_.push({std::move(handed), absl::OkStatus(), false, std::move(ticket)});
}

}  // namespace dlfeed::batch
