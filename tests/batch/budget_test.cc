// SPDX-License-Identifier: Apache-2.0
// Admission (src/plan/budget.h): the prefetch policy and the memory
// budget bound what is admitted, a consumer waiting with nothing on the way
// always gets a batch, a waiting admission wakes on release and on stop, and
// tickets give their bytes back.

#include "batch/budget.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "dlfeed/plan/policy.h"
#include "gtest/gtest.h"

namespace dlfeed::batch {
namespace {

std::shared_ptr<const prefetch::PrefetchPolicy> policy(const std::string& spec) {
  auto p = prefetch::parse_policy(spec);
  EXPECT_TRUE(p.ok()) << p.status();
  return std::shared_ptr<const prefetch::PrefetchPolicy>(std::move(*p));
}

std::shared_ptr<Ticket> ticket(uint64_t bytes) {
  auto t = std::make_shared<Ticket>();
  t->bytes = bytes;
  return t;
}

TEST(Budget, PolicyDepthBoundsTheLookAhead) {
  auto budget = std::make_shared<Budget>();
  auto pol = policy("depth:2");
  const AdmitRule rule{pol.get(), 1 << 20, nullptr};
  std::atomic<bool> stop{false};
  auto a = ticket(100), b = ticket(100), c = ticket(100);
  ASSERT_TRUE(admit(budget, *a, rule, false, stop));
  ASSERT_TRUE(admit(budget, *b, rule, false, stop));
  EXPECT_EQ(budget->pipeline, 2u);
  EXPECT_FALSE(admit(budget, *c, rule, false, stop)) << "a third batch on the way under depth:2";
  EXPECT_EQ(c->budget, nullptr) << "a refused ticket holds nothing";
  // The consumer takes one: it no longer counts as look-ahead.
  a->handed_over();
  EXPECT_EQ(budget->pipeline, 1u);
  EXPECT_EQ(budget->batches, 2u);
  EXPECT_TRUE(admit(budget, *c, rule, false, stop));
}

TEST(Budget, MemoryBudgetCountsBatchesUntilDropped) {
  auto budget = std::make_shared<Budget>();
  auto pol = policy("depth:8");
  const AdmitRule rule{pol.get(), 1000, nullptr};
  std::atomic<bool> stop{false};
  auto a = ticket(600), b = ticket(600);
  ASSERT_TRUE(admit(budget, *a, rule, false, stop));
  EXPECT_FALSE(admit(budget, *b, rule, false, stop)) << "1200 bytes over a budget of 1000";
  a->handed_over();  // with the consumer, but not dropped: still counts
  EXPECT_FALSE(admit(budget, *b, rule, false, stop));
  a.reset();  // dropped
  EXPECT_EQ(budget->bytes, 0u);
  EXPECT_EQ(budget->batches, 0u);
  EXPECT_TRUE(admit(budget, *b, rule, false, stop));
  EXPECT_EQ(budget->peak_bytes, 600u);
  b.reset();
  EXPECT_EQ(budget->bytes, 0u);
  EXPECT_EQ(budget->pipeline, 0u);
}

TEST(Budget, OneBatchAlwaysFitsWhenNothingIsHeld) {
  auto budget = std::make_shared<Budget>();
  auto pol = policy("depth:8");
  const AdmitRule rule{pol.get(), 1000, nullptr};
  std::atomic<bool> stop{false};
  auto big = ticket(5000);
  EXPECT_TRUE(admit(budget, *big, rule, false, stop)) << "a batch bigger than the budget must still run";
  EXPECT_EQ(budget->peak_bytes, 5000u);
}

TEST(Budget, AWaitingConsumerWithNothingOnTheWayGetsABatchOverTheBudget) {
  auto budget = std::make_shared<Budget>();
  auto pol = policy("depth:8");
  const AdmitRule rule{pol.get(), 1000, nullptr};
  std::atomic<bool> stop{false};
  auto held = ticket(900), next = ticket(900);
  ASSERT_TRUE(admit(budget, *held, rule, false, stop));
  held->handed_over();  // the consumer keeps it
  EXPECT_FALSE(admit(budget, *next, rule, false, stop));
  budget->set_consumer_waiting(true);
  EXPECT_TRUE(admit(budget, *next, rule, false, stop)) << "never a hang: the consumer waits and nothing is on the way";
  EXPECT_EQ(budget->bytes, 1800u);
  // With a batch on the way again, the budget holds.
  auto third = ticket(10);
  EXPECT_FALSE(admit(budget, *third, rule, false, stop));
}

TEST(Budget, PolicyOffStillFeedsAWaitingConsumer) {
  auto budget = std::make_shared<Budget>();
  auto pol = policy("off");
  const AdmitRule rule{pol.get(), 1 << 20, nullptr};
  std::atomic<bool> stop{false};
  auto a = ticket(10);
  EXPECT_FALSE(admit(budget, *a, rule, false, stop)) << "off: no look-ahead while the consumer is busy";
  budget->set_consumer_waiting(true);
  EXPECT_TRUE(admit(budget, *a, rule, false, stop));
}

TEST(Budget, AWaitingAdmissionWakesWhenABatchIsDropped) {
  auto budget = std::make_shared<Budget>();
  auto pol = policy("depth:8");
  const AdmitRule rule{pol.get(), 1000, nullptr};
  std::atomic<bool> stop{false};
  auto held = ticket(800), next = ticket(800);
  ASSERT_TRUE(admit(budget, *held, rule, false, stop));
  held->handed_over();
  auto waiter = std::async(std::launch::async, [&] { return admit(budget, *next, rule, true, stop); });
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout) << "admitted over the budget";
  held.reset();
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(waiter.get());
  EXPECT_EQ(budget->bytes, 800u);
}

TEST(Budget, AWaitingAdmissionReturnsOnStop) {
  auto budget = std::make_shared<Budget>();
  auto pol = policy("depth:1");
  const AdmitRule rule{pol.get(), 1000, nullptr};
  std::atomic<bool> stop{false};
  auto a = ticket(10), b = ticket(10);
  ASSERT_TRUE(admit(budget, *a, rule, false, stop));
  auto waiter = std::async(std::launch::async, [&] { return admit(budget, *b, rule, true, stop); });
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  budget->raise(stop);
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "a stop must wake the wait";
  EXPECT_FALSE(waiter.get());
  EXPECT_TRUE(stop);
  EXPECT_EQ(budget->batches, 1u);
}

TEST(Budget, CachedFreeBuffersAreTrimmedToFit) {
  auto budget = std::make_shared<Budget>();
  auto pol = policy("depth:8");
  BufferPool pool;
  pool.give(pool.take(64 << 10));
  const uint64_t cached = pool.cached_bytes();
  ASSERT_GE(cached, 64u << 10);
  const AdmitRule rule{pol.get(), 100 << 10, &pool};
  std::atomic<bool> stop{false};
  auto a = ticket(30 << 10), b = ticket(30 << 10);
  ASSERT_TRUE(admit(budget, *a, rule, false, stop));  // nothing held: no trimming needed
  EXPECT_EQ(pool.cached_bytes(), cached);
  ASSERT_TRUE(admit(budget, *b, rule, false, stop));
  EXPECT_LE(pool.cached_bytes(), uint64_t{40} << 10) << "free buffers must fit in what the batches leave";
}

TEST(Budget, BatchesTheConsumerHoldsDoNotCountAgainstThePolicysBytes) {
  // budget:400 leaves room for 4 batches of 100 bytes ahead; 8 held batches
  // (800 bytes, within the 1 MiB memory budget) must not take that room.
  auto budget = std::make_shared<Budget>();
  auto pol = policy("depth:16,budget:400");
  const AdmitRule rule{pol.get(), 1 << 20, nullptr};
  std::atomic<bool> stop{false};
  std::vector<std::shared_ptr<Ticket>> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(ticket(100));
    ASSERT_TRUE(admit(budget, *held.back(), rule, false, stop)) << i;
    held.back()->handed_over();
  }
  EXPECT_EQ(budget->pipeline_bytes, 0u);
  EXPECT_EQ(budget->bytes, 800u);
  std::vector<std::shared_ptr<Ticket>> ahead;
  while (true) {
    auto t = ticket(100);
    if (!admit(budget, *t, rule, false, stop)) break;
    ahead.push_back(t);
  }
  EXPECT_EQ(ahead.size(), 4u) << "the read-ahead with 8 batches held is the same as with none";
  EXPECT_EQ(budget->pipeline_bytes, 400u);
  EXPECT_EQ(budget->in_flight().total_bytes, 1200u);
  // A batch handed over frees its look-ahead room; one dropped frees its memory.
  ahead.front()->handed_over();
  EXPECT_EQ(budget->pipeline_bytes, 300u);
  ahead.clear();
  held.clear();
  EXPECT_EQ(budget->pipeline_bytes, 0u);
  EXPECT_EQ(budget->bytes, 0u);
}

}  // namespace
}  // namespace dlfeed::batch
