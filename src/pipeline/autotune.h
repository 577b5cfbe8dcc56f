// SPDX-License-Identifier: Apache-2.0
// Private: the autotuner's logic, pure (no clock, no threads): fed one
// measuring window at a time (the rate delivered to the consumer, how much of
// it the consumer waited, how busy the I/O engines were, a batch's bytes), it
// moves the knobs that can change while an epoch runs, one step at a time,
// toward the best rate, and settles:
//
//   - a window right after a change is not judged (the pipeline refills);
//     the rate before a step and the rate after it are each the mean of
//     `judge_windows` windows (one window's noise is not a gain);
//   - a knob is stepped once; the step is kept while its rate beats the
//     rate before it by more than a margin, else it is undone, the other
//     direction is tried once (only if the first step gained nothing), and
//     the knob rests for `rest_windows` windows before it is tried again,
//     twice as long after each try in a row that found nothing (up to 16x);
//   - the margin is `threshold`, or more on a noisy machine: `noise_margin`
//     times the spread measured between the windows of one setting (a
//     smoothed (max - min) / mean), so that two windows' noise is not kept
//     as a gain;
//   - nothing is tried while the consumer hardly waits (the loader is not
//     what holds the rate back), nor more engines while the active ones are
//     idle, nor fewer decode threads unless the engines are busy (only then
//     may idle decode workers be taking cores the engines' copies need);
//   - the read-ahead depth never goes past what the byte budget holds of
//     batches of the size measured (it is lowered at once when batches grow).
//
// The loader's side (src/pipeline/tuned.h) measures the windows and applies
// the settings.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::pipeline {

/// One measuring window, as the loader saw it.
struct TuneWindow {
  double rate = 0;           // samples (or batches) delivered per second
  double consumer_wait = 0;  // share of the window the consumer waited for a batch, 0..1
  double engine_busy = 0;    // the active I/O engines' mean CPU share, 0..1
  uint64_t batch_bytes = 0;  // the most bytes one batch held (read buffers and outputs)
};

/// What may move, from where, and how far.
struct TuneLimits {
  bool tune_engines = false;
  uint32_t engines = 1;      // active I/O engines to start with
  uint32_t max_engines = 1;  // created at create(): the most that can be active
  bool tune_depth = false;
  uint32_t depth = 8;  // read-ahead depth (batches) to start with
  uint32_t max_depth = 64;
  bool tune_threads = false;
  uint32_t threads = 2;      // decode threads batches go to, to start with
  uint32_t max_threads = 2;  // made at create(): the most there can be
  uint32_t min_threads = 2;
  uint64_t budget_bytes = 0;  // the look-ahead's bytes may never exceed this (0: no limit)
  double threshold = 0.05;    // a step is kept when the rate gains more than this share...
  double noise_margin = 2.0;  // ...or more than this times the windows' measured spread
  uint32_t rest_windows = 40;
  uint32_t judge_windows = 2;  // windows averaged for a rate (before a step, and after it)
  double min_wait = 0.02;      // below this consumer wait, nothing is tried
  double min_busy = 0.5;       // more engines are tried only when the active ones are this busy
};

/// The knobs' values now.
struct TuneSetting {
  uint32_t engines = 1;
  uint32_t depth = 8;
  uint32_t threads = 2;
  bool operator==(const TuneSetting&) const = default;
};

/// Hill-climbs engines, then depth, then decode threads, with hysteresis (see above).
class Autotuner {
 public:
  explicit Autotuner(const TuneLimits& limits);
  /// Judges one window measured at setting(); true when it changed setting().
  bool observe(const TuneWindow& w);
  /// The window after this is not judged (an epoch starts, say).
  void skip_next() { skip_ = true; }
  TuneSetting setting() const { return now_; }
  /// Changes made so far (steps tried, kept and undone; budget cuts).
  uint64_t changes() const { return changes_; }
  /// Nothing is being tried now.
  bool settled() const { return phase_ != Phase::kTrying; }
  /// The most depth `batch_bytes` batches may have within the budget.
  uint32_t depth_cap(uint64_t batch_bytes) const;
  /// The gain a step must beat now: max(threshold, noise_margin x the spread).
  double margin() const;
  /// The smoothed spread, (max - min) / mean, of the windows of one setting.
  double noise() const { return noise_; }

 private:
  enum class Knob { kEngines = 0, kDepth = 1, kThreads = 2 };
  static constexpr size_t kKnobs = 3;
  enum class Phase { kMeasuring, kTrying };
  uint32_t& value(Knob k) { return k == Knob::kEngines ? now_.engines : k == Knob::kDepth ? now_.depth : now_.threads; }
  bool tunable(Knob k) const {
    return k == Knob::kEngines ? limits_.tune_engines : k == Knob::kDepth ? limits_.tune_depth : limits_.tune_threads;
  }
  // The knob's value one step up (dir +1) or down (-1), or its value now when it cannot move.
  uint32_t stepped(Knob k, int dir) const;
  bool start_trying(const TuneWindow& w);
  // Ends the knob's try; `judged`: its steps were measured (not cut short by the budget).
  void give_up(Knob k, bool judged);
  static constexpr uint32_t kMaxBackoff = 4;  // rests of up to rest_windows << 4

  TuneLimits limits_;
  TuneSetting now_;
  Phase phase_ = Phase::kMeasuring;
  Knob knob_ = Knob::kEngines;
  int dir_ = 1;
  bool gained_ = false;     // the knob tried now gained in its first direction
  uint32_t before_ = 0;     // its value before the step being judged
  double base_rate_ = 0;    // the rate to beat
  double sum_ = 0;          // rates of the windows averaged so far
  double lo_ = 0, hi_ = 0;  // their least and greatest
  uint32_t summed_ = 0;
  double noise_ = -1;    // the smoothed spread; -1 before the first measurement
  bool skip_ = true;     // the next window is not judged
  uint64_t window_ = 0;  // windows seen
  uint64_t changes_ = 0;
  uint64_t depth_bytes_ = 0;  // the largest batch seen
  std::array<uint64_t, kKnobs> rest_until_{};
  std::array<uint32_t, kKnobs> fails_{};  // tries in a row that found nothing, per knob
  std::size_t next_knob_ = 0;
};

}  // namespace dlfeed::pipeline
