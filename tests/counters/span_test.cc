// SPDX-License-Identifier: Apache-2.0
// counters::Span: one object records what the loader's begin/sample/trace
// blocks recorded by hand (a distribution value, a component interval, the
// I/O overlap, a trace event), and nothing twice.
#include <chrono>
#include <thread>
#include <type_traits>
#include <vector>

#include "dlfeed/counters/counters.h"
#include "gtest/gtest.h"

namespace dlfeed::counters {
namespace {

TraceOptions traced() {
  TraceOptions t;
  t.enabled = true;
  return t;
}

static_assert(!std::is_copy_constructible_v<Span> && !std::is_move_constructible_v<Span>,
              "a span records once: it is neither copied nor moved");

TEST(Span, RecordsValueIntervalAndTraceEventAtTheTimesGiven) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c(traced());
  {
    Span s(&c, kDecodeSpan, 100);
    EXPECT_TRUE(s.open());
    EXPECT_EQ(s.start(), 100u);
    s.args(3, 7, 32);
    s.end_at(350);
    EXPECT_FALSE(s.open());
  }
  const Snapshot snap = c.snapshot();
  EXPECT_EQ(snap[Id::kDecode].count, 1u);
  EXPECT_EQ(snap[Id::kDecode].value, 250u);
  EXPECT_EQ(snap[Id::kDecode].dist.max, 250u);
  EXPECT_EQ(c.busy_until(Component::kDecode, 10'000), 250u);
  EXPECT_EQ(c.busy_until(Component::kCollate, 10'000), 0u);
  const std::vector<TraceEvent> ev = c.trace_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_STREQ(ev[0].name, "decode");
  EXPECT_STREQ(ev[0].cat, "decode");
  EXPECT_EQ(ev[0].ts_ns, 100u);
  EXPECT_EQ(ev[0].dur_ns, 250u);
  EXPECT_EQ(ev[0].a0, 3u);
  EXPECT_EQ(ev[0].a1, 7u);
  EXPECT_EQ(ev[0].a2, 32u);
  EXPECT_NE(c.trace_string().find("\"args\":{\"epoch\":3,\"batch\":7,\"samples\":32}"), std::string::npos);
}

TEST(Span, BeginsAtConstructionAndEndsOnceAtEndOrDestruction) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c;
  uint64_t t0 = 0, t1 = 0;
  {
    Span s(&c, kCollateSpan);
    t0 = s.start();
    EXPECT_GE(t0, 1u);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    t1 = s.end();
    EXPECT_EQ(s.end(), 0u);  // already ended: records nothing more
  }
  const Snapshot snap = c.snapshot();
  EXPECT_EQ(snap[Id::kCollate].count, 1u);
  EXPECT_EQ(snap[Id::kCollate].value, t1 - t0);
  EXPECT_GE(t1 - t0, 2'000'000u);
  EXPECT_EQ(c.busy_until(Component::kCollate, c.now()), t1 - t0);

  {
    Span s(&c, kPlanSpan);  // ended by its destructor
  }
  EXPECT_EQ(c.snapshot()[Id::kPlan].count, 1u);
}

TEST(Span, AShortWaitIsSampledButNotTraced) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c(traced());
  Span(&c, kAdmitWaitSpan, 1000).end_at(1000 + kAdmitWaitSpan.trace_min_ns - 1);
  Span(&c, kAdmitWaitSpan, 5000).end_at(5000 + kAdmitWaitSpan.trace_min_ns);
  EXPECT_EQ(c.snapshot()[Id::kAdmitWait].count, 2u);
  const std::vector<TraceEvent> ev = c.trace_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_STREQ(ev[0].name, "admit_wait");
  EXPECT_EQ(ev[0].ts_ns, 5000u);
}

TEST(Span, CountsTheIoBusyTimeItOverlaps) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c;
  // I/O over [100, 300]; a stall over [50, 400]: 200 ns of it exposed.
  c.interval_begin(Component::kIo, 100);
  Span stall(&c, kStallSpan, 50);
  c.interval_end(Component::kIo, 300);
  stall.end_at(400);
  // I/O over [500, 650] (after 200 ns busy before); compute over [600, 800]:
  // only the 50 ns of I/O after 600 were hidden.
  c.interval_begin(Component::kIo, 500);
  Span compute(&c, kComputeSpan, 600);
  c.interval_end(Component::kIo, 650);
  compute.end_at(800);
  const Snapshot snap = c.snapshot();
  EXPECT_EQ(snap[Id::kIoExposed].value, 200u);
  EXPECT_EQ(snap[Id::kStall].value, 350u);
  EXPECT_EQ(snap[Id::kIoHidden].value, 50u);
  EXPECT_EQ(snap[Id::kCompute].value, 200u);
  EXPECT_EQ(c.busy_until(Component::kStall, 10'000), 350u);
  EXPECT_EQ(c.busy_until(Component::kCompute, 10'000), 200u);
}

TEST(Span, RegionCallsScopedTimerAndSpanRecordTheSame) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters by_region(traced()), by_span(traced());
  for (Counters* c : {&by_region, &by_span}) c->interval_begin(Component::kIo, 0);
  const uint64_t io0 = by_region.region_begin(Region::kCompute, 100);
  by_region.region_end(Region::kCompute, 100, 300, io0);
  by_region.region_begin(Region::kBarrier, 300);
  by_region.region_end(Region::kBarrier, 300, 340, 0);
  Span(&by_span, kComputeSpan, 100).end_at(300);
  Span(&by_span, kBarrierSpan, 300).end_at(340);
  const Snapshot a = by_region.snapshot(), b = by_span.snapshot();
  for (Id id : {Id::kCompute, Id::kBarrier, Id::kIoHidden}) {
    EXPECT_EQ(a[id].count, b[id].count) << info(id).name;
    EXPECT_EQ(a[id].value, b[id].value) << info(id).name;
  }
  EXPECT_EQ(a[Id::kIoHidden].value, 200u);
  EXPECT_EQ(a[Id::kBarrier].value, 40u);
  const std::vector<TraceEvent> ea = by_region.trace_events(), eb = by_span.trace_events();
  ASSERT_EQ(ea.size(), 2u);
  ASSERT_EQ(eb.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_STREQ(ea[i].name, eb[i].name);
    EXPECT_EQ(ea[i].ts_ns, eb[i].ts_ns);
    EXPECT_EQ(ea[i].dur_ns, eb[i].dur_ns);
  }

  // A barrier region is no compute: no interval, no sample of compute_ns.
  Counters c;
  { ScopedTimer t(c, Region::kBarrier); }
  const Snapshot s = c.snapshot();
  EXPECT_EQ(s[Id::kBarrier].count, 1u);
  EXPECT_EQ(s[Id::kCompute].count, 0u);
  EXPECT_EQ(c.busy_until(Component::kCompute, c.now()), 0u);
}

TEST(Span, StepTimerRecordsIntoTheCurrentCountersOnly) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c, other;
  {
    CurrentScope scope(&c);
    StepTimer t(Id::kDecodeCrc);
  }
  { StepTimer t(Id::kDecodeCrc); }  // none current
  EXPECT_EQ(c.snapshot()[Id::kDecodeCrc].count, 1u);
  EXPECT_EQ(other.snapshot()[Id::kDecodeCrc].count, 0u);
  EXPECT_EQ(current(), nullptr);
}

TEST(Span, NullCountersRecordNothing) {
  Span s(nullptr, kDecodeSpan);
  EXPECT_FALSE(s.open());
  EXPECT_EQ(s.start(), 0u);
  EXPECT_EQ(s.end(), 0u);
  s.end_at(10);
}

TEST(Span, ManyThreads) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  Counters c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c] {
      for (int i = 0; i < 1000; ++i) Span s(&c, kDecodeSpan);
    });
  }
  for (std::thread& t : threads) t.join();
  const uint64_t wall = c.now();
  EXPECT_EQ(c.snapshot()[Id::kDecode].count, 4000u);
  EXPECT_LE(c.busy_until(Component::kDecode, wall), wall);  // a union, not a sum
}

TEST(Span, CompiledOutReadsNoClockAndRecordsNothing) {
  if (kEnabled) GTEST_SKIP() << "counters compiled in";
  Counters c(traced());
  {
    Span s(&c, kDecodeSpan);
    EXPECT_FALSE(s.open());
    EXPECT_EQ(s.start(), 0u);
  }
  { ScopedTimer t(c); }
  const Snapshot snap = c.snapshot();
  EXPECT_EQ(snap[Id::kDecode].count, 0u);
  EXPECT_EQ(snap[Id::kCompute].count, 0u);
  EXPECT_TRUE(c.trace_events().empty());
}

}  // namespace
}  // namespace dlfeed::counters
