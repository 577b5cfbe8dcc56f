// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/plan/plan.h"

#include <random>

#include "dlfeed/plan/policy.h"
#include "gtest/gtest.h"

namespace dlfeed::prefetch {
namespace {

TEST(PlanReads, MergesNeighboursWithinTheGapPerFileSortedByOffset) {
  const std::vector<ExtentRef> ext = {
      {1, 1000, 100}, {0, 500, 10}, {1, 0, 100}, {1, 150, 50}, {0, 0, 10}, {1, 100000, 8},
  };
  CoalesceOptions o;
  o.max_gap = 100;
  const ReadPlan p = plan_reads(ext, o);
  ASSERT_EQ(p.reads.size(), 5u);
  // file 0: [0,10) and [500,510) are 490 apart: two reads.
  EXPECT_EQ(p.reads[0].file, 0u);
  EXPECT_EQ(p.reads[0].offset, 0u);
  EXPECT_EQ(p.reads[1].offset, 500u);
  // file 1: [0,100) and [150,200) merge (gap 50); [1000,1100) alone; [100000, +8) alone.
  EXPECT_EQ(p.reads[2].file, 1u);
  EXPECT_EQ(p.reads[2].offset, 0u);
  EXPECT_EQ(p.reads[2].length, 200u);
  EXPECT_EQ(p.reads[3].offset, 1000u);
  EXPECT_EQ(p.reads[4].offset, 100000u);
  EXPECT_EQ(p.requested_bytes, 100u + 10 + 100 + 50 + 10 + 8);
  EXPECT_EQ(p.buffer_bytes, 10u + 10 + 200 + 100 + 8);
  // Each extent's view lands on its own bytes.
  EXPECT_EQ(p.pieces[3].buffer_offset, p.reads[2].buffer_offset + 150);
  EXPECT_EQ(p.pieces[3].length, 50u);
}

TEST(PlanReads, OverlappingExtentsShareBytes) {
  // The strided samples of one DLIO array overlap almost entirely.
  std::vector<ExtentRef> ext;
  for (uint64_t k = 0; k < 8; ++k) ext.push_back({0, 128 + k, 4001});
  CoalesceOptions o;
  o.max_gap = 0;
  const ReadPlan p = plan_reads(ext, o);
  ASSERT_EQ(p.reads.size(), 1u);
  EXPECT_EQ(p.reads[0].offset, 128u);
  EXPECT_EQ(p.reads[0].length, 4008u);
  for (uint64_t k = 0; k < 8; ++k) EXPECT_EQ(p.pieces[k].buffer_offset, k);
  o.enabled = false;  // one read per extent, except extents wholly inside another
  EXPECT_EQ(plan_reads(ext, o).reads.size(), 8u);
  ext.push_back({0, 130, 10});
  EXPECT_EQ(plan_reads(ext, o).reads.size(), 8u);
}

TEST(PlanReads, RespectsMaxReadAndDisabledCoalescing) {
  std::vector<ExtentRef> ext;
  for (uint64_t k = 0; k < 10; ++k) ext.push_back({2, k * 100, 100});
  CoalesceOptions o;
  o.max_read = 300;
  EXPECT_EQ(plan_reads(ext, o).reads.size(), 4u);  // 300 + 300 + 300 + 100
  o.enabled = false;
  EXPECT_EQ(plan_reads(ext, o).reads.size(), 10u);
}

TEST(PlanReads, EveryPieceMapsToItsFileBytes) {
  // Property: for random extents, reading the planned reads of a synthetic
  // "file" whose byte at offset x is x % 251 gives each piece its own bytes.
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<ExtentRef> ext;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) ext.push_back({static_cast<uint32_t>(rng() % 3), rng() % 5000, rng() % 300});
    CoalesceOptions o;
    o.max_gap = rng() % 400;
    o.max_read = 100 + rng() % 2000;
    const ReadPlan p = plan_reads(ext, o);
    std::vector<uint8_t> buf(p.buffer_bytes);
    for (const PlannedRead& r : p.reads) {
      for (uint64_t b = 0; b < r.length; ++b) buf[r.buffer_offset + b] = uint8_t((r.file * 7 + r.offset + b) % 251);
    }
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(p.pieces[i].length, ext[i].length);
      for (uint64_t b = 0; b < ext[i].length; ++b) {
        ASSERT_EQ(buf[p.pieces[i].buffer_offset + b], uint8_t((ext[i].file * 7 + ext[i].offset + b) % 251))
            << "round " << round << " extent " << i;
      }
    }
  }
}

TEST(Policy, OffDepthAndBudgetAdmitAsDocumented) {
  auto off = make_off_policy();
  EXPECT_TRUE(off->admit({0, 0, true}, 100));
  EXPECT_FALSE(off->admit({0, 0, false}, 100));  // nobody asked yet: no read-ahead
  EXPECT_FALSE(off->admit({1, 10, true}, 100));
  auto depth = parse_policy("depth:3").value();
  EXPECT_TRUE(depth->admit({2, 0}, 1));
  EXPECT_FALSE(depth->admit({3, 0}, 1));
  auto budget = parse_policy("budget:1K").value();
  EXPECT_TRUE(budget->admit({0, 0}, 5000));  // one batch always fits
  EXPECT_TRUE(budget->admit({1, 500}, 524));
  EXPECT_FALSE(budget->admit({1, 500}, 525));
  EXPECT_EQ(parse_policy("budget:2M").value()->name(), "budget:2097152");
  for (const char* bad : {"", "depth", "depth:0", "budget:", "budget:x", "sometimes", "depth:2K"}) {
    EXPECT_FALSE(parse_policy(bad).ok()) << bad;
  }
}

TEST(Policy, CombinedLimitsAdmitOnlyWhenAllDo) {
  auto both = parse_policy("depth:3,budget:1K").value();
  EXPECT_EQ(both->name(), "depth:3,budget:1024");
  EXPECT_TRUE(both->admit({2, 500}, 524));
  EXPECT_FALSE(both->admit({3, 0}, 1));      // depth says no
  EXPECT_FALSE(both->admit({1, 500}, 525));  // bytes say no
  EXPECT_TRUE(both->admit({0, 0}, 5000));    // one batch always fits the byte limit
  for (const char* bad : {"depth:3,", ",depth:3", "depth:3,off", "depth:3,sometimes", "depth:3,,budget:1K"}) {
    EXPECT_FALSE(parse_policy(bad).ok()) << bad;
  }
}

// The typed read-ahead: values and their string form round-trip; a string
// that does not parse keeps its error for Loader::create; each value means
// the policy its string form means.
TEST(Prefetch, ValuesAndTheirStringFormRoundTrip) {
  EXPECT_TRUE(Prefetch().is_auto());
  EXPECT_EQ(Prefetch().str(), "auto");
  EXPECT_EQ(Prefetch("auto"), Prefetch::automatic());
  EXPECT_EQ(Prefetch("off"), Prefetch::off());
  EXPECT_EQ(Prefetch("depth:8,budget:256M"), Prefetch::limits(8, 256u << 20));
  EXPECT_EQ(Prefetch::limits(8, 256u << 20).str(), "depth:8,budget:256M");
  EXPECT_EQ(Prefetch::limits(0, 1536).str(), "budget:1536");
  EXPECT_EQ(Prefetch::limits(3, 0).str(), "depth:3");
  EXPECT_EQ(Prefetch(std::string("budget:2G")).budget_bytes(), uint64_t{2} << 30);
  for (const Prefetch& p : {Prefetch::off(), Prefetch::limits(4, 0), Prefetch::limits(0, 3 << 20),
                            Prefetch::limits(16, 1 << 30), Prefetch::limits(7, 1000)}) {
    EXPECT_EQ(Prefetch::parse(p.str()).value(), p) << p.str();
    EXPECT_TRUE(p.status().ok());
  }
  EXPECT_EQ(Prefetch("depth:4,depth:2").depth(), 2u);  // every limit must admit: the tighter one
  EXPECT_EQ(Prefetch().policy().value(), nullptr);     // auto: the loader's own choice
  EXPECT_EQ(Prefetch("depth:3,budget:1K").policy().value()->name(), "depth:3,budget:1024");
  EXPECT_EQ(Prefetch::limits(0, 1024).policy().value()->name(), "budget:1024");
  EXPECT_EQ(Prefetch::off().policy().value()->name(), "off");
  for (const char* bad : {"", "sometimes", "depth:0", "depth:3,off", "budget:x"}) {
    const Prefetch p(bad);
    EXPECT_FALSE(p.is_auto()) << bad;
    EXPECT_EQ(p.str(), bad);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(p.policy().status(), p.status()) << bad;
    EXPECT_EQ(Prefetch::parse(bad).status(), p.status()) << bad;
  }
  EXPECT_FALSE(Prefetch::limits(0, 0).status().ok());
  EXPECT_FALSE(Prefetch::limits(2'000'000, 0).status().ok());  // the string form's bound on depth
  EXPECT_FALSE(Prefetch::parse("budget:17179869184G").ok());   // 2^64 bytes: not a budget that wraps to 0
  EXPECT_FALSE(parse_policy("budget:17179869184G").ok());
}

}  // namespace
}  // namespace dlfeed::prefetch
