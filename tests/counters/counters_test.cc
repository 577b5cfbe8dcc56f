// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/counters/counters.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

#include "dev/generate.h"
#include "dlfeed/loader.h"
#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed::counters {
namespace {

constexpr uint64_t kUs = 1000;  // ns

TEST(Histogram, BucketsAreContiguousAndTight) {
  for (size_t b = 0; b + 1 < kHistBuckets; ++b) {
    EXPECT_EQ(bucket_high(b), bucket_low(b + 1)) << b;
    EXPECT_EQ(bucket_of(bucket_low(b)), b);
    EXPECT_EQ(bucket_of(bucket_high(b) - 1), b);
    if (b >= 8) {
      EXPECT_LE(double(bucket_high(b) - bucket_low(b)) / double(bucket_low(b)), 0.125 + 1e-12);
    }
  }
  EXPECT_EQ(bucket_of(UINT64_MAX), kHistBuckets - 1);
}

TEST(Histogram, PercentilesOfAKnownDistribution) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c;
  for (uint64_t v = 1; v <= 10000; ++v) c.sample(Id::kDecode, v * kUs);
  const Snapshot s = c.snapshot();
  const Distribution& d = s[Id::kDecode].dist;
  EXPECT_EQ(d.count, 10000u);
  EXPECT_EQ(d.max, 10000 * kUs);
  EXPECT_NEAR(d.mean, 5000.5 * kUs, 1);
  EXPECT_NEAR(d.p50, 5000.0 * kUs, 0.07 * 5000 * kUs);
  EXPECT_NEAR(d.p95, 9500.0 * kUs, 0.07 * 9500 * kUs);
  EXPECT_NEAR(d.p99, 9900.0 * kUs, 0.07 * 9900 * kUs);
  EXPECT_LE(d.p99, double(d.max));
}

TEST(Union, MergesOverlappingIntervals) {
  detail::Union u;
  u.begin(0);
  u.begin(5);
  u.end(10);
  u.end(15);  // [0, 15]
  u.begin(20);
  EXPECT_EQ(u.busy_until(25), 20u);  // open: counts up to the reading time
  u.end(30);
  EXPECT_EQ(u.busy_until(100), 25u);
}

TEST(Union, APeriodBegunAtAnEarlierTimeCountsNoTimeTwice) {
  // A thread read its clock at 100, was preempted while another thread was
  // busy over [105, 110], then began; it ends at 115. The union is [100, 115]:
  // at most 15, never the 5 + 15 of both periods.
  detail::Union u;
  u.begin(105);
  u.end(110);
  u.begin(100);
  u.end(115);
  EXPECT_LE(u.busy_until(200), 15u);
  EXPECT_GE(u.busy_until(200), 10u);
}

TEST(Union, MergedAcrossThreads) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c;
  // Four threads, each busy for the whole window [t0, t1] in pieces: the
  // union is the window, not four times it.
  const uint64_t t0 = c.now();
  std::vector<std::thread> ts;
  for (int k = 0; k < 4; ++k) {
    ts.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        const uint64_t a = c.now();
        c.interval_begin(Component::kDecode, a);
        c.interval_end(Component::kDecode, c.now());
      }
    });
  }
  for (auto& t : ts) t.join();
  const uint64_t t1 = c.now();
  const uint64_t busy = c.busy_until(Component::kDecode, t1);
  EXPECT_LE(busy, t1 - t0);
  EXPECT_GT(busy, 0u);
}

// A scripted run with explicit times, recorded the way the loader records:
// the consumer stalls in next(), then computes; every next() after the
// first batch ends a step.
struct Script {
  Counters& c;
  uint64_t t = 0;
  void stall(uint64_t d) {
    c.step_boundary(t);
    c.interval_begin(Component::kStall, t);
    c.interval_end(Component::kStall, t + d);
    c.sample(Id::kStall, d);
    t += d;
  }
  void batch() {
    c.add(Id::kBatches, 1);
    c.add(Id::kSamples, 4);
    c.on_batch_delivered();
  }
  void compute(uint64_t d) {
    const uint64_t io0 = c.region_begin(Region::kCompute, t);
    c.region_end(Region::kCompute, t, t + d, io0);
    t += d;
  }
};

TEST(Au, MatchesAHandComputationOnAScriptedRun) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c;
  Script s{c, 1000 * kUs};
  const uint64_t start = s.t;
  c.begin_epoch(0, start);
  // Reads in flight [start+50us, start+250us]: partly during the first compute.
  c.interval_begin(Component::kIo, start + 50 * kUs);
  s.stall(100 * kUs);  // step 1: stall 100, compute 200
  s.batch();
  {  // compute [100, 300]; the reads end at 250, during it
    const uint64_t io0 = c.region_begin(Region::kCompute, s.t);
    c.interval_end(Component::kIo, start + 250 * kUs);
    c.region_end(Region::kCompute, s.t, s.t + 200 * kUs, io0);
    s.t += 200 * kUs;
  }
  s.stall(10 * kUs);  // step 2: stall 10, compute 200
  s.batch();
  s.compute(200 * kUs);
  s.stall(50 * kUs);  // step 3: stall 50, compute 200
  s.batch();
  s.compute(200 * kUs);
  s.stall(10 * kUs);  // the end of the epoch
  c.end_epoch(s.t, true);

  const Snapshot snap = c.snapshot();
  ASSERT_EQ(snap.epochs.size(), 1u);
  const EpochReport& e = snap.epochs[0];
  EXPECT_TRUE(e.complete);
  EXPECT_EQ(e.steps, 3u);
  EXPECT_EQ(e.batches, 3u);
  EXPECT_EQ(e.samples, 12u);
  EXPECT_NEAR(e.wall_s, 770e-6, 1e-12);
  EXPECT_NEAR(e.first_step_s, 300e-6, 1e-12);
  // DLIO: compute after the first step / (wall - first step) = 400 / 470.
  EXPECT_NEAR(e.au_percent, 100.0 * 400 / 470, 1e-9);
  EXPECT_NEAR(e.compute_share_percent, 100.0 * 600 / (600 + 170), 1e-9);
  EXPECT_NEAR(e.compute_s, 600e-6, 1e-12);
  EXPECT_NEAR(e.stall_s, 170e-6, 1e-12);
  EXPECT_NEAR(e.io_busy_s, 200e-6, 1e-12);
  // Reads [50, 250] vs the first compute [100, 300]: 150 us hidden.
  EXPECT_NEAR(e.io_hidden_s, 150e-6, 1e-12);
  EXPECT_NEAR(e.samples_per_s, 12 / 770e-6, 1e-6);
  EXPECT_EQ(e.dist[size_t(Id::kStep)].count, 3u);
  EXPECT_EQ(snap.total.samples, 12u);
  EXPECT_NEAR(snap.total.au_percent, e.au_percent, 1e-9);
  // The total over two epochs weighs each by its wall time after the first step.
  const std::string json = snap.to_json();
  // The JSON's number reads back as the very double (85.1063829787234...).
  const size_t au_at = json.find("\"au_percent\":85.10638");
  ASSERT_NE(au_at, std::string::npos) << json;
  EXPECT_EQ(std::strtod(json.c_str() + au_at + 13, nullptr), e.au_percent) << json;
  EXPECT_NE(snap.summary_table().find("85.1"), std::string::npos) << snap.summary_table();
}

TEST(Steps, ExplicitMarksReplaceTheLoadersBoundaries) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c;
  Script s{c, 10 * kUs};
  c.begin_epoch(0, s.t);
  for (int i = 0; i < 4; ++i) {
    s.stall(10 * kUs);
    s.batch();
    s.compute(90 * kUs);
    c.step_boundary(s.t, /*explicit_call=*/true);
  }
  s.stall(1 * kUs);
  c.end_epoch(s.t, true);
  const EpochReport e = c.snapshot().epochs.at(0);
  EXPECT_EQ(e.steps, 4u);
  EXPECT_NEAR(e.first_step_s, 100e-6, 1e-12);
  EXPECT_NEAR(e.au_percent, 100.0 * 270 / 301, 1e-9);
}

TEST(Snapshot, ResetAndSnapshotFromAnotherThreadWhileRecording) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c;
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int k = 0; k < 3; ++k) {
    writers.emplace_back([&] {
      while (!stop.load()) {
        c.add(Id::kBytesRead, 10);
        c.sample(Id::kIoLatency, 1000);
      }
    });
  }
  uint64_t last = 0;
  for (int i = 0; i < 200; ++i) {
    const Snapshot s = c.snapshot();
    EXPECT_EQ(s[Id::kBytesRead].value % 10, 0u);
    EXPECT_GE(s[Id::kBytesRead].value, last);
    last = s[Id::kBytesRead].value;
  }
  c.reset();
  const uint64_t after = c.snapshot()[Id::kBytesRead].value;
  stop = true;
  for (auto& t : writers) t.join();
  EXPECT_LT(after, last + 1'000'000'000ull);
  c.reset();
  const Snapshot s = c.snapshot();
  EXPECT_EQ(s[Id::kBytesRead].value, 0u);
  EXPECT_EQ(s[Id::kIoLatency].count, 0u);
}

TEST(Trace, BoundedAndNested) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  TraceOptions to;
  to.enabled = true;
  to.max_events = 10;
  Counters c(to);
  c.trace("step", "consumer", 0, 100);
  c.trace("compute", "consumer", 10, 50);
  for (int i = 0; i < 20; ++i) c.trace("decode", "decode", 200 + i * 10, 5);
  const auto ev = c.trace_events();
  EXPECT_EQ(ev.size(), 10u);
  EXPECT_STREQ(ev[0].name, "step");
  EXPECT_STREQ(ev[1].name, "compute");
  const Snapshot s = c.snapshot();
  EXPECT_EQ(s.trace.recorded, 10u);
  EXPECT_EQ(s.trace.dropped, 12u);
  const std::string chrome = c.trace_string(TraceFormat::kChrome);
  EXPECT_EQ(chrome.rfind("{\"traceEvents\":[", 0), 0u);
  EXPECT_NE(chrome.find("\"dropped\":12"), std::string::npos);
  EXPECT_NE(chrome.find("\"ts\":0.010,\"dur\":0.050"), std::string::npos) << chrome;
  const std::string df = c.trace_string(TraceFormat::kDfTracer);
  EXPECT_EQ(df.rfind("[\n", 0), 0u);
  // [ ], dlfeed_trace, HH, PR, process_name, a thread name, ai_root, the events
  EXPECT_EQ(std::count(df.begin(), df.end(), '\n'), 2 + 4 + 1 + 1 + 10);
}

TEST(Trace, OffByDefault) {
  Counters c;
  c.trace("step", "consumer", 0, 1);
  EXPECT_TRUE(c.trace_events().empty());
  EXPECT_FALSE(c.snapshot().trace.enabled);
}

// An epoch's report is the same while it runs and once it is packed away.
TEST(Memory, AnEndedEpochReportsWhatItDidWhileOpen) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c;
  c.begin_epoch(0, 0);
  c.end_epoch(10 * kUs, true);
  c.begin_epoch(1, 20 * kUs);
  for (uint64_t v : {3ull, 900ull, 1'000ull, 77'000ull, 5'000'000ull, 5'100'000ull, 1ull << 40}) {
    c.sample(Id::kIoLatency, v);
    c.sample(Id::kDecode, v / 3);
    c.add(Id::kBytesRead, v);
  }
  c.add(Id::kSamples, 7);
  c.interval_begin(Component::kIo, 25 * kUs);
  c.interval_end(Component::kIo, 40 * kUs);
  const EpochReport open = c.last_epoch().value();
  c.end_epoch(c.now(), true);
  const Snapshot s = c.snapshot();
  ASSERT_EQ(s.epochs.size(), 2u);
  const EpochReport& closed = s.epochs[1];
  const EpochReport last = c.last_epoch().value();
  EXPECT_EQ(closed.epoch, 1);
  EXPECT_EQ(closed.samples, 7u);
  EXPECT_EQ(closed.bytes_read, open.bytes_read);
  EXPECT_EQ(closed.io_busy_s, open.io_busy_s);
  EXPECT_EQ(last.wall_s, closed.wall_s);
  for (size_t i = 0; i < kNumIds; ++i) {
    const Distribution &a = open.dist[i], &b = closed.dist[i], &l = last.dist[i];
    EXPECT_EQ(a.count, b.count) << info(Id(i)).name;
    EXPECT_EQ(a.sum, b.sum) << info(Id(i)).name;
    EXPECT_EQ(a.max, b.max) << info(Id(i)).name;
    EXPECT_EQ(a.p99, b.p99) << info(Id(i)).name;
    EXPECT_EQ(a.hist, b.hist) << info(Id(i)).name;
    EXPECT_EQ(l.hist, b.hist) << info(Id(i)).name;
  }
  EXPECT_EQ(closed.dist[size_t(Id::kIoLatency)].count, 7u);
  EXPECT_EQ(closed.dist[size_t(Id::kIoLatency)].max, 1ull << 40);
  EXPECT_EQ(s.epochs[0].dist[size_t(Id::kIoLatency)].count, 0u);
}

// The loader starts a pipeline thread per epoch: each one records, ends, and
// the next takes its slab, so the counters hold one slab, not one per epoch,
// and nothing recorded is lost.
TEST(Memory, FlatWithANewThreadEachEpoch) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c;
  auto epoch = [&](uint64_t e) {
    c.begin_epoch(e, c.now());
    std::thread([&] {
      c.add(Id::kSamples, 3);
      c.sample(Id::kDecode, 1000 + e);
    }).join();
    c.end_epoch(c.now(), true);
  };
  for (uint64_t e = 0; e < 100; ++e) epoch(e);
  const uint64_t at100 = c.memory_bytes();
  for (uint64_t e = 100; e < 1000; ++e) epoch(e);
  const uint64_t at1000 = c.memory_bytes();
  EXPECT_LT(at1000 - at100, 900u * 512) << at100 << " bytes at epoch 100, " << at1000 << " at epoch 1000";
  const Snapshot s = c.snapshot();
  EXPECT_EQ(s[Id::kSamples].value, 3000u);
  EXPECT_EQ(s[Id::kDecode].count, 1000u);
  ASSERT_EQ(s.epochs.size(), 1000u);
  for (const EpochReport& r : s.epochs) {
    ASSERT_EQ(r.samples, 3u) << r.epoch;
    ASSERT_EQ(r.dist[size_t(Id::kDecode)].count, 1u) << r.epoch;
    ASSERT_EQ(r.dist[size_t(Id::kDecode)].sum, 1000u + r.epoch) << r.epoch;
  }
  // reset() forgets the epochs: back below where epoch 100 was.
  c.reset();
  EXPECT_LT(c.memory_bytes(), at100);
}

// Threads that record at once each hold a slab; the slabs outlive neither
// the counters nor the totals, whichever of thread and counters ends first.
TEST(Memory, SlabsHandedBackWhenThreadsEndAndNotAfterTheCountersAreGone) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  {
    Counters c;
    for (int round = 0; round < 20; ++round) {
      std::vector<std::thread> ts;
      for (int k = 0; k < 4; ++k) {
        ts.emplace_back([&] {
          for (int i = 0; i < 1000; ++i) c.add(Id::kBytesRead, 1);
        });
      }
      for (auto& t : ts) t.join();
    }
    EXPECT_EQ(c.snapshot()[Id::kBytesRead].value, 80'000u);
    // Four at once at most, and this thread's none.
    EXPECT_LE(c.memory_bytes(), Counters().memory_bytes() + 4 * (kNumIds * (3 + kHistBuckets) * 8 + 64));
  }
  // A thread that outlives the counters it recorded into hands nothing back
  // (ASan would see a write to freed memory).
  std::atomic<bool> recorded{false}, gone{false};
  std::thread t;
  {
    Counters c;
    t = std::thread([&] {
      c.add(Id::kSamples, 1);
      recorded = true;
      while (!gone) std::this_thread::yield();
    });
    while (!recorded) std::this_thread::yield();
  }
  gone = true;
  t.join();
}

// The loader's counters against what the dataset holds.
TEST(LoaderCounters, BytesRequestsAndEpochs) {
  const std::string root = testing::scratch_dir();
  gen::DatasetSpec spec;
  spec.dir = root + "/h5";
  spec.format = FileFormat::kHdf5;
  spec.files = 3;
  spec.samples_per_file = 20;
  spec.sample_shape = {4, 8};
  spec.dtype = DType::parse("<f4").value();
  ASSERT_TRUE(gen::write_dataset(spec).ok());
  LoaderOptions o;
  o.paths = {spec.dir};
  o.fields = {"records"};
  o.batch_size = 5;
  o.threads = 2;
  o.trace.enabled = true;
  o.advanced.coalesce.max_gap = 0;  // read exactly the samples' bytes
  auto loader = Loader::create(o).value();
  uint64_t want_bytes = 0;
  want_bytes += loader->index().total_read_bytes();
  for (uint64_t e = 0; e < 2; ++e) {
    for (const auto& b : loader->epoch(e)) {
      ScopedTimer t(loader->counters());
      ASSERT_EQ(b->size(), 5u);
    }
  }
  const Snapshot s = loader->counters_snapshot();
  if (!kEnabled) {
    EXPECT_EQ(s[Id::kBytesRead].value, 0u);
    return;
  }
  EXPECT_EQ(s[Id::kBytesRead].value, 2 * want_bytes);
  EXPECT_EQ(s[Id::kBytesRead].value, loader->stats().bytes_read);
  EXPECT_EQ(s[Id::kExtents].value, 120u);
  EXPECT_EQ(s[Id::kPlannedReads].value, loader->stats().planned_reads);
  EXPECT_EQ(s[Id::kIoOperations].value, loader->stats().io_operations);
  EXPECT_EQ(s[Id::kSamples].value, 120u);
  EXPECT_EQ(s[Id::kBatches].value, 24u);
  EXPECT_EQ(s[Id::kDecode].count, 24u);
  EXPECT_EQ(s[Id::kCompute].count, 24u);
  EXPECT_EQ(s[Id::kOpen].count, 1u);
  ASSERT_EQ(s.epochs.size(), 2u);
  for (const EpochReport& e : s.epochs) {
    EXPECT_TRUE(e.complete);
    EXPECT_EQ(e.samples, 60u);
    EXPECT_EQ(e.steps, 12u);
    EXPECT_EQ(e.bytes_read, want_bytes);
    EXPECT_GT(e.wall_s, 0);
    EXPECT_GE(e.wall_s + 1e-9, e.stall_s);
  }
  // Trace: every X event of a thread nests in the one enclosing it.
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> per;
  std::map<std::string, int> names;
  for (const TraceEvent& ev : loader->counters().trace_events()) {
    names[ev.name]++;
    if (std::string(ev.name) != "read") per[ev.tid].push_back({ev.ts_ns, ev.ts_ns + ev.dur_ns});
  }
  EXPECT_EQ(names["epoch"], 2);
  EXPECT_EQ(names["decode"], 24);
  EXPECT_EQ(names["step"], 24);
  for (auto& [tid, v] : per) {
    std::sort(v.begin(), v.end(),
              [](auto& a, auto& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    std::vector<uint64_t> stack;
    for (auto [a, z] : v) {
      while (!stack.empty() && stack.back() <= a) stack.pop_back();
      if (!stack.empty()) {
        EXPECT_LE(z, stack.back()) << "thread " << tid;
      }
      stack.push_back(z);
    }
  }
  // Snapshot JSON names every counter.
  const std::string json = loader->counters_json();
  for (size_t i = 0; i < kNumIds; ++i) EXPECT_NE(json.find(info(Id(i)).name), std::string::npos);
}

}  // namespace
}  // namespace dlfeed::counters
