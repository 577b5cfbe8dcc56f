// SPDX-License-Identifier: Apache-2.0
// Property tests of the order stage over a grid of layouts, strategies,
// seeds, epochs and world sizes.
#include "dlfeed/order/order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlfeed/order/random.h"

namespace dlfeed {
namespace {

const std::vector<std::string> kBuiltins = {"sequential",    "file_shuffle",   "local_shuffle", "buffered_shuffle",
                                            "block_shuffle", "global_shuffle", "global_feistel"};
// Strategies whose global order does not depend on the world size.
const std::vector<std::string> kStrided = {"sequential",    "file_shuffle",   "buffered_shuffle",
                                           "block_shuffle", "global_shuffle", "global_feistel"};
const std::vector<std::string> kShuffles = {"file_shuffle",  "local_shuffle",  "buffered_shuffle",
                                            "block_shuffle", "global_shuffle", "global_feistel"};

std::vector<FileLayout> layouts() {
  std::vector<FileLayout> out;
  out.push_back(FileLayout::uniform(0, 0));
  out.push_back(FileLayout::uniform(1, 1));
  out.push_back(FileLayout::uniform(3, 7));
  out.push_back(FileLayout::uniform(10, 10));
  const std::vector<uint64_t> ragged = {0, 5, 0, 13, 1, 2, 9};
  out.push_back(FileLayout::from_sizes(ragged));
  const std::vector<uint64_t> one_big = {97};
  out.push_back(FileLayout::from_sizes(one_big));
  std::vector<uint64_t> many;
  for (uint64_t i = 0; i < 23; ++i) many.push_back(1 + (i * 7) % 11);
  out.push_back(FileLayout::from_sizes(many));
  SplitMix64 rng(31337);  // random ragged layouts, some with empty files
  for (int k = 0; k < 8; ++k) {
    std::vector<uint64_t> sizes(1 + rng.bounded(12));
    for (auto& n : sizes) n = rng.bounded(16);
    out.push_back(FileLayout::from_sizes(sizes));
  }
  return out;
}

OrderSpec make_spec(const std::string& strategy, uint64_t seed = 7, uint64_t epoch = 0, uint32_t rank = 0,
                    uint32_t world = 1, bool drop_last = false) {
  OrderSpec s;
  s.strategy = strategy;
  s.seed = seed;
  s.epoch = epoch;
  s.rank = rank;
  s.world_size = world;
  s.drop_last = drop_last;
  s.params.buffer_size = 4;  // small, so the parameters matter at test sizes
  s.params.block_size = 3;
  s.params.window = 2;
  return s;
}

std::vector<uint64_t> global_ids(const FileLayout& layout, const OrderSpec& spec) {
  auto g = make_global_order(layout, spec);
  EXPECT_TRUE(g.ok()) << g.status();
  std::vector<uint64_t> out((*g)->size());
  (*g)->fill(0, std::span<uint64_t>(out));
  return out;
}

std::vector<uint64_t> ranks_ids(const FileLayout& layout, OrderSpec spec) {
  auto v = rank_order(layout, spec);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<uint64_t>{};
}

bool is_permutation_of_all(std::vector<uint64_t> v, uint64_t n) {
  if (v.size() != n) return false;
  std::sort(v.begin(), v.end());
  for (uint64_t i = 0; i < n; ++i) {
    if (v[i] != i) return false;
  }
  return true;
}

// ------------------------------------------------------------ randomness

TEST(Random, SplitMix64MatchesReference) {
  // First outputs of the reference SplitMix64 with seed 0.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(rng.next(), 0x06c45d188009454fULL);
}

TEST(Random, BoundedInRangeAndUniform) {
  SplitMix64 rng(123);
  EXPECT_EQ(rng.bounded(1), 0u);
  std::vector<uint64_t> counts(6);
  const int draws = 60000;
  for (int i = 0; i < draws; ++i) {
    const uint64_t x = rng.bounded(6);
    ASSERT_LT(x, 6u);
    ++counts[x];
  }
  double chi2 = 0;
  for (uint64_t c : counts) chi2 += (c - draws / 6.0) * (c - draws / 6.0) / (draws / 6.0);
  EXPECT_LT(chi2, 30.0);  // 5 degrees of freedom; p ~ 1e-5
  const uint64_t big = (1ULL << 63) + 12345;
  for (int i = 0; i < 1000; ++i) ASSERT_LT(rng.bounded(big), big);
}

TEST(Random, Mul128Exact) {
  auto [hi, lo] = mul_128(0xffffffffffffffffULL, 0xffffffffffffffffULL);
  EXPECT_EQ(hi, 0xfffffffffffffffeULL);
  EXPECT_EQ(lo, 1u);
}

// Pins the orders: a change here changes every user's order for a seed,
// which must be a deliberate, documented decision.
TEST(Random, GoldenOrders) {
  const FileLayout layout = FileLayout::uniform(2, 5);
  std::vector<std::string> got;  // seed 42, epoch 1
  for (const auto& s : kBuiltins) {
    std::string line = s + ":";
    for (uint64_t id : global_ids(layout, make_spec(s, 42, 1))) absl::StrAppend(&line, " ", id);
    got.push_back(line);
  }
  const std::vector<std::string> want = {
      "sequential: 0 1 2 3 4 5 6 7 8 9",     "file_shuffle: 5 6 7 8 9 0 1 2 3 4",
      "local_shuffle: 1 8 0 5 7 4 9 2 3 6",  "buffered_shuffle: 6 7 9 5 1 2 0 3 8 4",
      "block_shuffle: 7 9 8 6 1 0 3 2 5 4",  "global_shuffle: 0 2 4 9 3 7 6 5 1 8",
      "global_feistel: 5 8 2 3 0 9 7 4 6 1",
  };
  EXPECT_EQ(got, want);
}

// ------------------------------------------------------------ Feistel

TEST(Feistel, BijectionForManySizes) {
  std::vector<uint64_t> sizes;
  for (uint64_t n = 1; n <= 300; ++n) sizes.push_back(n);
  for (uint64_t n : {1000u, 1024u, 4095u, 4097u, 65536u, 100003u, 1000000u}) sizes.push_back(n);
  for (uint64_t n : sizes) {
    for (uint64_t key : {0ULL, 1ULL, 0xdeadbeefULL}) {
      FeistelPermutation p(n, key);
      std::vector<bool> seen(n);
      for (uint64_t x = 0; x < n; ++x) {
        const uint64_t y = p(x);
        ASSERT_LT(y, n) << "n=" << n;
        ASSERT_FALSE(seen[y]) << "n=" << n << " x=" << x << " collides";
        seen[y] = true;
        ASSERT_EQ(p.inverse(y), x);
      }
    }
  }
}

TEST(Feistel, HugeDomainsWithoutMaterializing) {
  // An inverse that undoes every image proves injectivity on those points.
  for (uint64_t n : {1000000000ULL, (1ULL << 40) + 7, 0xffffffffffffffffULL}) {
    FeistelPermutation p(n, 99);
    SplitMix64 rng(5);
    for (int i = 0; i < 20000; ++i) {
      const uint64_t x = rng.bounded(n);
      const uint64_t y = p(x);
      ASSERT_LT(y, n);
      ASSERT_EQ(p.inverse(y), x) << "n=" << n;
    }
  }
  // The global_feistel strategy on 10^9 samples answers at() without memory.
  OrderSpec spec = make_spec("global_feistel", 3, 2, 5, 8);
  auto cursor = OrderCursor::create(FileLayout::uniform(1000, 1000000), spec);
  ASSERT_TRUE(cursor.ok()) << cursor.status();
  EXPECT_EQ(cursor->size(), 125000000u);
  std::set<uint64_t> ids;
  for (int i = 0; i < 1000; ++i) ids.insert(*cursor->next());
  EXPECT_EQ(ids.size(), 1000u);
  EXPECT_LT(*ids.rbegin(), 1000000000u);
}

// ------------------------------------------------------------ properties

TEST(Order, GlobalOrderIsAPermutation) {
  for (const auto& layout : layouts()) {
    for (const auto& s : kBuiltins) {
      for (uint64_t seed : {0u, 1u, 12345u}) {
        for (uint64_t epoch : {0u, 1u, 9u}) {
          for (uint32_t world : {1u, 3u}) {
            auto ids = global_ids(layout, make_spec(s, seed, epoch, 0, world));
            ASSERT_TRUE(is_permutation_of_all(ids, layout.num_samples()))
                << s << " seed " << seed << " epoch " << epoch << " n " << layout.num_samples();
          }
        }
      }
    }
  }
}

TEST(Order, ShardsReadEverySampleOnce) {
  for (const auto& layout : layouts()) {
    const uint64_t n = layout.num_samples();
    for (const auto& s : kBuiltins) {
      for (uint32_t world : {1u, 2u, 3u, 4u, 7u, 8u}) {
        for (bool drop_last : {false, true}) {
          for (uint64_t seed : {0u, 77u}) {
            const std::string what =
                absl::StrCat(s, " n=", n, " files=", layout.num_files(), " W=", world, " drop=", drop_last);
            auto g = make_global_order(layout, make_spec(s, seed, 3, 0, world, drop_last));
            ASSERT_TRUE(g.ok());
            const bool partitioned = !(*g)->rank_bounds().empty();
            std::vector<uint64_t> count(n);
            uint64_t len = 0;
            bool error = false;
            for (uint32_t r = 0; r < world; ++r) {
              auto c = OrderCursor::create(layout, make_spec(s, seed, 3, r, world, drop_last));
              if (!c.ok()) {  // only local_shuffle padding with a rank without files
                const auto b = (*g)->rank_bounds();
                bool empty_rank = false;
                for (uint32_t k = 0; k < world; ++k) empty_rank |= b[k] == b[k + 1];
                ASSERT_TRUE(partitioned && !drop_last && empty_rank) << what << c.status();
                error = true;
                break;
              }
              if (r == 0) len = c->size();
              ASSERT_EQ(c->size(), len) << what << ": shards of unequal length";
              while (auto id = c->next()) {
                ASSERT_LT(*id, n);
                ++count[*id];
              }
            }
            if (error) continue;
            const uint64_t total = std::accumulate(count.begin(), count.end(), uint64_t{0});
            EXPECT_EQ(total, len * world) << what;
            if (!partitioned) {
              EXPECT_EQ(len, drop_last ? n / world : (n + world - 1) / world) << what;
              // Dropped: the global order's last n % W positions. Padded:
              // its first (len * W - n) positions are read twice.
              std::vector<uint64_t> want(n, 1);
              const auto gids = global_ids(layout, make_spec(s, seed, 3, 0, world));
              if (drop_last) {
                for (uint64_t p = len * world; p < n; ++p) want[gids[p]] = 0;
              } else {
                for (uint64_t p = 0; p < len * world - n; ++p) ++want[gids[p % n]];
              }
              EXPECT_EQ(count, want) << what;
            } else {
              for (uint64_t id = 0; id < n; ++id) {
                EXPECT_LE(count[id], drop_last ? 1u : len) << what;
                if (!drop_last) {
                  EXPECT_GE(count[id], 1u) << what;
                }
              }
            }
            if (n % world == 0 && !partitioned) {
              for (uint64_t id = 0; id < n; ++id) ASSERT_EQ(count[id], 1u) << what;
            }
          }
        }
      }
    }
  }
}

TEST(Order, Deterministic) {
  for (const auto& layout : layouts()) {
    for (const auto& s : kBuiltins) {
      for (uint32_t world : {1u, 3u}) {
        for (uint32_t r = 0; r < world; ++r) {
          const OrderSpec spec = make_spec(s, 5, 2, r, world, true);
          EXPECT_EQ(ranks_ids(layout, spec), ranks_ids(layout, spec)) << s;
        }
      }
    }
  }
}

TEST(Order, NewPermutationEachEpochAndSeed) {
  const FileLayout layout = FileLayout::uniform(20, 10);
  for (const auto& s : kShuffles) {
    const auto base = global_ids(layout, make_spec(s, 1, 0));
    EXPECT_NE(base, global_ids(layout, make_spec(s, 1, 1))) << s << ": same order in epochs 0 and 1";
    EXPECT_NE(base, global_ids(layout, make_spec(s, 2, 0))) << s << ": same order for seeds 1 and 2";
    EXPECT_NE(base, global_ids(layout, make_spec("sequential"))) << s;
  }
}

TEST(Order, GlobalOrderDoesNotDependOnWorldSize) {
  for (const auto& layout : layouts()) {
    const uint64_t n = layout.num_samples();
    for (const auto& s : kStrided) {
      const auto single = ranks_ids(layout, make_spec(s, 11, 4, 0, 1));
      ASSERT_EQ(single.size(), n);
      for (uint32_t world : {2u, 3u, 5u, 8u}) {
        // Interleaving the ranks rebuilds the one-rank order.
        std::vector<uint64_t> rebuilt(n / world * world);
        for (uint32_t r = 0; r < world; ++r) {
          const auto ids = ranks_ids(layout, make_spec(s, 11, 4, r, world, true));
          for (size_t i = 0; i < ids.size(); ++i) rebuilt[i * world + r] = ids[i];
        }
        EXPECT_TRUE(std::equal(rebuilt.begin(), rebuilt.end(), single.begin())) << s << " W=" << world;
      }
    }
  }
}

TEST(Order, ResumeAtEveryPosition) {
  const std::vector<FileLayout> small = {FileLayout::uniform(3, 7),
                                         FileLayout::from_sizes(std::vector<uint64_t>{4, 1, 0, 9, 2, 5})};
  for (const auto& layout : small) {
    for (const auto& s : kBuiltins) {
      for (uint32_t world : {1u, 3u}) {
        for (bool drop_last : {false, true}) {
          for (uint32_t r = 0; r < world; ++r) {
            const OrderSpec spec = make_spec(s, 21, 6, r, world, drop_last);
            auto c = OrderCursor::create(layout, spec);
            ASSERT_TRUE(c.ok()) << c.status();
            const auto all = ranks_ids(layout, spec);
            for (uint64_t p = 0; p <= all.size(); ++p) {
              const std::string state = c->state();
              EXPECT_LT(state.size(), 64u);
              auto resumed = OrderCursor::from_state(layout, state);
              ASSERT_TRUE(resumed.ok()) << resumed.status();
              EXPECT_EQ(resumed->position(), p);
              EXPECT_EQ(resumed->remaining(), all.size() - p);
              std::vector<uint64_t> rest;
              while (auto id = resumed->next()) rest.push_back(*id);
              ASSERT_TRUE(std::equal(rest.begin(), rest.end(), all.begin() + static_cast<ptrdiff_t>(p), all.end()))
                  << s << " p=" << p;
              ASSERT_EQ(rest.size(), all.size() - p);
              c->next();
            }
          }
        }
      }
    }
  }
}

TEST(Order, RestartOnDifferentWorldSize) {
  const FileLayout layout = FileLayout::uniform(7, 13);  // 91 samples
  for (const auto& s : kStrided) {
    const auto global = global_ids(layout, make_spec(s, 8, 1));
    // 4 ranks read 10 ids each: global positions [0, 40) consumed.
    const uint64_t consumed = 40;
    for (uint32_t world : {1u, 3u, 6u}) {
      std::vector<uint64_t> count(layout.num_samples());
      for (uint32_t r = 0; r < world; ++r) {
        auto c = OrderCursor::create(layout, make_spec(s, 8, 1, r, world));
        ASSERT_TRUE(c.ok());
        ASSERT_TRUE(c->seek_global(consumed).ok());
        EXPECT_GE(c->global_position(c->position()), consumed);
        while (auto id = c->next()) ++count[*id];
      }
      for (uint64_t p = 0; p < global.size(); ++p) {
        // The not yet consumed part is read; the consumed part only as padding.
        if (p >= consumed) {
          EXPECT_GE(count[global[p]], 1u) << s << " W=" << world << " p=" << p;
        }
      }
      uint64_t consumed_reads = 0;
      for (uint64_t p = 0; p < consumed; ++p) consumed_reads += count[global[p]];
      EXPECT_LT(consumed_reads, world) << s << ": consumed samples re-read beyond padding";
    }
  }
}

TEST(Order, CursorPeekAndBatches) {
  const FileLayout layout = FileLayout::uniform(5, 11);
  for (const auto& s : kBuiltins) {
    for (uint32_t world : {1u, 2u}) {
      const OrderSpec spec = make_spec(s, 3, 0, world - 1, world);
      const auto all = ranks_ids(layout, spec);
      auto c = OrderCursor::create(layout, spec);
      ASSERT_TRUE(c.ok());
      EXPECT_EQ(c->peek(1000), all);
      EXPECT_EQ(c->position(), 0u);
      std::vector<uint64_t> got, batch(4);
      while (size_t k = c->next(std::span<uint64_t>(batch))) {
        got.insert(got.end(), batch.begin(), batch.begin() + static_cast<ptrdiff_t>(k));
        EXPECT_EQ(c->peek(3),
                  std::vector<uint64_t>(all.begin() + static_cast<ptrdiff_t>(got.size()),
                                        all.begin() + static_cast<ptrdiff_t>(std::min(got.size() + 3, all.size()))));
      }
      EXPECT_EQ(got, all) << s;
      EXPECT_TRUE(c->done());
      EXPECT_FALSE(c->next().has_value());
      for (uint64_t i = 0; i < all.size(); ++i) EXPECT_EQ(c->at(i), all[i]);
      EXPECT_TRUE(c->seek(2).ok());
      EXPECT_EQ(*c->next(), all[2]);
      EXPECT_FALSE(c->seek(all.size() + 1).ok());
    }
  }
}

// ------------------------------------------------------------ per strategy

TEST(Strategy, SequentialIsFileOrder) {
  const FileLayout layout = FileLayout::uniform(4, 6);
  std::vector<uint64_t> iota(24);
  std::iota(iota.begin(), iota.end(), uint64_t{0});
  EXPECT_EQ(global_ids(layout, make_spec("sequential", 99, 5)), iota);
}

TEST(Strategy, FileShuffleKeepsFilesWhole) {
  for (const auto& layout : layouts()) {
    for (uint64_t epoch = 0; epoch < 5; ++epoch) {
      const auto ids = global_ids(layout, make_spec("file_shuffle", 1, epoch));
      for (size_t i = 1; i < ids.size(); ++i) {
        // Within a run of one file ids ascend by one; a new file starts at its first id.
        if (layout.file_of(ids[i]) == layout.file_of(ids[i - 1])) {
          EXPECT_EQ(ids[i], ids[i - 1] + 1);
        } else {
          EXPECT_EQ(ids[i], layout.file_begin[layout.file_of(ids[i])]);
        }
      }
    }
  }
}

TEST(Strategy, LocalShuffleStaysOnOwnFiles) {
  const std::vector<uint64_t> sizes = {3, 8, 1, 6, 6, 2, 9, 4, 5};
  const FileLayout layout = FileLayout::from_sizes(sizes);
  for (uint32_t world : {1u, 2u, 4u}) {
    for (uint32_t r = 0; r < world; ++r) {
      auto g = make_global_order(layout, make_spec("local_shuffle", 4, 0, r, world));
      ASSERT_TRUE(g.ok());
      const auto bounds = (*g)->rank_bounds();
      std::vector<uint64_t> own;
      for (uint64_t p = bounds[r]; p < bounds[r + 1]; ++p) {
        EXPECT_EQ(layout.file_of((*g)->at(p)) % world, r);
        own.push_back((*g)->at(p));
      }
      uint64_t expected = 0;
      for (uint64_t f = r; f < sizes.size(); f += world) expected += sizes[f];
      EXPECT_EQ(own.size(), expected);
      // Padded shards repeat the rank's own first ids.
      const auto shard = ranks_ids(layout, make_spec("local_shuffle", 4, 0, r, world));
      for (size_t i = 0; i < shard.size(); ++i) EXPECT_EQ(shard[i], own[i % own.size()]);
    }
  }
  // More ranks than files: padding is impossible for a rank with no files.
  EXPECT_FALSE(OrderCursor::create(FileLayout::uniform(2, 5), make_spec("local_shuffle", 1, 0, 0, 3)).ok());
  auto dropped = OrderCursor::create(FileLayout::uniform(2, 5), make_spec("local_shuffle", 1, 0, 2, 3, true));
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(dropped->size(), 0u);
  auto c = OrderCursor::create(FileLayout::uniform(4, 5), make_spec("local_shuffle", 1, 0, 0, 2));
  EXPECT_EQ(c->seek_global(3).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Strategy, BufferedShuffleIsBoundedByTheBuffer) {
  const FileLayout layout = FileLayout::from_sizes(std::vector<uint64_t>{10, 3, 17, 8, 12});
  for (uint64_t buffer : {1u, 2u, 5u, 16u, 1000u}) {
    OrderSpec spec = make_spec("buffered_shuffle", 6, 2);
    spec.params.buffer_size = buffer;
    const auto out = global_ids(layout, spec);
    const auto stream = global_ids(layout, make_spec("file_shuffle", 6, 2));
    ASSERT_TRUE(is_permutation_of_all(out, layout.num_samples()));
    if (buffer == 1) {
      EXPECT_EQ(out, stream);
    }
    std::vector<uint64_t> stream_pos(out.size());
    for (size_t p = 0; p < stream.size(); ++p) stream_pos[stream[p]] = p;
    for (size_t p = 0; p < out.size(); ++p) {
      // Output p was among the first p + buffer ids of the stream.
      EXPECT_LT(stream_pos[out[p]], p + buffer);
    }
  }
  OrderSpec bad = make_spec("buffered_shuffle");
  bad.params.buffer_size = 0;
  EXPECT_FALSE(make_global_order(layout, bad).ok());
}

TEST(Strategy, BlockShuffleWindowsHoldWholeBlocks) {
  const FileLayout layout = FileLayout::uniform(8, 12);  // 96 = 32 blocks of 3
  for (uint64_t window : {1u, 2u, 4u}) {
    OrderSpec spec = make_spec("block_shuffle", 9, 1);
    spec.params.window = window;
    const auto out = global_ids(layout, spec);
    ASSERT_TRUE(is_permutation_of_all(out, 96));
    const uint64_t span = 3 * window;
    for (uint64_t begin = 0; begin < out.size(); begin += span) {
      std::set<uint64_t> blocks;
      for (uint64_t p = begin; p < std::min<uint64_t>(begin + span, out.size()); ++p) blocks.insert(out[p] / 3);
      EXPECT_EQ(blocks.size(), std::min<uint64_t>(window, (out.size() - begin) / 3));
    }
  }
  OrderSpec bad = make_spec("block_shuffle");
  bad.params.block_size = 0;
  EXPECT_FALSE(make_global_order(layout, bad).ok());
}

TEST(Strategy, ExplicitIndexArray) {
  const FileLayout layout = FileLayout::uniform(2, 5);
  auto ids = std::make_shared<const std::vector<uint64_t>>(std::vector<uint64_t>{9, 0, 3, 3, 7});
  OrderSpec spec = make_spec("explicit", 0, 0, 1, 2);
  spec.params.indices = ids;
  EXPECT_EQ(ranks_ids(layout, spec), (std::vector<uint64_t>{0, 3, 9}));  // padded with position 0
  auto c = OrderCursor::create(layout, spec);
  ASSERT_TRUE(c.ok());
  c->next();
  const std::string state = c->state();
  EXPECT_FALSE(OrderCursor::from_state(layout, state).ok());  // array not given
  auto other = std::make_shared<const std::vector<uint64_t>>(std::vector<uint64_t>{1, 2});
  EXPECT_FALSE(OrderCursor::from_state(layout, state, other).ok());
  auto resumed = OrderCursor::from_state(layout, state, ids);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->peek(10), (std::vector<uint64_t>{3, 9}));

  spec.params.indices = std::make_shared<const std::vector<uint64_t>>(std::vector<uint64_t>{10});
  EXPECT_EQ(OrderCursor::create(layout, spec).status().code(), absl::StatusCode::kOutOfRange);
  spec.params.indices = nullptr;
  EXPECT_FALSE(OrderCursor::create(layout, spec).ok());
}

TEST(Strategy, UserRegisteredStrategy) {
  class Reverse : public GlobalOrder {
   public:
    explicit Reverse(uint64_t n) : n_(n) {}
    uint64_t size() const override { return n_; }
    uint64_t at(uint64_t p) const override { return n_ - 1 - p; }

   private:
    uint64_t n_;
  };
  ASSERT_TRUE(
      register_strategy("test_reverse",
                        [](const FileLayout& l, const OrderSpec&) -> absl::StatusOr<std::unique_ptr<GlobalOrder>> {
                          return std::make_unique<Reverse>(l.num_samples());
                        })
          .ok());
  EXPECT_EQ(
      register_strategy("test_reverse",
                        [](const FileLayout& l, const OrderSpec&) -> absl::StatusOr<std::unique_ptr<GlobalOrder>> {
                          return std::make_unique<Reverse>(l.num_samples());
                        })
          .code(),
      absl::StatusCode::kAlreadyExists);
  const auto names = strategy_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "test_reverse"), names.end());
  EXPECT_EQ(ranks_ids(FileLayout::uniform(1, 6), make_spec("test_reverse", 0, 0, 1, 2)),
            (std::vector<uint64_t>{4, 2, 0}));
}

// ------------------------------------------------------------ errors, state

TEST(OrderErrors, BadSpecs) {
  const FileLayout layout = FileLayout::uniform(2, 5);
  EXPECT_EQ(OrderCursor::create(layout, make_spec("nope")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(OrderCursor::create(layout, make_spec("sequential", 0, 0, 2, 2)).ok());
  EXPECT_FALSE(OrderCursor::create(layout, make_spec("sequential", 0, 0, 0, 0)).ok());
  FileLayout bad;
  bad.file_begin = {0, 5, 3};
  EXPECT_FALSE(OrderCursor::create(bad, make_spec("sequential")).ok());
  bad.file_begin = {};
  EXPECT_FALSE(OrderCursor::create(bad, make_spec("sequential")).ok());
}

TEST(OrderState, RoundTripAndRejects) {
  OrderState st;
  st.spec = make_spec("block_shuffle", 0xffffffffffffffffULL, 123456789, 7, 64, true);
  st.position = 1ULL << 40;
  st.layout_fingerprint = 0x0123456789abcdefULL;
  const std::string bytes = encode_state(st);
  EXPECT_EQ(bytes[0], 1);  // version byte
  auto back = decode_state(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->spec.strategy, "block_shuffle");
  EXPECT_EQ(back->spec.seed, st.spec.seed);
  EXPECT_EQ(back->spec.epoch, st.spec.epoch);
  EXPECT_EQ(back->spec.rank, 7u);
  EXPECT_EQ(back->spec.world_size, 64u);
  EXPECT_TRUE(back->spec.drop_last);
  EXPECT_EQ(back->spec.params.block_size, 3u);
  EXPECT_EQ(back->position, st.position);
  EXPECT_EQ(back->layout_fingerprint, st.layout_fingerprint);
  for (size_t cut = 0; cut < bytes.size(); ++cut) EXPECT_FALSE(decode_state(bytes.substr(0, cut)).ok());
  EXPECT_FALSE(decode_state(bytes + "x").ok());
  std::string v2 = bytes;
  v2[0] = 2;
  EXPECT_FALSE(decode_state(v2).ok());

  auto c = OrderCursor::create(FileLayout::uniform(3, 3), make_spec("global_shuffle"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(OrderCursor::from_state(FileLayout::uniform(3, 4), c->state()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// ------------------------------------------------------------ uniformity

// Chi-square of (position, id) counts over many epochs against uniform; a
// fixed seed and a generous threshold (df + 8 sd) keep it deterministic and
// far from flaky while still catching a biased permutation.
double position_chi2(const std::string& strategy, uint64_t n, uint64_t epochs, uint32_t world) {
  const FileLayout layout = FileLayout::uniform(1, n);
  std::vector<uint64_t> count(n * n);
  for (uint64_t e = 0; e < epochs; ++e) {
    for (uint32_t r = 0; r < world; ++r) {
      const auto ids = ranks_ids(layout, make_spec(strategy, 2024, e, r, world, true));
      for (size_t i = 0; i < ids.size(); ++i) ++count[(i * world + r) * n + ids[i]];
    }
  }
  const double expected = static_cast<double>(epochs) / static_cast<double>(n);
  double chi2 = 0;
  for (uint64_t c : count) chi2 += (static_cast<double>(c) - expected) * (static_cast<double>(c) - expected) / expected;
  return chi2;
}

TEST(Uniformity, GlobalStrategiesPassChiSquare) {
  for (const std::string s : {"global_shuffle", "global_feistel"}) {
    for (uint64_t n : {2u, 5u, 10u, 17u, 33u}) {
      const uint64_t epochs = 400 * n;
      // Each of the n*n cells is binomial(epochs, 1/n), so the statistic has
      // mean n(n-1) (the permutation's row/column constraints change its
      // spread a little, which the 8-sd margin absorbs).
      const double df = static_cast<double>(n * (n - 1));
      const double chi2 = position_chi2(s, n, epochs, n % 2 == 0 ? 2 : 1);
      std::printf("  %s n=%d: chi2 %.1f, df %.0f\n", s.c_str(), static_cast<int>(n), chi2, df);
      EXPECT_LT(chi2, df + 8 * std::sqrt(2 * df)) << s << " n=" << n << " chi2=" << chi2 << " df=" << df;
    }
  }
  // The check has power: a sequential order fails it badly.
  EXPECT_GT(position_chi2("sequential", 10, 100, 1), 1000.0);
}

// ------------------------------------------------------------ global_start

TEST(GlobalStart, RanksCutTheRemainderInEqualShards) {
  const FileLayout layout = FileLayout::uniform(4, 5);  // 20 ids
  const auto global = ranks_ids(layout, make_spec("global_shuffle", 5, 1));
  for (bool drop_last : {true, false}) {
    std::vector<uint64_t> got;
    for (uint32_t r = 0; r < 3; ++r) {
      OrderSpec spec = make_spec("global_shuffle", 5, 1, r, 3, drop_last);
      spec.global_start = 7;  // 13 positions left on 3 ranks
      auto c = OrderCursor::create(layout, spec);
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(c->size(), drop_last ? 4u : 5u);
      for (uint64_t i = 0; i < c->size(); ++i) {
        const uint64_t p = 7 + r + 3 * i;
        EXPECT_EQ(c->global_position(i), p % 20);
        EXPECT_EQ(c->at(i), global[p % 20]) << "rank " << r << " i " << i;
        got.push_back(c->at(i));
      }
      EXPECT_EQ(c->consumed_global(2), 7u + 6);
    }
    std::sort(got.begin(), got.end());
    std::vector<uint64_t> want(global.begin() + 7, global.begin() + (drop_last ? 19 : 20));
    if (!drop_last) want.insert(want.end(), global.begin(), global.begin() + 2);  // 15 = 13 + 2 padded
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want);
  }
  // Past the end: nothing left.
  OrderSpec spec = make_spec("sequential", 5, 1, 0, 3);
  spec.global_start = 25;
  EXPECT_EQ(OrderCursor::create(layout, spec)->size(), 0u);
  // One rank: the run of the global order from global_start (the fill fast path).
  spec = make_spec("global_feistel", 5, 1, 0, 1);
  spec.global_start = 6;
  auto one = OrderCursor::create(layout, spec).value();
  std::vector<uint64_t> run(14);
  EXPECT_EQ(one.next(std::span<uint64_t>(run)), 14u);
  const auto feistel = ranks_ids(layout, make_spec("global_feistel", 5, 1));
  EXPECT_EQ(run, std::vector<uint64_t>(feistel.begin() + 6, feistel.end()));
}

TEST(GlobalStart, StateKeepsItAndPartitionedOrdersRefuseIt) {
  const FileLayout layout = FileLayout::uniform(4, 5);
  OrderSpec spec = make_spec("block_shuffle", 5, 2, 1, 2);
  spec.global_start = 9;
  auto c = OrderCursor::create(layout, spec).value();
  ASSERT_TRUE(c.seek(2).ok());
  const std::string st = c.state();
  EXPECT_EQ(st[0], 2);  // version 2: global_start appended
  auto back = OrderCursor::from_state(layout, st);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->spec().global_start, 9u);
  EXPECT_EQ(back->position(), 2u);
  EXPECT_EQ(back->peek(100), c.peek(100));
  for (size_t cut = 0; cut < st.size(); ++cut) EXPECT_FALSE(decode_state(st.substr(0, cut)).ok());
  // Without one the bytes stay version 1, as before.
  EXPECT_EQ(OrderCursor::create(layout, make_spec("block_shuffle"))->state()[0], 1);
  // seek_global counts from the start of the global order.
  // Rank 1 of 2 from 9 reads global positions 10, 12, 14, 16, 18...: after
  // the job consumed [0, 17) it is at its 5th id.
  ASSERT_TRUE(c.seek_global(17).ok());
  EXPECT_EQ(c.position(), 4u);

  OrderSpec local = make_spec("local_shuffle", 5, 2, 1, 2);
  local.global_start = 3;
  auto refused = OrderCursor::create(layout, local);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("partitions samples by rank"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace dlfeed
