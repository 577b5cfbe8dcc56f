// SPDX-License-Identifier: Apache-2.0
// The shuffle-quality figures on orders whose figures are known.
#include "dlfeed/order/quality.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

namespace dlfeed {
namespace {

std::vector<uint64_t> order_of(const FileLayout& layout, const std::string& strategy, uint32_t rank = 0,
                               uint32_t world = 1) {
  OrderSpec spec;
  spec.strategy = strategy;
  spec.seed = 1;
  spec.rank = rank;
  spec.world_size = world;
  auto ids = rank_order(layout, spec);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return *ids;
}

TEST(Quality, FileOrder) {
  const FileLayout layout = FileLayout::uniform(10, 100);
  const auto s = score(order_of(layout, "sequential"), layout, 32);
  EXPECT_EQ(s.length, 1000u);
  EXPECT_DOUBLE_EQ(s.mean_displacement, 0.0);
  EXPECT_NEAR(s.rank_correlation, 1.0, 1e-12);
  EXPECT_NEAR(s.same_file_fraction, 990.0 / 999.0, 1e-12);
  // 31 batches of 32: those crossing a file boundary (at multiples of 100) hold 2 files.
  int crossing = 0;
  for (int b = 0; b < 31; ++b) crossing += (b * 32) / 100 != (b * 32 + 31) / 100 ? 1 : 0;
  EXPECT_NEAR(s.distinct_files_per_batch, (31.0 + crossing) / 31.0, 1e-12);
  // A strided shard of the file order is still the file order.
  const auto shard = score(order_of(layout, "sequential", 1, 4), layout, 32);
  EXPECT_LT(shard.mean_displacement, 0.01);
  EXPECT_NEAR(shard.rank_correlation, 1.0, 1e-12);
}

TEST(Quality, ReversedAndRepeated) {
  const FileLayout layout = FileLayout::uniform(2, 4);
  std::vector<uint64_t> rev(8);
  std::iota(rev.rbegin(), rev.rend(), uint64_t{0});
  const auto s = score(rev, layout, 4);
  EXPECT_NEAR(s.rank_correlation, -1.0, 1e-12);
  EXPECT_DOUBLE_EQ(s.distinct_files_per_batch, 1.0);
  const std::vector<uint64_t> same = {3, 3, 3};
  const auto t = score(same, layout, 8);  // all ties, one partial batch
  EXPECT_DOUBLE_EQ(t.rank_correlation, 0.0);
  EXPECT_DOUBLE_EQ(t.same_file_fraction, 1.0);
  EXPECT_DOUBLE_EQ(t.distinct_files_per_batch, 1.0);
  EXPECT_EQ(score({}, layout, 4).length, 0u);
}

TEST(Quality, UniformShuffles) {
  const FileLayout layout = FileLayout::uniform(100, 1000);
  for (const std::string strategy : {"global_shuffle", "global_feistel"}) {
    const auto s = score(order_of(layout, strategy), layout, 64);
    EXPECT_NEAR(s.mean_displacement, 1.0 / 3.0, 0.01) << strategy;
    EXPECT_NEAR(s.rank_correlation, 0.0, 0.02) << strategy;
    EXPECT_NEAR(s.same_file_fraction, 0.01, 0.003) << strategy;
    // Expected distinct files among 64 uniform draws from 100 files.
    EXPECT_NEAR(s.distinct_files_per_batch, 100 * (1 - std::pow(0.99, 64)), 1.0) << strategy;
  }
}

TEST(Quality, StrategiesRankAsDocumented) {
  // Locality falls and randomness rises from file order to global shuffle.
  const FileLayout layout = FileLayout::uniform(64, 256);
  const auto seq = score(order_of(layout, "sequential"), layout, 32);
  const auto file = score(order_of(layout, "file_shuffle"), layout, 32);
  const auto block = score(order_of(layout, "block_shuffle"), layout, 32);
  const auto global = score(order_of(layout, "global_shuffle"), layout, 32);
  EXPECT_GT(file.mean_displacement, seq.mean_displacement);
  EXPECT_GT(global.mean_displacement, 0.3);
  EXPECT_GE(seq.same_file_fraction, file.same_file_fraction);
  EXPECT_GT(file.same_file_fraction, block.same_file_fraction);
  EXPECT_GT(block.same_file_fraction, global.same_file_fraction);
  EXPECT_LT(file.distinct_files_per_batch, block.distinct_files_per_batch);
  EXPECT_LT(block.distinct_files_per_batch, global.distinct_files_per_batch);
}

}  // namespace
}  // namespace dlfeed
