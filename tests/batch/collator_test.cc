// SPDX-License-Identifier: Apache-2.0
// The collate stage and the consumer's queue (src/batch/collator.h): a
// batch goes out in a handle whose drop gives the buffers back to the pool
// and the bytes back to the budget; a failed batch goes out as its error and
// stops planning; a consumer waiting on an empty queue is known to the budget.

#include "batch/collator.h"

#include <future>
#include <thread>

#include "pipeline/stage_fixture.h"
#include "plan/planner.h"

namespace dlfeed::batch {
namespace {

TEST(Collator, HandsTheBatchOutAndItsDropReleasesEverything) {
  auto pool = std::make_shared<BufferPool>();
  auto budget = std::make_shared<Budget>();
  DeliveryQueue queue;
  std::atomic<bool> failed{false};
  Collator collator(pool, nullptr, queue, failed);

  Work w;
  w.index = 7;
  w.batch = std::make_shared<Batch>();
  w.batch->index = 7;
  w.batch->storage.push_back(pool->take(1 << 16));
  w.ticket = std::make_shared<Ticket>();
  w.ticket->bytes = 1 << 16;
  auto prefetch = prefetch::parse_policy("depth:4");
  ASSERT_TRUE(prefetch.ok());
  std::atomic<bool> stop{false};
  ASSERT_TRUE(admit(budget, *w.ticket, {prefetch->get(), 1 << 20, nullptr}, false, stop));
  const uint64_t cached_before = pool->cached_bytes();

  collator.collate(w);
  EXPECT_EQ(w.batch, nullptr) << "the batch moved to the consumer's handle";
  EXPECT_EQ(w.ticket, nullptr);
  Delivery d = queue.pop(*budget);
  ASSERT_NE(d.batch, nullptr);
  EXPECT_TRUE(d.error.ok());
  EXPECT_FALSE(d.end);
  EXPECT_EQ(d.batch->index, 7u);
  ASSERT_NE(d.ticket, nullptr);
  d.ticket->handed_over();
  d.ticket.reset();
  EXPECT_EQ(budget->pipeline, 0u) << "handed over: no longer look-ahead";
  EXPECT_EQ(budget->bytes, uint64_t{1} << 16) << "still held by the consumer";
  d.batch.reset();
  EXPECT_EQ(budget->bytes, 0u);
  EXPECT_EQ(budget->batches, 0u);
  EXPECT_GE(pool->cached_bytes(), cached_before + (1 << 16)) << "the batch's buffer back in the pool";
  EXPECT_FALSE(failed);
}

TEST(Collator, AFailedBatchIsDeliveredAsItsErrorAndStopsPlanning) {
  auto pool = std::make_shared<BufferPool>();
  auto budget = std::make_shared<Budget>();
  DeliveryQueue queue;
  std::atomic<bool> failed{false};
  Collator collator(pool, nullptr, queue, failed);
  Work w;
  w.error = absl::DataLossError("a.npy: at offset 9: expected 4 bytes, found 2");
  collator.collate(w);
  EXPECT_TRUE(failed);
  Delivery d = queue.pop(*budget);
  EXPECT_EQ(d.batch, nullptr);
  EXPECT_EQ(d.error, w.error);
  collator.end();
  EXPECT_TRUE(queue.pop(*budget).end);
}

TEST(DeliveryQueue, AWaitingConsumerIsKnownToTheBudget) {
  auto budget = std::make_shared<Budget>();
  DeliveryQueue queue;
  auto got = std::async(std::launch::async, [&] { return queue.pop(*budget); });
  bool seen = false;
  for (int k = 0; k < 10000 && !seen; ++k) {
    {
      std::lock_guard<std::mutex> lock(budget->mu);
      seen = budget->consumer_waiting;
    }
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(seen) << "the budget must know the consumer waits, or a full budget would hang it";
  queue.push({nullptr, absl::OkStatus(), true, nullptr});
  ASSERT_EQ(got.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(got.get().end);
  std::lock_guard<std::mutex> lock(budget->mu);
  EXPECT_FALSE(budget->consumer_waiting);
}

TEST(DeliveryQueue, DeliversInOrderAndClears) {
  Budget budget;
  DeliveryQueue queue;
  queue.push({nullptr, absl::InternalError("one"), false, nullptr});
  queue.push({nullptr, absl::InternalError("two"), false, nullptr});
  EXPECT_EQ(queue.pop(budget).error.message(), "one");
  queue.clear();
  queue.push({nullptr, absl::OkStatus(), true, nullptr});
  EXPECT_TRUE(queue.pop(budget).end) << "cleared deliveries are gone";
}

}  // namespace
}  // namespace dlfeed::batch
