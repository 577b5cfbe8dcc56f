// SPDX-License-Identifier: Apache-2.0
#include "pipeline/tuned.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "counters/record.h"
#include "pipeline/pipeline.h"

namespace dlfeed::inline DLFEED_ABI::pipeline {

std::string TunedDepthPolicy::name() const { return absl::StrCat("depth:", depth(), ",budget:", budget_); }

bool TunedDepthPolicy::admit(const prefetch::InFlight& now, uint64_t next_bytes) const {
  if (now.batches >= depth()) return false;
  return now.batches == 0 || now.bytes + next_bytes <= budget_;
}

LiveTuner::LiveTuner(const TuneLimits& limits, detail::EngineSet* engines, TunedDepthPolicy* depth, Pipeline* decode,
                     counters::Counters* counters)
    : tuner_(limits),
      engines_(engines),
      move_engines_(limits.tune_engines && engines != nullptr),
      depth_(limits.tune_depth ? depth : nullptr),
      decode_(limits.tune_threads ? decode : nullptr),
      counters_(counters) {
  const TuneSetting s = tuner_.setting();
  if (move_engines_) engines_->set_active(s.engines);
  if (depth_ != nullptr) depth_->set_depth(s.depth);
  if (decode_ != nullptr) decode_->set_width(s.threads);
}

void LiveTuner::restart() { fresh_epoch_ = true; }

void LiveTuner::on_batch(uint64_t now_ns, uint64_t samples, uint64_t wait_ns, uint64_t ticket_bytes) {
  if (batches_ == 0) samples_ = wait_ns_ = bytes_ = span_ = 0;  // a window opens
  // An epoch's first batch counts only its wait: the time between epochs is the caller's.
  span_ += fresh_epoch_ ? wait_ns : now_ns - last_ns_;
  last_ns_ = now_ns;
  fresh_epoch_ = false;
  ++batches_;
  samples_ += samples;
  wait_ns_ += wait_ns;
  bytes_ = std::max(bytes_, ticket_bytes);
  const uint64_t span = std::max<uint64_t>(span_, 1);
  if (batches_ < kMinBatches || span < kWindowNs) return;
  TuneWindow w;
  w.rate = static_cast<double>(samples_) * 1e9 / static_cast<double>(span);
  w.consumer_wait = std::min(1.0, static_cast<double>(wait_ns_) / static_cast<double>(span));
  w.engine_busy = engines_ != nullptr ? engines_->active_busy_permille() / 1000.0 : 0;
  w.batch_bytes = bytes_;
  batches_ = 0;
  if (tuner_.observe(w)) apply(now_ns);
}

void LiveTuner::apply([[maybe_unused]] uint64_t now_ns) {
  const TuneSetting s = tuner_.setting();
  if (move_engines_) engines_->set_active(s.engines);
  if (depth_ != nullptr) depth_->set_depth(s.depth);
  if (decode_ != nullptr) decode_->set_width(s.threads);
  changes_.store(tuner_.changes(), std::memory_order_relaxed);
  DLFEED_REC({
    if (counters_ != nullptr && counters_->tracing()) {
      counters_->trace("autotune", "autotune", now_ns, 0, s.engines, s.depth, tuner_.changes());
    }
  });
}

}  // namespace dlfeed::pipeline
