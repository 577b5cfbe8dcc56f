// SPDX-License-Identifier: Apache-2.0
#include "pipeline/autotune.h"

#include <algorithm>

namespace dlfeed::inline DLFEED_ABI::pipeline {

Autotuner::Autotuner(const TuneLimits& limits) : limits_(limits) {
  limits_.max_engines = std::max(1u, limits_.max_engines);
  limits_.max_depth = std::max(1u, limits_.max_depth);
  now_.engines = std::clamp(limits_.engines, 1u, limits_.max_engines);
  now_.depth = std::clamp(limits_.depth, 1u, limits_.max_depth);
  if (now_.engines == limits_.max_engines && now_.engines == 1) limits_.tune_engines = false;
  limits_.min_threads = std::max(1u, limits_.min_threads);
  limits_.max_threads = std::max(limits_.min_threads, limits_.max_threads);
  now_.threads = std::clamp(limits_.threads, limits_.min_threads, limits_.max_threads);
  if (limits_.min_threads == limits_.max_threads) limits_.tune_threads = false;
}

uint32_t Autotuner::depth_cap(uint64_t batch_bytes) const {
  if (limits_.budget_bytes == 0 || batch_bytes == 0) return limits_.max_depth;
  const uint64_t fits = limits_.budget_bytes / batch_bytes;
  return static_cast<uint32_t>(std::clamp<uint64_t>(fits, 1, limits_.max_depth));
}

double Autotuner::margin() const {
  return std::max(limits_.threshold, noise_ > 0 ? limits_.noise_margin * noise_ : 0.0);
}

uint32_t Autotuner::stepped(Knob k, int dir) const {
  if (k == Knob::kEngines) {
    const uint32_t e = now_.engines;
    if (dir > 0) return std::min(e + 1, limits_.max_engines);
    return e > 1 ? e - 1 : e;
  }
  if (k == Knob::kThreads) {  // halved and doubled, as the depth
    const uint32_t t = now_.threads;
    if (dir > 0) return std::min(t * 2, limits_.max_threads);
    return std::max(limits_.min_threads, t / 2);
  }
  const uint32_t d = now_.depth;
  if (dir > 0) return std::max(d, std::min(d * 2, depth_cap(depth_bytes_)));
  return std::max(1u, d / 2);
}

void Autotuner::give_up(Knob k, bool judged) {
  // A knob whose tries keep finding nothing rests longer each time (x2, up to x16):
  // a settled loader stops paying for tries. A kept step starts the rests over.
  uint32_t& fails = fails_[static_cast<size_t>(k)];
  if (gained_) {
    fails = 0;
  } else if (judged) {
    fails = std::min(fails + 1, kMaxBackoff);
  }
  rest_until_[static_cast<size_t>(k)] = window_ + (uint64_t{limits_.rest_windows} << fails);
  phase_ = Phase::kMeasuring;
}

bool Autotuner::start_trying(const TuneWindow& w) {
  if (w.consumer_wait < limits_.min_wait) return false;  // the loader keeps up: nothing to gain
  for (size_t i = 0; i < kKnobs; ++i) {
    const Knob k = static_cast<Knob>((next_knob_ + i) % kKnobs);
    if (!tunable(k) || window_ < rest_until_[static_cast<size_t>(k)]) continue;
    if (k == Knob::kEngines && w.engine_busy < limits_.min_busy) continue;  // idle engines: more won't help
    // Fewer decode threads can only help engines short of cores; a decode-bound loader needs them all.
    if (k == Knob::kThreads && now_.threads == limits_.max_threads && w.engine_busy < limits_.min_busy) continue;
    int dir = 1;
    uint32_t next = stepped(k, dir);
    if (next == value(k)) next = stepped(k, dir = -1);
    if (next == value(k)) continue;
    knob_ = k;
    dir_ = dir;
    gained_ = false;
    before_ = value(k);
    value(k) = next;
    ++changes_;
    skip_ = true;
    phase_ = Phase::kTrying;
    next_knob_ = (static_cast<size_t>(k) + 1) % kKnobs;
    return true;
  }
  return false;
}

bool Autotuner::observe(const TuneWindow& w) {
  ++window_;
  depth_bytes_ = std::max(depth_bytes_, w.batch_bytes);
  if (limits_.tune_depth && now_.depth > depth_cap(depth_bytes_)) {
    // Batches grew: the depth comes down to what the budget holds, now.
    if (phase_ == Phase::kTrying && knob_ != Knob::kDepth) value(knob_) = before_;
    if (phase_ == Phase::kTrying) give_up(knob_, /*judged=*/false);
    now_.depth = depth_cap(depth_bytes_);
    ++changes_;
    skip_ = true;
    return true;
  }
  if (skip_) {
    skip_ = false;
    sum_ = 0;
    summed_ = 0;
    return false;
  }
  sum_ += w.rate;
  lo_ = summed_ == 0 ? w.rate : std::min(lo_, w.rate);
  hi_ = summed_ == 0 ? w.rate : std::max(hi_, w.rate);
  if (++summed_ < std::max(1u, limits_.judge_windows)) return false;
  const double rate = sum_ / summed_;
  if (summed_ > 1 && rate > 0) {
    // The windows were all at one setting: how far apart they are is the machine's noise.
    const double spread = (hi_ - lo_) / rate;
    // Up quickly, down slowly: one quiet pair does not lower the margin.
    noise_ = noise_ < 0 ? spread : spread > noise_ ? 0.5 * (noise_ + spread) : 0.9 * noise_ + 0.1 * spread;
  }
  sum_ = 0;
  summed_ = 0;
  if (phase_ == Phase::kMeasuring) {
    base_rate_ = rate;
    return start_trying(w);
  }
  const Knob k = knob_;
  if (rate > base_rate_ * (1 + margin())) {
    // Better: keep it, and go on the same way while it pays.
    gained_ = true;
    base_rate_ = rate;
    const uint32_t next = stepped(k, dir_);
    if (next == value(k)) {
      give_up(k, /*judged=*/true);
      return false;
    }
    before_ = value(k);
    value(k) = next;
    ++changes_;
    skip_ = true;
    return true;
  }
  // Not better by enough: undo; the other way once if this one never paid.
  value(k) = before_;
  ++changes_;
  skip_ = true;
  if (!gained_ && dir_ > 0) {
    const uint32_t down = stepped(k, -1);
    if (down != value(k)) {
      dir_ = -1;
      value(k) = down;
      return true;
    }
  }
  give_up(k, /*judged=*/true);
  return true;
}

}  // namespace dlfeed::pipeline
