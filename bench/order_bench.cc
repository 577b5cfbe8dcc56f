// SPDX-License-Identifier: Apache-2.0
// Order generation rate per strategy: building an epoch's order and reading
// all of one rank's ids, reported as ids per second.
//   build/bench/order_bench --benchmark_filter=Epoch
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "dlfeed/order/order.h"
#include "dlfeed/order/random.h"

namespace {

const char* const kStrategies[] = {"sequential",    "file_shuffle",   "local_shuffle", "buffered_shuffle",
                                   "block_shuffle", "global_shuffle", "global_feistel"};

// A whole epoch of one rank (of `world`): make the order, read every id.
void BM_Epoch(benchmark::State& state) {
  const std::string strategy = kStrategies[state.range(0)];
  const uint64_t samples = static_cast<uint64_t>(state.range(1));
  const uint32_t world = static_cast<uint32_t>(state.range(2));
  const dlfeed::FileLayout layout = dlfeed::FileLayout::uniform(1024, samples / 1024);
  dlfeed::OrderSpec spec;
  spec.strategy = strategy;
  spec.world_size = world;
  std::vector<uint64_t> batch(256);
  uint64_t ids = 0, epoch = 0, sum = 0;
  for (auto _ : state) {
    spec.epoch = epoch++;
    auto cursor = dlfeed::OrderCursor::create(layout, spec);
    if (!cursor.ok()) {
      state.SkipWithError(std::string(cursor.status().message()).c_str());
      return;
    }
    while (size_t n = cursor->next(std::span<uint64_t>(batch))) {
      sum += batch[n - 1];
      ids += n;
    }
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(static_cast<int64_t>(ids));
  state.SetLabel(strategy + (world > 1 ? " W=" + std::to_string(world) : ""));
}
BENCHMARK(BM_Epoch)
    ->ArgsProduct({benchmark::CreateDenseRange(0, 6, 1), {1 << 20}, {1, 8}})
    ->Unit(benchmark::kMillisecond);

// Random access into the O(1)-memory permutation at 10^9 samples.
void BM_FeistelAt(benchmark::State& state) {
  dlfeed::FeistelPermutation perm(1000000000ULL, 12345);
  uint64_t x = 0, sum = 0;
  for (auto _ : state) {
    sum += perm(x);
    x = (x + 7919) % 1000000000ULL;
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FeistelAt);

}  // namespace
