// SPDX-License-Identifier: Apache-2.0
// Snapshots across processes: serialize/deserialize and merge_ranks (what
// dlfeed::mpi drives over MPI, tested here without it).
#include <numeric>
#include <vector>

#include "dlfeed/counters/counters.h"
#include "gtest/gtest.h"

namespace dlfeed::counters {
namespace {

constexpr uint64_t kUs = 1000;  // ns

// One rank's scripted epoch: `steps` steps of `stall` then `compute`, one
// batch of 4 samples each, `bytes` read per step, reads timed as io_latency.
void scripted_epoch(Counters& c, uint64_t& t, uint64_t epoch, int steps, uint64_t stall, uint64_t compute,
                    uint64_t bytes, uint64_t latency_base) {
  c.begin_epoch(epoch, t);
  for (int i = 0; i < steps; ++i) {
    c.step_boundary(t);
    c.interval_begin(Component::kStall, t);
    c.interval_end(Component::kStall, t + stall);
    c.sample(Id::kStall, stall);
    t += stall;
    c.add(Id::kBatches, 1);
    c.add(Id::kSamples, 4);
    c.add(Id::kBytesRead, bytes);
    c.sample(Id::kIoLatency, latency_base + static_cast<uint64_t>(i) * 37 * kUs);
    c.on_batch_delivered();
    const uint64_t io0 = c.region_begin(Region::kCompute, t);
    c.region_end(Region::kCompute, t, t + compute, io0);
    t += compute;
  }
  c.step_boundary(t);
  c.end_epoch(t, true);
}

std::vector<Snapshot> three_ranks() {
  std::vector<Snapshot> out;
  for (int r = 0; r < 3; ++r) {
    Counters c;
    uint64_t t = 1000 * kUs;
    scripted_epoch(c, t, 0, 5 + r, (10 + 40 * r) * kUs, 200 * kUs, 1000 * (r + 1), (r + 1) * 100 * kUs);
    scripted_epoch(c, t, 1, 4, 5 * kUs, (100 + 50 * r) * kUs, 500, 50 * kUs);
    out.push_back(c.snapshot());
  }
  return out;
}

void expect_same_dist(const Distribution& a, const Distribution& b, const std::string& what) {
  EXPECT_EQ(a.count, b.count) << what;
  EXPECT_EQ(a.sum, b.sum) << what;
  EXPECT_EQ(a.max, b.max) << what;
  EXPECT_DOUBLE_EQ(a.mean, b.mean) << what;
  EXPECT_DOUBLE_EQ(a.p50, b.p50) << what;
  EXPECT_DOUBLE_EQ(a.p95, b.p95) << what;
  EXPECT_DOUBLE_EQ(a.p99, b.p99) << what;
  EXPECT_EQ(a.hist, b.hist) << what;
}

TEST(MergeRanks, DistributionsEqualOneCounterFedEveryRanksEvents) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters all;
  std::vector<Snapshot> ranks;
  for (uint64_t r = 0; r < 4; ++r) {
    Counters c;
    // Ranks with different ranges, so the job's percentiles are none of theirs.
    for (uint64_t k = 1; k <= 250 * (r + 1); ++k) {
      const uint64_t v = (r * 3000 + k * (r + 1)) * kUs;
      c.sample(Id::kIoLatency, v);
      all.sample(Id::kIoLatency, v);
      c.add(Id::kBytesRead, k);
      all.add(Id::kBytesRead, k);
    }
    ranks.push_back(c.snapshot());
  }
  auto merged = merge_ranks(ranks);
  ASSERT_TRUE(merged.ok()) << merged.status();
  const Snapshot one = all.snapshot();
  EXPECT_EQ(merged->ranks, 4u);
  expect_same_dist((*merged)[Id::kIoLatency].dist, one[Id::kIoLatency].dist, "io_latency");
  EXPECT_EQ((*merged)[Id::kIoLatency].count, one[Id::kIoLatency].count);
  EXPECT_EQ((*merged)[Id::kBytesRead].value, one[Id::kBytesRead].value);
  EXPECT_EQ((*merged)[Id::kBytesRead].count, one[Id::kBytesRead].count);
  // The job's p50 lies in none of the first ranks' ranges: it is not a mean of theirs.
  EXPECT_GT((*merged)[Id::kIoLatency].dist.p50, ranks[0][Id::kIoLatency].dist.max);
}

TEST(MergeRanks, EpochFiguresAreSumsMeansAndExtremes) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  const std::vector<Snapshot> ranks = three_ranks();
  // Rank 1's epoch 0 by hand: 6 steps of stall 50 us + compute 200 us; the
  // first step (250 us) is excluded: AU = 5*200 / (6*250 - 250).
  const EpochReport& r1 = ranks[1].epochs[0];
  EXPECT_NEAR(r1.wall_s, 6 * 250e-6, 1e-12);
  EXPECT_NEAR(r1.au_percent, 100.0 * 1000 / 1250, 1e-9);

  auto merged = merge_ranks(ranks);
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(merged->epochs.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    const EpochReport& m = merged->epochs[e];
    double au = 0, au_min = 1e9, au_max = 0, wall = 0, wall_min = 1e9, stall = 0, sps = 0, mibps = 0;
    uint64_t samples = 0, bytes = 0, steps = 0, stall_events = 0;
    for (const Snapshot& s : ranks) {
      const EpochReport& r = s.epochs[e];
      au += r.au_percent / 3;
      au_min = std::min(au_min, r.au_percent);
      au_max = std::max(au_max, r.au_percent);
      wall = std::max(wall, r.wall_s);
      wall_min = std::min(wall_min, r.wall_s);
      stall += r.stall_s / 3;
      sps += r.samples_per_s;
      mibps += r.read_mib_per_s;
      samples += r.samples;
      bytes += r.bytes_read;
      steps = std::max(steps, r.steps);
      stall_events += r.dist[size_t(Id::kStall)].count;
    }
    EXPECT_EQ(m.epoch, static_cast<int64_t>(e));
    EXPECT_EQ(m.ranks, 3u);
    EXPECT_TRUE(m.complete);
    EXPECT_NEAR(m.au_percent, au, 1e-9) << e;
    EXPECT_DOUBLE_EQ(m.au_min_percent, au_min) << e;
    EXPECT_DOUBLE_EQ(m.au_max_percent, au_max) << e;
    EXPECT_LT(m.au_min_percent, m.au_max_percent) << e;  // the ranks differ, so the extremes do
    EXPECT_DOUBLE_EQ(m.wall_s, wall) << e;
    EXPECT_DOUBLE_EQ(m.wall_min_s, wall_min) << e;
    EXPECT_NEAR(m.stall_s, stall, 1e-15) << e;
    EXPECT_NEAR(m.samples_per_s, sps, 1e-6) << e;
    EXPECT_NEAR(m.read_mib_per_s, mibps, 1e-9) << e;
    EXPECT_EQ(m.samples, samples) << e;
    EXPECT_EQ(m.bytes_read, bytes) << e;
    EXPECT_EQ(m.steps, steps) << e;
    EXPECT_EQ(m.dist[size_t(Id::kStall)].count, stall_events) << e;
  }
  EXPECT_EQ(merged->epochs[0].samples, 4u * (5 + 6 + 7));
  EXPECT_EQ(merged->epochs[0].bytes_read, 1000u * 5 + 2000u * 6 + 3000u * 7);
  // The total: the ranks' totals merged by the same rules; one line per rank.
  EXPECT_EQ(merged->total.samples, merged->epochs[0].samples + merged->epochs[1].samples);
  ASSERT_EQ(merged->rank_totals.size(), 3u);
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(merged->rank_totals[r].samples, ranks[r].total.samples);
  EXPECT_NEAR(merged->total.au_percent,
              (ranks[0].total.au_percent + ranks[1].total.au_percent + ranks[2].total.au_percent) / 3, 1e-9);

  const std::string json = merged->to_json();
  EXPECT_NE(json.find("\"ranks\":3,\"per_rank\":[{\"rank\":0,"), std::string::npos) << json;
  EXPECT_NE(json.find("{\"rank\":2,\"total\":{\"epoch\":-1,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"hist\":[["), std::string::npos) << json;
  const std::string table = merged->summary_table();
  EXPECT_NE(table.find("3 ranks"), std::string::npos) << table;
  EXPECT_NE(table.find("AU% over ranks: mean"), std::string::npos) << table;
}

TEST(MergeRanks, RefusesMismatchedEpochsAndMergedInputs) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  std::vector<Snapshot> ranks = three_ranks();
  EXPECT_FALSE(merge_ranks({}).ok());
  std::vector<Snapshot> fewer = ranks;
  fewer[2].epochs.pop_back();
  auto a = merge_ranks(fewer);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("rank 2 ran 1 epochs but rank 0 ran 2"), std::string::npos) << a.status();
  std::vector<Snapshot> other = ranks;
  other[1].epochs[1].epoch = 7;
  auto b = merge_ranks(other);
  EXPECT_NE(b.status().message().find("is epoch 7 but rank 0's is epoch 1"), std::string::npos) << b.status();
  auto merged = merge_ranks(ranks);
  ASSERT_TRUE(merged.ok());
  auto c = merge_ranks({*merged, ranks[0]});
  EXPECT_NE(c.status().message().find("already a merge of 3 ranks"), std::string::npos) << c.status();
}

TEST(SnapshotBytes, RoundTripIsExact) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  const std::vector<Snapshot> ranks = three_ranks();
  auto merged = merge_ranks(ranks);
  ASSERT_TRUE(merged.ok());
  for (const Snapshot* s : std::vector<const Snapshot*>{&ranks[0], &ranks[2], &*merged}) {
    const std::string bytes = s->serialize();
    auto back = Snapshot::deserialize(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->to_json(), s->to_json());  // every exported field, histograms included
    EXPECT_EQ(back->serialize(), bytes);
    EXPECT_EQ(back->ranks, s->ranks);
    EXPECT_EQ(back->rank_totals.size(), s->rank_totals.size());
    expect_same_dist((*back)[Id::kIoLatency].dist, (*s)[Id::kIoLatency].dist, "io_latency");
  }
}

TEST(SnapshotBytes, RejectsDamage) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  const std::string bytes = three_ranks()[0].serialize();
  for (size_t cut = 0; cut < bytes.size(); cut += 7) {
    EXPECT_FALSE(Snapshot::deserialize(bytes.substr(0, cut)).ok()) << cut;
  }
  EXPECT_FALSE(Snapshot::deserialize(bytes.substr(0, bytes.size() - 1)).ok());
  auto trailing = Snapshot::deserialize(bytes + "x");
  EXPECT_NE(trailing.status().message().find("trailing bytes"), std::string::npos) << trailing.status();
  std::string magic = bytes;
  magic[0] = 'X';
  auto m = Snapshot::deserialize(magic);
  EXPECT_NE(m.status().message().find("at byte 1 of"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("expected magic 'dlfS'"), std::string::npos) << m.status();
  std::string version = bytes;
  version[4] = 9;
  EXPECT_NE(Snapshot::deserialize(version).status().message().find("version 9"), std::string::npos);
}

TEST(Barrier, RegionIsBarrierTimeNotCompute) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c;
  c.set_tracing(true);
  const uint64_t io0 = c.region_begin(Region::kBarrier, 100);
  c.region_end(Region::kBarrier, 100, 350, io0);
  const Snapshot s = c.snapshot();
  EXPECT_EQ(s[Id::kBarrier].count, 1u);
  EXPECT_EQ(s[Id::kBarrier].value, 250u);
  EXPECT_EQ(s[Id::kCompute].count, 0u);
  EXPECT_EQ(c.busy_until(Component::kCompute, 1000), 0u);
  const auto ev = c.trace_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_STREQ(ev[0].name, "barrier");
}

TEST(Trace, PidAndProcessNameFromOptions) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  TraceOptions o;
  o.enabled = true;
  o.pid = 3;
  o.process_name = "dlfeed rank 3";
  Counters c(o);
  c.trace("step", "consumer", 10, 20);
  const std::string chrome = c.trace_string(TraceFormat::kChrome);
  EXPECT_NE(
      chrome.find("\"name\":\"process_name\",\"ph\":\"M\",\"pid\":3,\"tid\":0,\"args\":{\"name\":\"dlfeed rank 3\"}"),
      std::string::npos)
      << chrome;
  EXPECT_NE(chrome.find("\"name\":\"step\",\"cat\":\"consumer\",\"ph\":\"X\",\"pid\":3,"), std::string::npos) << chrome;
  const std::string dft = c.trace_string(TraceFormat::kDfTracer);
  // DFTracer names a step as DLIO's pipeline events (trace_export_test.cc), the process as PR and process_name.
  EXPECT_NE(dft.find("\"name\":\"step\",\"cat\":\"pipeline\",\"pid\":3,"), std::string::npos) << dft;
  EXPECT_NE(dft.find("\"name\":\"process_name\",\"cat\":\"dftracer\",\"pid\":3,"), std::string::npos) << dft;
}

}  // namespace
}  // namespace dlfeed::counters
