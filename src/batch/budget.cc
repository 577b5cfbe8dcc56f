// SPDX-License-Identifier: Apache-2.0
#include "batch/budget.h"

#include <algorithm>

namespace dlfeed::inline DLFEED_ABI::batch {

void Budget::release(uint64_t n, bool in_pipeline) {
  {
    std::lock_guard<std::mutex> lock(mu);
    batches -= 1;
    bytes -= n;
    if (in_pipeline) {
      pipeline -= 1;
      pipeline_bytes -= n;
    }
  }
  cv.notify_all();
}

void Budget::set_consumer_waiting(bool waiting) {
  {
    std::lock_guard<std::mutex> lock(mu);
    consumer_waiting = waiting;
  }
  if (waiting) cv.notify_all();
}

void Budget::raise(std::atomic<bool>& flag) {
  {
    std::lock_guard<std::mutex> lock(mu);
    flag = true;
  }
  cv.notify_all();
}

void Ticket::handed_over() {
  if (!budget || !in_pipeline) return;
  {
    std::lock_guard<std::mutex> lock(budget->mu);
    budget->pipeline -= 1;
    budget->pipeline_bytes -= bytes;
    in_pipeline = false;
  }
  budget->cv.notify_all();
}

bool admit(const std::shared_ptr<Budget>& budget, Ticket& ticket, const AdmitRule& rule, bool wait,
           const std::atomic<bool>& stop) {
  const uint64_t bytes = ticket.bytes;
  {
    std::unique_lock<std::mutex> lock(budget->mu);
    auto fits = [&] {
      const Budget& b = *budget;
      if (b.pipeline == 0 && b.consumer_waiting) return true;
      // The policy bounds the look-ahead: batches the consumer holds count
      // against the memory budget below, never against the policy's bytes
      // (they did once, and 8 held 38 MB batches left a 256 MB read-ahead
      // room for one batch at a time: the loader starved).
      if (!rule.policy->admit(b.in_flight(), bytes)) return false;
      if (b.batches == 0) return true;
      if (b.bytes + bytes > rule.memory_budget) return false;
      if (rule.pool != nullptr) rule.pool->trim_to(rule.memory_budget - b.bytes - bytes);
      return true;
    };
    if (wait) budget->cv.wait(lock, [&] { return stop || fits(); });
    if (stop || !fits()) return false;
    budget->batches += 1;
    budget->bytes += bytes;
    budget->pipeline += 1;
    budget->pipeline_bytes += bytes;
    budget->peak_bytes = std::max(budget->peak_bytes, budget->bytes);
  }
  ticket.budget = budget;  // from now on the ticket releases the bytes
  ticket.in_pipeline = true;
  return true;
}

}  // namespace dlfeed::batch
