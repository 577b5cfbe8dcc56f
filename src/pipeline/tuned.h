// SPDX-License-Identifier: Apache-2.0
// Private: the autotuner's live side (LoaderOptions::autotune). The
// consumer's thread measures windows of at least kMinBatches batches and
// kWindowNs, feeds them to the Autotuner (pipeline/autotune.h) and applies
// what it chooses: the I/O engines batches are spread over (EngineSet::
// set_active; all of them were made at create()), the read-ahead depth
// (a TunedDepthPolicy, read by the look-ahead at its next admission) and the
// decode threads batches go to (Pipeline::set_width). Each change is a trace
// event ("autotune": engines, depth, changes so far; threads in LoaderStats).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/plan/policy.h"
#include "pipeline/autotune.h"
#include "read/engine.h"

namespace dlfeed::inline DLFEED_ABI::pipeline {

class Pipeline;

/// "depth:N,budget:B" whose N may change while the look-ahead reads it.
class TunedDepthPolicy : public prefetch::PrefetchPolicy {
 public:
  TunedDepthPolicy(uint32_t depth, uint64_t budget) : depth_(depth), budget_(budget) {}
  std::string name() const override;
  bool admit(const prefetch::InFlight& now, uint64_t next_bytes) const override;
  void set_depth(uint32_t depth) { depth_.store(depth, std::memory_order_relaxed); }
  uint32_t depth() const { return depth_.load(std::memory_order_relaxed); }
  uint64_t budget() const { return budget_; }

 private:
  std::atomic<uint32_t> depth_;
  uint64_t budget_;
};

/// Measures windows on the consumer's thread and applies the Autotuner's choices.
class LiveTuner {
 public:
  static constexpr uint64_t kWindowNs = 100'000'000;
  static constexpr uint32_t kMinBatches = 8;

  /// `engines` (measured always; moved when limits.tune_engines), `depth`
  /// (when limits.tune_depth) and `decode` (when limits.tune_threads) outlive it.
  LiveTuner(const TuneLimits& limits, detail::EngineSet* engines, TunedDepthPolicy* depth, Pipeline* decode,
            counters::Counters* counters);
  /// An epoch starts: the time until its first batch arrives is not counted
  /// (only that batch's wait), so a window may span short epochs.
  void restart();
  /// One batch handed to the consumer at `now_ns` (Counters::now), who
  /// waited `wait_ns` for it; `ticket_bytes`: its admitted bytes.
  void on_batch(uint64_t now_ns, uint64_t samples, uint64_t wait_ns, uint64_t ticket_bytes);
  uint64_t changes() const { return changes_.load(std::memory_order_relaxed); }

 private:
  void apply(uint64_t now_ns);

  Autotuner tuner_;
  detail::EngineSet* engines_;
  bool move_engines_;
  TunedDepthPolicy* depth_;
  Pipeline* decode_;
  counters::Counters* counters_;
  uint64_t last_ns_ = 0, span_ = 0, samples_ = 0, wait_ns_ = 0, bytes_ = 0;
  bool fresh_epoch_ = true;
  uint32_t batches_ = 0;
  std::atomic<uint64_t> changes_{0};
};

}  // namespace dlfeed::pipeline
