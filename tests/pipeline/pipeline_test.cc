// SPDX-License-Identifier: Apache-2.0
// The stages wired together (src/pipeline/pipeline.h) over a real NPY file
// and a real I/O engine: every batch of the epoch arrives once, in order,
// with the right bytes, then the end; a stop ends the epoch early and cleanly;
// a look-ahead under depth:2 never runs more than two batches ahead; the
// decode width moves live.

#include "pipeline/pipeline.h"

#include <functional>
#include <thread>

#include "dlfeed/io/file_table.h"
#include "dlfeed/plan/policy.h"
#include "pipeline/stage_fixture.h"
#include "read/engine.h"

namespace dlfeed::pipeline {
namespace {

uint64_t bytes_held(batch::Budget& b) {
  std::lock_guard<std::mutex> lock(b.mu);
  return b.bytes;
}

struct Rig {
  std::vector<SampleIndex> indices;
  std::vector<std::vector<uint32_t>> file_ids;
  std::vector<std::string> names = {"x"};
  std::shared_ptr<FileTable> files = std::make_shared<FileTable>();
  std::shared_ptr<const prefetch::PrefetchPolicy> policy;
  std::shared_ptr<BufferPool> pool = std::make_shared<BufferPool>();
  std::shared_ptr<batch::Budget> budget = std::make_shared<batch::Budget>();
  counters::Counters counters;
  detail::EngineSet engines;
  std::atomic<bool> stop{false}, failed{false};
  std::unique_ptr<plan::Planner> planner;
  plan::SourceParts parts;
  batch::DeliveryQueue queue;
  uint64_t samples;
  uint32_t batch;

  Rig(const std::string& path, uint64_t n, uint32_t batch, const std::string& prefetch) : samples(n), batch(batch) {
    indices.push_back(testing::write_and_open(path, n));
    file_ids = {{files->add(path)}};
    auto p = prefetch::parse_policy(prefetch);
    EXPECT_TRUE(p.ok());
    policy = std::move(*p);
    IoOptions io;
    io.kind = IoKind::kThreadPool;
    auto backend = make_io_backend(files, io);
    EXPECT_TRUE(backend.ok());
    engines.add(std::make_unique<detail::IoEngine>(std::move(*backend), &counters, 0, 0));
    planner = std::make_unique<plan::Planner>(indices, file_ids, plan::PlannerOptions{batch, false, {}}, &counters);
    parts.planner = planner.get();
    parts.budget = budget;
    parts.rule = {policy.get(), 1 << 30, pool.get()};
    parts.pool = pool.get();
    parts.engines = &engines;
    parts.counters = &counters;
    parts.stop = &stop;
    parts.failed = &failed;
  }
  OrderCursor cursor(const std::string& strategy) {
    OrderSpec spec;
    spec.strategy = strategy;
    spec.seed = 3;
    auto c = OrderCursor::create(FileLayout::of(indices[0]), spec);
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  }
};

// One epoch of `rig` (global shuffle) through `pipeline`, as the consumer
// sees it: every batch once, in order, with the right ids and bytes, then the
// end, and every byte given back. `before_pop(k)` runs before the consumer
// waits for batch k.
void expect_whole_epoch(Rig& rig, Pipeline& pipeline, const std::function<void(uint64_t)>& before_pop = nullptr) {
  decode::Decoder decoder(rig.indices, rig.names, rig.pool, &rig.counters);
  batch::Collator collator(rig.pool, &rig.counters, rig.queue, rig.failed);
  OrderCursor order = rig.cursor("global_shuffle");
  OrderCursor expected = order;
  std::thread t([&] {
    plan::Lookahead source(rig.parts, order, 0, 0);
    pipeline.run(source, decoder, collator, rig.stop);
  });
  uint64_t batches = 0;
  std::vector<uint64_t> ids(rig.batch);
  while (true) {
    if (before_pop) before_pop(batches);
    batch::Delivery d = rig.queue.pop(*rig.budget);
    if (d.end) break;
    ASSERT_TRUE(d.error.ok()) << d.error;
    ASSERT_NE(d.batch, nullptr);
    d.ticket->handed_over();
    EXPECT_EQ(d.batch->index, batches);
    ids.resize(rig.batch);
    ids.resize(expected.next(std::span<uint64_t>(ids)));
    EXPECT_EQ(d.batch->sample_ids, ids) << "batch " << batches;
    const BatchField& f = d.batch->fields[0];
    for (size_t i = 0; i < ids.size(); ++i) {
      auto want = dlfeed::testing::read_bytes(rig.indices[0], ids[i]);
      ASSERT_TRUE(want.ok());
      ASSERT_EQ(std::string(reinterpret_cast<const char*>(f.bytes.data()) + f.offsets[i], 32), *want);
    }
    ++batches;
  }
  t.join();
  EXPECT_EQ(batches, (rig.samples + rig.batch - 1) / rig.batch);
  EXPECT_EQ(bytes_held(*rig.budget), 0u) << "every batch dropped, every byte given back";
}

TEST(Pipeline, DeliversEveryBatchInOrderThenTheEnd) {
  Rig rig(testing::scratch_dir() + "/x.npy", 1000, 32, "depth:4");
  Pipeline pipeline(2);
  expect_whole_epoch(rig, pipeline);
}

TEST(Pipeline, AStopEndsTheEpochEarly) {
  Rig rig(testing::scratch_dir() + "/x.npy", 1000, 10, "depth:2");
  decode::Decoder decoder(rig.indices, rig.names, rig.pool, &rig.counters);
  batch::Collator collator(rig.pool, &rig.counters, rig.queue, rig.failed);
  Pipeline pipeline(2);
  std::thread t([&] {
    plan::Lookahead source(rig.parts, rig.cursor("sequential"), 0, 0);
    pipeline.run(source, decoder, collator, rig.stop);
  });
  batch::Delivery first = rig.queue.pop(*rig.budget);
  ASSERT_NE(first.batch, nullptr);
  {
    std::lock_guard<std::mutex> lock(rig.budget->mu);
    EXPECT_LE(rig.budget->pipeline, 2u) << "depth:2 bounds the look-ahead";
  }
  // As the loader cancels an epoch.
  rig.budget->raise(rig.stop);
  rig.queue.wake();
  rig.engines.cancel_pending();
  t.join();
  uint64_t delivered = 1;
  bool ended = false;
  while (!ended) {
    batch::Delivery d = rig.queue.pop(*rig.budget);
    ended = d.end;
    delivered += d.batch != nullptr;
  }
  EXPECT_LT(delivered, 100u) << "the stop came after the first batch of 100";
  first = {};
  // Batches admitted but never handed to the pipeline let go when their
  // reads complete on the engine's thread.
  for (int k = 0; k < 10000 && bytes_held(*rig.budget) != 0; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(bytes_held(*rig.budget), 0u) << "batches planned but never delivered were given back";
}

// The most bodies of parallel(8, ...) running at once (each sleeps 30 ms).
uint32_t peak_of_parallel(Pipeline& pipeline) {
  std::atomic<uint32_t> now{0}, peak{0};
  pipeline.parallel(8, [&](size_t) {
    const uint32_t n = now.fetch_add(1) + 1;
    uint32_t p = peak.load();
    while (n > p && !peak.compare_exchange_weak(p, n)) {}
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    now.fetch_sub(1);
  });
  return peak.load();
}

// set_width moves the work to an arena of that many workers (the autotuner's
// decode threads): the width bounds what runs at once, and a width changed
// again and again mid-epoch delivers every batch once, in order, intact.
TEST(Pipeline, TheWidthBoundsTheWorkersAndMovesMidEpoch) {
  Pipeline pipeline(4);
  EXPECT_EQ(pipeline.width(), 4u);
  EXPECT_GE(peak_of_parallel(pipeline), 3u);  // 4 workers (and the caller): sleeping bodies all run
  pipeline.set_width(1);
  EXPECT_EQ(pipeline.width(), 1u);
  EXPECT_LE(peak_of_parallel(pipeline), 2u);  // 1 worker and the caller
  pipeline.set_width(0);                      // clamped
  EXPECT_EQ(pipeline.width(), 1u);
  pipeline.set_width(99);
  EXPECT_EQ(pipeline.width(), 4u);
  EXPECT_GE(peak_of_parallel(pipeline), 3u);  // the first arena again

  Rig rig(testing::scratch_dir() + "/x.npy", 1000, 16, "depth:4");
  const uint32_t widths[] = {1, 3, 2, 4};
  expect_whole_epoch(rig, pipeline, [&](uint64_t k) { pipeline.set_width(widths[k % 4]); });
}

}  // namespace
}  // namespace dlfeed::pipeline
