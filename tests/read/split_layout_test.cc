// SPDX-License-Identifier: Apache-2.0
// add_split_reads: where each record read around its value keeps the bytes
// before and after the value in the read buffer. Regions of records laid out
// alike overlap (a region's middle, the value's place, is never written), so
// the checks here are the ones that make that safe: no two records' written
// bytes meet, and a record's own bytes never lie in its own middle, for group
// boundaries, one-record groups and mixed layouts.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "read/split_reads.h"

namespace dlfeed::detail {
namespace {

struct Layout {
  uint64_t before, value, after;
};

// A fresh Work (not movable: it holds a mutex) with these split records, laid out.
std::unique_ptr<batch::Work> planned(const std::vector<Layout>& records, uint64_t already = 0) {
  auto work = std::make_unique<batch::Work>();
  batch::Work& w = *work;
  w.plan.buffer_bytes = already;  // the plan's plain reads come first
  for (const Layout& l : records) {
    batch::Work::SplitRead& s = w.splits.emplace_back();
    s.before = l.before;
    s.value = l.value;
    s.after = l.after;
  }
  add_split_reads(w);
  return work;
}

// Every written range [begin, end) of the read buffer: each record's bytes before and after its value.
std::vector<std::pair<uint64_t, uint64_t>> written(const batch::Work& w) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const batch::Work::SplitRead& s : w.splits) {
    out.emplace_back(s.region, s.region + s.before);
    out.emplace_back(s.region + s.before + s.value, s.region + s.before + s.value + s.after);
  }
  return out;
}

void expect_safe(const batch::Work& w, uint64_t already) {
  auto ranges = written(w);
  for (const batch::Work::SplitRead& s : w.splits) {
    EXPECT_GE(s.region, already);
    EXPECT_LE(s.region + s.before + s.value + s.after, w.plan.buffer_bytes);  // the whole region is in the buffer
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "written ranges " << i - 1 << " and " << i << " meet";
  }
}

TEST(SplitLayout, RecordsLaidOutAlikeShareTheBufferAndNeverMeet) {
  // DLIO's 147 KiB image records: 34 bytes before the value, 42 after (a stride of 128).
  const Layout image{34, 150528, 42};
  for (size_t n : {1, 2, 8, 256, 1176, 1177, 1178, 4000}) {  // 1177 = value / 128 + 1: one group
    const auto work = planned(std::vector<Layout>(n, image), 4096);
    const batch::Work& w = *work;
    expect_safe(w, 4096);
    const uint64_t whole = image.before + image.value + image.after;
    if (n == 256) {
      EXPECT_LT(w.plan.buffer_bytes - 4096, whole + 256 * 128);  // not 256 whole records: about one, and 128 B each
    }
    EXPECT_LE(w.plan.buffer_bytes - 4096, n * whole);
    EXPECT_EQ(w.plan.requested_bytes, n * (image.before + image.after));
  }
}

TEST(SplitLayout, ValuesSmallerThanTheStrideAndValuesOfOtherLengthsGetWholeRegions) {
  // A value shorter than the bytes around it: groups of one, back to back.
  auto w = planned(std::vector<Layout>(5, Layout{100, 60, 100}));
  expect_safe(*w, 0);
  EXPECT_EQ(w->plan.buffer_bytes, 5u * 260u);
  // Values of two lengths in one batch: every region whole, in order.
  w = planned({{34, 150528, 42}, {34, 150000, 42}, {34, 150528, 42}});
  expect_safe(*w, 0);
  EXPECT_EQ(w->plan.buffer_bytes, 2u * 150604u + 150076u);
}

TEST(SplitLayout, OneValueLengthWithOtherBytesAroundItStillShares) {
  // TensorFlow's image + label records: the label's varint is 1 or 2 bytes,
  // so the bytes before the value differ by one from record to record.
  const uint64_t value = 150528;
  std::vector<Layout> records;
  for (size_t i = 0; i < 256; ++i) records.push_back({27 + (i * 7919 % 3 == 0 ? 1u : 0u), value, 4});
  auto w = planned(records, 512);
  expect_safe(*w, 512);
  EXPECT_LT(w->plan.buffer_bytes - 512, 2 * (value + 32) + 256 * 64);  // not 256 whole records
  // Bytes before the value spread widely (other features of many lengths): still safe.
  records.clear();
  for (size_t i = 0; i < 600; ++i) records.push_back({10 + i * 37 % 900, 70000, 4 + i * 13 % 300});
  for (size_t n : {1, 2, 7, 100, 600}) {
    expect_safe(*planned(std::vector<Layout>(records.begin(), records.begin() + n), 64), 64);
  }
  // The fewest bytes before at a group's start and the most at its end: the
  // group is shorter by that spread.
  records.clear();
  for (size_t i = 0; i < 300; ++i) records.push_back({i % 2 ? 900u : 10u, 70000, 300});
  expect_safe(*planned(records, 0), 0);
}

TEST(SplitLayout, LargeBytesAroundTheValueMakeSmallGroups) {
  // 5 KB before and 9 KB after a 70 KB value: a stride of 14,016, groups of 5.
  const Layout l{5000, 70000, 9000};
  for (size_t n : {4, 5, 6, 11, 64}) {
    expect_safe(*planned(std::vector<Layout>(n, l), 100), 100);
  }
}

}  // namespace
}  // namespace dlfeed::detail
