// SPDX-License-Identifier: Apache-2.0
// The autotuner's logic on deterministic inputs: windows whose rate is a
// function of the setting being measured (as a loader's would be), with
// fixed noise, fed one at a time.
#include "pipeline/autotune.h"

#include <functional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace dlfeed::pipeline {
namespace {

using RateOf = std::function<double(const TuneSetting&)>;

struct Fed {
  std::vector<TuneSetting> settled;  // the setting after each window that left nothing being tried
  TuneSetting last;                  // the last settled setting (the run may end in the middle of a try)
};

// Feeds `windows` windows; each window's rate is rate_of(the setting it was measured at) times (1 + noise).
Fed feed(Autotuner& t, int windows, const RateOf& rate_of, double noise = 0, uint64_t batch_bytes = 1 << 20,
         double wait = 0.5, double busy = 0.9) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> jitter(-noise, noise);
  Fed r;
  for (int i = 0; i < windows; ++i) {
    TuneWindow w;
    w.rate = rate_of(t.setting()) * (1 + jitter(rng));
    w.consumer_wait = wait;
    w.engine_busy = busy;
    w.batch_bytes = batch_bytes;
    t.observe(w);
    if (t.settled()) r.settled.push_back(t.setting());
  }
  r.last = r.settled.empty() ? t.setting() : r.settled.back();
  return r;
}

TuneLimits engines_and_depth() {
  TuneLimits l;
  l.tune_engines = true;
  l.engines = 2;
  l.max_engines = 16;
  l.tune_depth = true;
  l.depth = 8;
  l.max_depth = 64;
  l.budget_bytes = 256ull << 20;
  l.threshold = 0.05;
  l.rest_windows = 40;
  return l;
}

TEST(Autotune, MoreEnginesHelpUpToFourThenStopItSettlesAtFour) {
  Autotuner t(engines_and_depth());
  const Fed r = feed(
      t, 200, [](const TuneSetting& s) { return 10000.0 * std::min(s.engines, 4u); }, 0.01);
  EXPECT_EQ(r.last.engines, 4u);
  EXPECT_EQ(r.last.depth, 8u);  // depth changes nothing here: every try undone
  // Once it found 4, every settled setting is 4 (the later tries of 5 are undone).
  size_t first = 0;
  while (first < r.settled.size() && r.settled[first].engines != 4) ++first;
  ASSERT_LT(first, 20u);
  for (size_t i = first; i < r.settled.size(); ++i) EXPECT_EQ(r.settled[i].engines, 4u) << i;
}

TEST(Autotune, NoiseWithinTheThresholdDoesNotMoveIt) {
  const TuneLimits l = engines_and_depth();
  Autotuner t(l);
  const Fed r = feed(
      t, 300, [](const TuneSetting&) { return 50000.0; }, 0.02);  // ±2% of a 5% threshold
  const TuneSetting start{l.engines, l.depth};
  EXPECT_EQ(r.last, start);
  for (const TuneSetting& s : r.settled) EXPECT_EQ(s, start);
  // It tries each knob again only after resting: a few tries in 300 windows, not one every window.
  EXPECT_LE(t.changes(), 3u * 2u * (300u / l.rest_windows + 1));  // up, undo and down, undo
}

// A share of `windows` windows spent at a setting other than `start`.
double share_moved(Autotuner& t, int windows, double noise, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(-noise, noise);
  const TuneSetting start = t.setting();
  int moved = 0;
  for (int i = 0; i < windows; ++i) {
    TuneWindow w;
    w.rate = 150000.0 * (1 + jitter(rng));  // no setting is faster than another
    w.consumer_wait = 0.3;
    w.engine_busy = 0.9;
    w.batch_bytes = 38ull << 20;
    moved += t.setting() == start ? 0 : 1;
    t.observe(w);
  }
  return static_cast<double>(moved) / windows;
}

TEST(Autotune, NoiseBeyondTheThresholdIsMeasuredAndNotKeptAsAGain) {
  // Windows spread by up to ±12% (a busy 16-core node's 100 ms windows) and no setting
  // faster than another. With the fixed 5% threshold alone, a step's two windows often
  // beat the two before it by chance and the step is kept; the measured spread raises
  // the margin, so the only windows spent away from the start are the tries' own.
  TuneLimits l = engines_and_depth();
  l.engines = 8;
  l.depth = 6;  // what a 256 MiB budget holds of 38 MiB batches
  double fixed = 0, measured = 0, tries_alone = 0;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    TuneLimits f = l;
    f.noise_margin = 0;  // the threshold alone
    TuneLimits never = l;
    never.threshold = 10;  // every try undone: the windows the tries themselves cost
    Autotuner a(f), b(l), c(never);
    fixed += share_moved(a, 400, 0.12, seed) / 8;
    measured += share_moved(b, 400, 0.12, seed) / 8;
    tries_alone += share_moved(c, 400, 0.12, seed) / 8;
    EXPECT_GT(b.noise(), 0.05) << seed;  // (max - min) / mean of two windows: 0.08 on average
    EXPECT_NEAR(b.margin(), 2 * b.noise(), 1e-12) << seed;
  }
  EXPECT_LT(measured, tries_alone + 0.03) << measured << " " << tries_alone;
  EXPECT_GT(fixed, 2 * measured) << fixed << " " << measured;
}

TEST(Autotune, TriesThatFindNothingComeLessOftenAndAGainStartsThemOver) {
  TuneLimits l = engines_and_depth();
  l.tune_depth = false;
  Autotuner t(l);
  // Flat: nothing to find. Each try is up, undo, down, undo (4 changes); the rests double
  // from 40 windows to 640, so 4,000 windows hold about 7 tries, not the ~80 of a fixed rest.
  feed(
      t, 4000, [](const TuneSetting&) { return 50000.0; }, 0.01);
  EXPECT_LE(t.changes(), 4u * 10u);
  EXPECT_GE(t.changes(), 4u * 5u);
  EXPECT_EQ(t.setting().engines, 2u);
  // Then the machine changes (another job left): 3 engines pay. The next try finds it
  // within the longest rest, and the tries after it come at the shortest rest again.
  const uint64_t before = t.changes();
  const Fed r = feed(
      t, 700, [](const TuneSetting& s) { return 10000.0 * std::min(s.engines, 3u); }, 0.01);
  EXPECT_EQ(r.last.engines, 3u);
  EXPECT_GE(t.changes() - before, 5u);  // found 3 (kept), tried 4 (undone), and tried again soon
}

TEST(Autotune, AGainWellBeyondTheNoiseIsStillFound) {
  Autotuner t(engines_and_depth());
  const Fed r = feed(
      t, 300, [](const TuneSetting& s) { return 10000.0 * std::min(s.engines, 4u); }, 0.12);
  EXPECT_EQ(r.last.engines, 4u);
}

TEST(Autotune, ARateThatFallsWithDepthStepsBack) {
  TuneLimits l = engines_and_depth();
  l.tune_engines = false;
  Autotuner t(l);
  std::vector<uint32_t> depths;
  for (int i = 0; i < 100; ++i) {
    TuneWindow w;
    w.rate = 100000.0 / (1 + t.setting().depth / 8.0);  // deeper is slower (fresh buffers, cache misses)
    w.consumer_wait = 0.5;
    w.batch_bytes = 1 << 20;
    t.observe(w);
    if (t.settled()) depths.push_back(t.setting().depth);
  }
  // 16 was tried and undone; lower depths pay, so it went down, to 1.
  for (uint32_t d : depths) EXPECT_LE(d, 8u);
  ASSERT_FALSE(depths.empty());
  EXPECT_EQ(depths.back(), 1u);
  EXPECT_EQ(t.setting().engines, 2u);  // not tuned: never moved
}

TEST(Autotune, DepthNeverPassesTheBudget) {
  TuneLimits l = engines_and_depth();
  l.tune_engines = false;
  l.budget_bytes = 100ull << 20;
  Autotuner t(l);
  uint64_t batch = 30ull << 20;  // 3 fit in the budget
  uint32_t settled = 0;
  for (int i = 0; i < 400; ++i) {
    if (i == 200) batch = 45ull << 20;  // batches grow: 2 fit
    TuneWindow w;
    w.rate = 1000.0 * t.setting().depth;  // always faster deeper
    w.consumer_wait = 0.5;
    w.batch_bytes = batch;
    t.observe(w);
    // Right after each window, the depth's batches fit the budget.
    EXPECT_LE(uint64_t{t.setting().depth} * batch, l.budget_bytes) << "window " << i;
    if (t.settled()) settled = t.setting().depth;
  }
  EXPECT_EQ(settled, 2u);                  // the most that fit, and the fastest
  EXPECT_EQ(t.depth_cap(1ull << 30), 1u);  // a batch over the budget: 1 (one is always admitted)
}

TEST(Autotune, NothingIsTriedWhileTheConsumerHardlyWaits) {
  Autotuner t(engines_and_depth());
  feed(
      t, 100, [](const TuneSetting& s) { return 1000.0 * s.engines; }, 0, 1 << 20, /*wait=*/0.001);
  EXPECT_EQ(t.changes(), 0u);
  EXPECT_EQ(t.setting(), (TuneSetting{2, 8}));
}

TEST(Autotune, IdleEnginesAreNotAddedTo) {
  TuneLimits l = engines_and_depth();
  l.tune_depth = false;
  Autotuner t(l);
  feed(
      t, 100, [](const TuneSetting& s) { return 1000.0 * s.engines; }, 0, 1 << 20, 0.5, /*busy=*/0.1);
  EXPECT_EQ(t.changes(), 0u);
  EXPECT_EQ(t.setting().engines, 2u);
}

TEST(Autotune, FewerEnginesAreKeptWhenTheyAreFaster) {
  TuneLimits l = engines_and_depth();
  l.max_engines = 2;  // 2 cores: 2 made, 2 active; more cannot be tried
  l.tune_depth = false;
  Autotuner t(l);
  const Fed r = feed(t, 50, [](const TuneSetting& s) { return s.engines == 1 ? 1200.0 : 1000.0; });
  EXPECT_EQ(r.last.engines, 1u);
}

TuneLimits decode_threads() {
  TuneLimits l;
  l.tune_threads = true;
  l.threads = 16;
  l.max_threads = 16;
  l.min_threads = 2;
  l.rest_windows = 40;
  return l;
}

// 16 decode threads on 16 cores beside 16 busy engines: 8 leave the engines
// the cores they need (rate 1.2x), 4 no more. It halves to 8, keeps that,
// tries 4, undoes it, and settles at 8.
TEST(Autotune, FewerDecodeThreadsAreKeptWhenTheEnginesNeedTheCores) {
  Autotuner t(decode_threads());
  EXPECT_EQ(t.setting().threads, 16u);
  const Fed r = feed(
      t, 300, [](const TuneSetting& s) { return s.threads <= 8 ? 1200.0 : 1000.0; }, 0.01);
  EXPECT_EQ(r.last.threads, 8u);
  size_t first = 0;
  while (first < r.settled.size() && r.settled[first].threads != 8) ++first;
  ASSERT_LT(first, 20u);
  for (size_t i = first; i < r.settled.size(); ++i) EXPECT_EQ(r.settled[i].threads, 8u) << i;
}

// Decode-bound (the engines idle): fewer threads cannot help, so none are cut.
TEST(Autotune, DecodeThreadsAreNotCutWhileTheEnginesAreIdle) {
  Autotuner t(decode_threads());
  feed(
      t, 300, [](const TuneSetting& s) { return 100.0 * s.threads; }, 0, 1 << 20, 0.5, /*busy=*/0.1);
  EXPECT_EQ(t.changes(), 0u);
  EXPECT_EQ(t.setting().threads, 16u);
}

// A rate that grows as threads fall takes them to the floor and no further;
// they never pass what was made; with nothing between floor and top (2 made,
// 2 cores) they are not tuned.
TEST(Autotune, DecodeThreadsStayBetweenTheFloorAndWhatWasMade) {
  Autotuner t(decode_threads());
  TuneSetting lowest = t.setting(), highest = t.setting();
  for (int i = 0; i < 400; ++i) {
    TuneWindow w;
    w.rate = 10000.0 / t.setting().threads;
    w.consumer_wait = 0.5;
    w.engine_busy = 0.9;
    w.batch_bytes = 1 << 20;
    t.observe(w);
    lowest.threads = std::min(lowest.threads, t.setting().threads);
    highest.threads = std::max(highest.threads, t.setting().threads);
  }
  EXPECT_EQ(lowest.threads, 2u);
  EXPECT_EQ(highest.threads, 16u);
  EXPECT_EQ(t.setting().threads, 2u);

  TuneLimits two = decode_threads();
  two.threads = two.max_threads = 2;
  Autotuner none(two);
  feed(none, 200, [](const TuneSetting& s) { return 10000.0 / s.threads; });
  EXPECT_EQ(none.changes(), 0u);
}

}  // namespace
}  // namespace dlfeed::pipeline
