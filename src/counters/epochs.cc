// SPDX-License-Identifier: Apache-2.0
// Epochs and AU: an epoch's bounds and steps, its counters kept packed once
// it ends, and the reports (one per epoch, the total) that snapshot() and
// last_epoch() build from them.
#include <algorithm>

#include "internal.h"

namespace dlfeed::inline DLFEED_ABI::counters {

namespace {

bool is_distribution(size_t i) { return info(static_cast<Id>(i)).kind == Kind::kDistribution; }

void put_varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}

// Reads what put_varint wrote (only ever bytes this file packed).
uint64_t get_varint(const char*& p) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<uint8_t>(*p++);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}

}  // namespace

void Counters::begin_epoch(uint64_t epoch, uint64_t t) {
  if constexpr (!kEnabled) return;
  if (epoch_open_.load(kRelaxed)) end_epoch(t, false);
  std::lock_guard<std::mutex> lock(mu_);
  EpochState e;
  e.epoch = epoch;
  e.t0 = t;
  e.start = std::make_shared<Raw>(read_raw());
  e.start->t = t;
  epoch_io0_.store(e.start->busy[static_cast<size_t>(Component::kIo)], kRelaxed);
  epochs_.push_back(std::move(e));
  epoch_batches_.store(0, kRelaxed);
  first_step_end_.store(0, kRelaxed);
  last_boundary_ = t;
  epoch_open_.store(true, std::memory_order_release);
}

void Counters::end_epoch(uint64_t t, bool complete) {
  if constexpr (!kEnabled) return;
  if (!epoch_open_.load(kRelaxed)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (epochs_.empty() || !epochs_.back().open) return;
    EpochState& e = epochs_.back();
    Raw r = read_raw();
    r.t = t;
    e.t1 = t;
    e.complete = complete;
    const Delta d = delta_of(e, r);
    // sum and count of each id, busy time of each component, then for each
    // distribution with events: max, the number of buckets, and each bucket
    // as (distance from the previous one, events).
    std::string& p = e.packed;
    for (size_t i = 0; i < kNumIds; ++i) {
      put_varint(p, d.sum[i]);
      put_varint(p, d.count[i]);
    }
    for (uint64_t b : d.busy) put_varint(p, b);
    for (size_t i = 0; i < kNumIds; ++i) {
      if (!is_distribution(i) || d.count[i] == 0) continue;
      put_varint(p, d.max[i]);
      put_varint(p, d.hist[i].size());
      uint64_t prev = 0;
      for (const auto& [b, n] : d.hist[i]) {
        put_varint(p, b - prev);
        put_varint(p, n);
        prev = b;
      }
    }
    p.shrink_to_fit();
    e.open = false;
    e.start.reset();
    epoch_open_.store(false, std::memory_order_release);
  }
  if (tracing()) {
    std::lock_guard<std::mutex> lock(mu_);
    const EpochState& e = epochs_.back();
    trace("epoch", "loader", e.t0, t - e.t0, e.epoch, complete ? 1 : 0);
  }
}

void Counters::on_batch_delivered() {
  if constexpr (!kEnabled) return;
  epoch_batches_.store(epoch_batches_.load(kRelaxed) + 1, kRelaxed);
}

void Counters::step_boundary(uint64_t t, bool explicit_call) {
  if constexpr (!kEnabled) return;
  if (explicit_call) {
    explicit_steps_.store(true, kRelaxed);
  } else if (explicit_steps_.load(kRelaxed) || epoch_batches_.load(kRelaxed) == 0) {
    return;
  }
  const uint64_t d = t > last_boundary_ ? t - last_boundary_ : 0;
  sample(Id::kStep, d);
  ++step_no_;
  if (tracing()) trace("step", "consumer", last_boundary_, d, 0, step_no_);
  last_boundary_ = t;
  if (epoch_open_.load(std::memory_order_acquire) && first_step_end_.load(kRelaxed) == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!epochs_.empty() && epochs_.back().open) {
      EpochState& e = epochs_.back();
      uint64_t compute = 0;
      {
        std::lock_guard<std::mutex> pool_lock(pool_->mu);
        for (const auto& s : pool_->all) compute += s->sum[static_cast<size_t>(Id::kCompute)].load(kRelaxed);
      }
      const uint64_t start = e.start->sum[static_cast<size_t>(Id::kCompute)];
      e.first_step_compute = compute > start ? compute - start : 0;
      e.first_step_end = t;
    }
    first_step_end_.store(t, kRelaxed);
  }
}

Counters::Delta Counters::delta_of(const EpochState& e, const Raw& now_raw) const {
  Delta d;
  const Raw& s = *e.start;
  for (size_t i = 0; i < kNumIds; ++i) {
    d.sum[i] = now_raw.sum[i] - std::min(now_raw.sum[i], s.sum[i]);
    d.count[i] = now_raw.count[i] - std::min(now_raw.count[i], s.count[i]);
    d.max[i] = now_raw.max[i];
    if (!is_distribution(i)) continue;
    for (size_t b = 0; b < kHistBuckets; ++b) {
      const uint64_t n1 = now_raw.hist[i * kHistBuckets + b], n0 = s.hist[i * kHistBuckets + b];
      if (n1 > n0) d.hist[i].emplace_back(static_cast<uint16_t>(b), n1 - n0);
    }
  }
  for (size_t c = 0; c < kNumComponents; ++c) d.busy[c] = now_raw.busy[c] - std::min(now_raw.busy[c], s.busy[c]);
  return d;
}

EpochReport Counters::report_of(const EpochState& e, const Raw& now_raw) const {
  if (e.open) return make_report(e, delta_of(e, now_raw), now_raw.t);
  // Unpack what end_epoch packed.
  Delta d;
  const char* p = e.packed.data();
  for (size_t i = 0; i < kNumIds; ++i) {
    d.sum[i] = get_varint(p);
    d.count[i] = get_varint(p);
  }
  for (uint64_t& b : d.busy) b = get_varint(p);
  for (size_t i = 0; i < kNumIds; ++i) {
    if (!is_distribution(i) || d.count[i] == 0) continue;
    d.max[i] = get_varint(p);
    const uint64_t n = get_varint(p);
    d.hist[i].reserve(n);
    uint64_t b = 0;
    for (uint64_t k = 0; k < n; ++k) {
      b += get_varint(p);
      d.hist[i].emplace_back(static_cast<uint16_t>(b), get_varint(p));
    }
  }
  return make_report(e, d, e.t1);
}

EpochReport Counters::make_report(const EpochState& e, const Delta& d, uint64_t t_now) const {
  EpochReport r;
  r.epoch = static_cast<int64_t>(e.epoch);
  r.complete = e.complete;
  const uint64_t wall = t_now > e.t0 ? t_now - e.t0 : 0;
  r.wall_s = secs(wall);
  auto S = [&](Id id) { return d.sum[static_cast<size_t>(id)]; };
  auto B = [&](Component c) { return secs(d.busy[static_cast<size_t>(c)]); };
  r.steps = d.count[static_cast<size_t>(Id::kStep)];
  r.batches = S(Id::kBatches);
  r.samples = S(Id::kSamples);
  r.bytes_read = S(Id::kBytesRead);
  r.bytes_delivered = S(Id::kBytesDelivered);
  r.io_operations = S(Id::kIoOperations);
  r.extents = S(Id::kExtents);
  r.planned_reads = S(Id::kPlannedReads);
  r.plan_s = B(Component::kPlan);
  r.io_busy_s = B(Component::kIo);
  r.decode_s = B(Component::kDecode);
  r.collate_s = B(Component::kCollate);
  r.stall_s = B(Component::kStall);
  r.compute_s = B(Component::kCompute);
  r.io_hidden_s = secs(S(Id::kIoHidden));
  r.io_exposed_s = secs(S(Id::kIoExposed));
  r.bytes_read_staged = S(Id::kBytesReadStaged);
  r.bytes_staged = S(Id::kStageCopied);
  r.wall_min_s = r.wall_s;
  const uint64_t compute = S(Id::kCompute), stall = S(Id::kStall);
  if (e.first_step_end > e.t0 && e.first_step_end < t_now) {
    r.first_step_s = secs(e.first_step_end - e.t0);
    const uint64_t c = compute > e.first_step_compute ? compute - e.first_step_compute : 0;
    const uint64_t w = t_now - e.first_step_end;
    r.au_percent = w ? 100.0 * static_cast<double>(c) / static_cast<double>(w) : 0;
  } else {
    r.au_percent = wall ? 100.0 * static_cast<double>(compute) / static_cast<double>(wall) : 0;
  }
  r.au_percent = std::min(r.au_percent, 100.0);
  r.au_min_percent = r.au_max_percent = r.au_percent;
  r.compute_share_percent =
      compute + stall ? 100.0 * static_cast<double>(compute) / static_cast<double>(compute + stall) : 0;
  if (wall) {
    r.samples_per_s = static_cast<double>(r.samples) / r.wall_s;
    r.read_mib_per_s = static_cast<double>(r.bytes_read) / r.wall_s / 1048576.0;
    r.delivered_mib_per_s = static_cast<double>(r.bytes_delivered) / r.wall_s / 1048576.0;
  }
  for (size_t i = 0; i < kNumIds; ++i) {
    if (!is_distribution(i)) continue;
    r.dist[i] = summarize(d.hist[i], d.count[i], d.sum[i], d.max[i]);
  }
  return r;
}

std::optional<EpochReport> Counters::last_epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (epochs_.empty()) return std::nullopt;
  const EpochState& e = epochs_.back();
  return e.open ? report_of(e, read_raw()) : report_of(e, *baseline_);  // a closed epoch reads no counters
}

Snapshot Counters::snapshot() const {
  Snapshot s;
  std::lock_guard<std::mutex> lock(mu_);
  Raw r = read_raw();
  s.uptime_s = secs(r.t);
  Raw d = r;
  d.subtract(*baseline_);
  s.counters.resize(kNumIds);
  for (size_t i = 0; i < kNumIds; ++i) {
    CounterValue& v = s.counters[i];
    v.id = static_cast<Id>(i);
    const CounterInfo& ci = info(static_cast<Id>(i));
    v.name = ci.name;
    v.unit = ci.unit;
    v.kind = ci.kind;
    v.value = d.sum[i];
    v.count = d.count[i];
    if (v.kind == Kind::kDistribution)
      v.dist = summarize_dense(&d.hist[i * kHistBuckets], d.count[i], d.sum[i], r.max[i]);
  }
  s.epochs.reserve(epochs_.size());
  for (const EpochState& e : epochs_) s.epochs.push_back(report_of(e, r));
  // The total over the epochs.
  EpochReport& t = s.total;
  t.epoch = -1;
  t.complete = !s.epochs.empty();
  double au_num = 0, au_den = 0;
  for (const EpochReport& e : s.epochs) {
    t.complete = t.complete && e.complete;
    t.wall_s += e.wall_s;
    t.steps += e.steps;
    t.batches += e.batches;
    t.samples += e.samples;
    t.bytes_read += e.bytes_read;
    t.bytes_delivered += e.bytes_delivered;
    t.io_operations += e.io_operations;
    t.planned_reads += e.planned_reads;
    t.extents += e.extents;
    t.bytes_read_staged += e.bytes_read_staged;
    t.bytes_staged += e.bytes_staged;
    t.plan_s += e.plan_s;
    t.io_busy_s += e.io_busy_s;
    t.decode_s += e.decode_s;
    t.collate_s += e.collate_s;
    t.stall_s += e.stall_s;
    t.compute_s += e.compute_s;
    t.io_hidden_s += e.io_hidden_s;
    t.io_exposed_s += e.io_exposed_s;
    t.first_step_s += e.first_step_s;
    const double den = e.wall_s - e.first_step_s;
    au_num += e.au_percent / 100.0 * den;
    au_den += den;
  }
  t.au_percent = au_den > 0 ? 100.0 * au_num / au_den : 0;
  t.au_min_percent = t.au_max_percent = t.au_percent;
  t.wall_min_s = t.wall_s;
  t.compute_share_percent = t.compute_s + t.stall_s > 0 ? 100.0 * t.compute_s / (t.compute_s + t.stall_s) : 0;
  if (t.wall_s > 0) {
    t.samples_per_s = static_cast<double>(t.samples) / t.wall_s;
    t.read_mib_per_s = static_cast<double>(t.bytes_read) / t.wall_s / 1048576.0;
    t.delivered_mib_per_s = static_cast<double>(t.bytes_delivered) / t.wall_s / 1048576.0;
  }
  for (size_t i = 0; i < kNumIds; ++i) t.dist[i] = s.counters[i].dist;
  s.trace.enabled = tracing();
  s.trace.max_events = trace_slots_ ? trace_opts_.max_events : 0;
  s.trace.recorded = std::min(trace_next_.load(kRelaxed), s.trace.max_events);
  s.trace.dropped = trace_dropped_.load(kRelaxed);
  s.trace.io_sample_every = trace_opts_.io_sample_every;
  return s;
}

}  // namespace dlfeed::counters
