// SPDX-License-Identifier: Apache-2.0
// Private: memory admission. Every batch is admitted with its read-buffer and
// output bytes before its reads are issued; the bytes count until the
// consumer drops the batch, so batch memory stays within the memory budget,
// and the prefetch policy bounds the batches on their way (the look-ahead).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "dlfeed/batch/batch.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/plan/policy.h"

namespace dlfeed::inline DLFEED_ABI::batch {

/// Shared by the look-ahead and every batch handed out (a batch may outlive
/// its loader, so this lives in a shared_ptr).
struct Budget {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t batches = 0;         // admitted and not yet dropped by the consumer
  uint64_t bytes = 0;           // ... and their bytes: what the memory budget bounds
  uint64_t pipeline = 0;        // admitted and not yet handed to the consumer: the look-ahead
  uint64_t pipeline_bytes = 0;  // ... and their bytes: what a prefetch policy's byte limit bounds
  bool consumer_waiting = false;
  uint64_t peak_bytes = 0;

  void release(uint64_t n, bool in_pipeline);
  /// The policy's view: the look-ahead (batches and bytes), not the batches the consumer holds.
  prefetch::InFlight in_flight() const { return {pipeline, pipeline_bytes, consumer_waiting, bytes}; }
  void set_consumer_waiting(bool waiting);
  /// Sets `flag` under the mutex and wakes every waiter. admit() tests its
  /// stop flag under the mutex before it waits, so a stop raised here cannot
  /// fall between that test and the wait (where the wake-up would be lost).
  void raise(std::atomic<bool>& flag);
  uint64_t peak() {
    std::lock_guard<std::mutex> lock(mu);
    return peak_bytes;
  }
};

/// One batch's admission: released when the last holder (the work in the
/// pipeline, then the Batch handed to the consumer) lets go.
struct Ticket {
  std::shared_ptr<Budget> budget;  // set by admit()
  uint64_t bytes = 0;
  bool in_pipeline = false;  // admitted and not yet handed to the consumer
  /// The consumer took the batch: it no longer counts as look-ahead (its
  /// bytes still count against the memory budget until it is dropped).
  void handed_over();
  ~Ticket() {
    if (budget) budget->release(bytes, in_pipeline);
  }
};

/// What a batch must fit besides nothing at all being in flight.
struct AdmitRule {
  const prefetch::PrefetchPolicy* policy = nullptr;
  uint64_t memory_budget = 0;
  /// Free buffers cached for reuse count too: trimmed so that what stays fits
  /// (null: no pool).
  BufferPool* pool = nullptr;
};

/// Admits `ticket` (its bytes) under `rule`: the policy must admit it, and
/// the bytes of every batch not yet dropped plus its own must fit the memory
/// budget unless no batch is held at all. A consumer waiting with nothing on
/// the way always gets one, even over the budget (it may be holding earlier
/// batches): never a hang. `wait`: wait until it fits or `stop` is raised
/// (Budget::raise); else refuse at once. On success the ticket holds the
/// budget and counts as look-ahead.
bool admit(const std::shared_ptr<Budget>& budget, Ticket& ticket, const AdmitRule& rule, bool wait,
           const std::atomic<bool>& stop);

}  // namespace dlfeed::batch
