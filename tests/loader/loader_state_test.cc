// SPDX-License-Identifier: Apache-2.0
// The resume state (src/loader/loader_state.h, include/dlfeed/loader_state.h):
// encode/decode round trips, garbage is refused with a clear error, and
// restore's checks and elastic arithmetic; then a real Loader's state read
// through the public decoder.

#include "loader/loader_state.h"

#include <string>

#include "dev/generate.h"
#include "dlfeed/loader.h"
#include "dlfeed/loader_state.h"
#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed {
namespace {

#define EXPECT_CONTAINS(text, part)                          \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "'" << std::string(text) << "' does not contain '" << (part) << "'"

FileLayout layout_of(std::vector<uint64_t> per_file) {
  FileLayout l;
  l.file_begin = {0};
  for (uint64_t n : per_file) l.file_begin.push_back(l.file_begin.back() + n);
  return l;
}

OrderSpec spec_of(const std::string& strategy, uint64_t epoch, uint32_t rank = 0, uint32_t world = 1) {
  OrderSpec s;
  s.strategy = strategy;
  s.seed = 17;
  s.epoch = epoch;
  s.rank = rank;
  s.world_size = world;
  return s;
}

TEST(LoaderState, RoundTrips) {
  const FileLayout layout = layout_of({10, 20, 30});
  auto c = OrderCursor::create(layout, spec_of("global_shuffle", 4));
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string bytes = detail::loader_state_at(layout, spec_of("global_shuffle", 0), &*c, 37);
  EXPECT_TRUE(is_loader_state(bytes));
  EXPECT_EQ(bytes.substr(0, 4), "dlfL");
  auto s = decode_loader_state(bytes);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->version, kLoaderStateVersion);
  EXPECT_EQ(s->order.spec.strategy, "global_shuffle");
  EXPECT_EQ(s->order.spec.seed, 17u);
  EXPECT_EQ(s->order.spec.epoch, 4u);
  EXPECT_EQ(s->order.position, 37u);
  EXPECT_EQ(s->order.layout_fingerprint, layout.fingerprint());
  // The order state inside is OrderCursor::state() at that position.
  OrderCursor at = *c;
  ASSERT_TRUE(at.seek(37).ok());
  EXPECT_EQ(bytes, detail::encode_loader_state(at.state()));
}

TEST(LoaderState, APositionPastTheEndIsTheEnd) {
  const FileLayout layout = layout_of({10});
  auto c = OrderCursor::create(layout, spec_of("sequential", 1));
  ASSERT_TRUE(c.ok());
  auto s = decode_loader_state(detail::loader_state_at(layout, spec_of("sequential", 0), &*c, 999));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->order.position, 10u);
}

TEST(LoaderState, BeforeAnyEpochItIsTheStartOfEpochZero) {
  const FileLayout layout = layout_of({10});
  auto s = decode_loader_state(detail::loader_state_at(layout, spec_of("sequential", 5), nullptr, 3));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->order.spec.epoch, 0u);
  EXPECT_EQ(s->order.position, 0u);
}

TEST(LoaderState, RefusesWhatIsNotALoaderState) {
  const FileLayout layout = layout_of({10});
  auto c = OrderCursor::create(layout, spec_of("sequential", 0));
  ASSERT_TRUE(c.ok());
  const std::string bare = c->state();  // an order state, not a loader's
  EXPECT_FALSE(is_loader_state(bare));
  for (const std::string& bad :
       {std::string(), std::string("dlf"), std::string("dlfL"), bare, std::string("XlfL\x01") + bare}) {
    auto s = decode_loader_state(bad);
    ASSERT_FALSE(s.ok()) << "accepted " << bad.size() << " bytes";
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_CONTAINS(s.status().message(), "not a dlfeed loader state");
  }
  auto v2 = decode_loader_state(std::string("dlfL\x02") + bare);
  ASSERT_FALSE(v2.ok());
  EXPECT_CONTAINS(v2.status().message(), "version 2, expected 1");
  // A good header over a cut order state: the order decoder's error.
  const std::string good = detail::encode_loader_state(bare);
  auto cut = decode_loader_state(good.substr(0, good.size() - 3));
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LoaderState, ResumePointOnTheSameRank) {
  const FileLayout layout = layout_of({10, 20});
  auto c = OrderCursor::create(layout, spec_of("block_shuffle", 2));
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string bytes = detail::loader_state_at(layout, spec_of("block_shuffle", 0), &*c, 11);
  auto r = detail::resume_point(bytes, layout, spec_of("block_shuffle", 0));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->epoch, 2u);
  EXPECT_EQ(r->position, 11u);
  EXPECT_EQ(r->global_start, 0u);
  // Another strategy or seed: refused, naming both.
  auto other = detail::resume_point(bytes, layout, spec_of("sequential", 0));
  ASSERT_FALSE(other.ok());
  EXPECT_CONTAINS(other.status().message(), "saved with strategy block_shuffle");
  EXPECT_CONTAINS(other.status().message(), "this loader has strategy sequential");
  // Another parameter the strategy reads: refused, naming it; one it
  // ignores: read on.
  OrderSpec blocks = spec_of("block_shuffle", 0);
  blocks.params.block_size = 5;
  auto other_block = detail::resume_point(bytes, layout, blocks);
  ASSERT_FALSE(other_block.ok());
  EXPECT_CONTAINS(other_block.status().message(), "block_size 64 window 16, but this loader has");
  EXPECT_CONTAINS(other_block.status().message(), "block_size 5 window 16");
  OrderSpec ignored = spec_of("block_shuffle", 0);
  ignored.params.buffer_size = 7;
  EXPECT_TRUE(detail::resume_point(bytes, layout, ignored).ok());
  // Another dataset layout: refused.
  EXPECT_FALSE(detail::resume_point(bytes, layout_of({10, 21}), spec_of("block_shuffle", 0)).ok());
}

TEST(LoaderState, ResumePointOnAnotherWorldSizeIsElastic) {
  const FileLayout layout = layout_of({60});
  // Rank 1 of 2 handed out 7 samples: the job consumed global positions [0, 14).
  auto c = OrderCursor::create(layout, spec_of("global_shuffle", 3, 1, 2));
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string bytes = detail::loader_state_at(layout, spec_of("global_shuffle", 0, 1, 2), &*c, 7);
  auto r = detail::resume_point(bytes, layout, spec_of("global_shuffle", 0, 2, 3));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->epoch, 3u);
  EXPECT_EQ(r->global_start, 14u);
  EXPECT_EQ(r->position, 0u);
  auto moved = detail::resume_point(bytes, layout_of({61}), spec_of("global_shuffle", 0, 2, 3));
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(moved.status().message(), "different file layout");
}

// A state taken at its epoch's end leaves nothing of that epoch on another
// world size either: with drop_last, 73 samples on 5 ranks read 70 (the
// last 3 dropped); restored on 2 ranks, G + k*W = 70 left those 3, a step
// of the finished epoch before the next one.
TEST(LoaderState, AnEpochsEndLeavesNothingOfItOnAnotherWorldSize) {
  const FileLayout layout = layout_of({73});
  OrderSpec five = spec_of("global_shuffle", 1, 0, 5);
  five.drop_last = true;
  auto c = OrderCursor::create(layout, five);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 14u);
  const std::string end = detail::loader_state_at(layout, five, &*c, 14);
  OrderSpec two = spec_of("global_shuffle", 0, 1, 2);
  two.drop_last = true;
  auto r = detail::resume_point(end, layout, two);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->epoch, 1u);
  two.epoch = r->epoch;
  two.global_start = r->global_start;
  auto rest = OrderCursor::create(layout, two);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->size(), 0u) << "global_start " << r->global_start;
  // Mid-epoch, the rest of it is read: 7 steps of 5 are positions [0, 35).
  const std::string mid = detail::loader_state_at(layout, five, &*c, 7);
  auto m = detail::resume_point(mid, layout, two);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->global_start, 35u);
}

TEST(LoaderState, ALoadersStateReadsBackThroughThePublicDecoder) {
  const std::string dir = testing::scratch_dir();
  gen::FileSpec f;
  f.path = dir + "/x.npy";
  f.sample_shape = {4};
  f.num_samples = 20;
  ASSERT_TRUE(gen::write_npy_file(f).ok());
  LoaderOptions o;
  o.paths = {f.path};
  o.batch_size = 3;
  o.order.strategy = "sequential";
  auto loader = Loader::create(o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_TRUE((*loader)->start_epoch(2).ok());
  for (int k = 0; k < 2; ++k) ASSERT_NE((*loader)->next().value(), nullptr);
  auto s = decode_loader_state((*loader)->state());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->order.spec.epoch, 2u);
  EXPECT_EQ(s->order.position, 6u) << "two batches of three handed out";
  EXPECT_EQ(s->order.spec.strategy, "sequential");
}

}  // namespace
}  // namespace dlfeed
