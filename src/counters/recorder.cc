// SPDX-License-Identifier: Apache-2.0
// The recorder: the per-thread slabs that events are written to, the
// interval unions of the components, spans and regions, and reading every
// slab at once (read_raw). What each counter is and the histograms are in the
// header tier (dlfeed/counters/snapshot-inl.h).
#include <algorithm>
#include <new>
#include <utility>

#include "internal.h"

namespace dlfeed::inline DLFEED_ABI::counters {

namespace {

// One writer per slab: a load and a store, no read-modify-write.
inline void bump(std::atomic<uint64_t>& a, uint64_t v) { a.store(a.load(kRelaxed) + v, kRelaxed); }

std::atomic<uint64_t> g_next_counters_id{1};

constexpr uint64_t kCntBits = 12;
constexpr uint64_t kCntMask = (uint64_t{1} << kCntBits) - 1;

}  // namespace

// ---------------------------------------------------------------------------
// Interval unions

namespace detail {

void Union::begin(uint64_t t) {
  // Nor earlier than a time a span read the union at: a period begun with
  // a stamp taken before a span's thread read it idle (a read recorded once
  // done, a submit stamped before it went in) would count time that reader
  // saw idle, and a stall or compute span from it (io_exposed, io_hidden)
  // would hold more I/O than the epoch's io_busy.
  t = std::max(t, asked_.load(std::memory_order_acquire));
  uint64_t s = state_.load(std::memory_order_acquire);
  while (true) {
    // Idle: the high bits are when the last period ended; start no earlier.
    const uint64_t ns = (s & kCntMask) == 0 ? ((std::max(t, s >> kCntBits) << kCntBits) | 1) : s + 1;
    if (state_.compare_exchange_weak(s, ns, std::memory_order_acq_rel, std::memory_order_acquire)) return;
  }
}

void Union::end(uint64_t t) {
  uint64_t s = state_.load(std::memory_order_acquire);
  while (true) {
    const uint64_t n = s & kCntMask;
    if (n == 0) return;  // unbalanced end: ignored
    if (n > 1) {
      if (state_.compare_exchange_weak(s, s - 1, std::memory_order_acq_rel, std::memory_order_acquire)) return;
      continue;
    }
    const uint64_t start = s >> kCntBits;
    const uint64_t d = t > start ? t - start : 0;
    // Add first, then publish "idle": a reader never sees idle without it.
    closed_.fetch_add(d, std::memory_order_acq_rel);
    const uint64_t idle = std::max(t, start) << kCntBits;
    if (state_.compare_exchange_strong(s, idle, std::memory_order_acq_rel, std::memory_order_acquire)) return;
    closed_.fetch_sub(d, std::memory_order_acq_rel);  // someone began meanwhile: retry
  }
}

uint64_t Union::busy_seen_at(uint64_t t) {
  uint64_t asked = asked_.load(std::memory_order_relaxed);
  while (asked < t && !asked_.compare_exchange_weak(asked, t, std::memory_order_acq_rel)) {}
  return busy_until(t);
}

uint64_t Union::busy_until(uint64_t t) const {
  while (true) {
    const uint64_t s1 = state_.load(std::memory_order_acquire);
    const uint64_t c = closed_.load(std::memory_order_acquire);
    const uint64_t s2 = state_.load(std::memory_order_acquire);
    if (s1 != s2) continue;
    const uint64_t start = s1 >> kCntBits;
    return c + ((s1 & kCntMask) && t > start ? t - start : 0);
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------
// The current counters of a thread (format code's StepTimers)

#if DLFEED_COUNTERS_ENABLED
namespace {
thread_local Counters* t_current = nullptr;
}  // namespace
Counters* current() { return t_current; }
CurrentScope::CurrentScope(Counters* c) : prev_(t_current) { t_current = c; }
CurrentScope::~CurrentScope() { t_current = prev_; }
#else
Counters* current() { return nullptr; }
CurrentScope::CurrentScope(Counters*) {}
CurrentScope::~CurrentScope() {}
#endif

// ---------------------------------------------------------------------------
// Slabs

Counters::Counters(TraceOptions trace)
    : base_(std::chrono::steady_clock::now()),
      wall_base_us_(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count()),
      id_(g_next_counters_id.fetch_add(1)),
      pool_(std::make_shared<detail::SlabPool>()),
      baseline_(std::make_unique<Raw>()),
      trace_opts_(std::move(trace)) {
  if (trace_opts_.io_sample_every == 0) trace_opts_.io_sample_every = 1;
  if (trace_opts_.enabled) set_tracing(true);
}

Counters::~Counters() = default;

namespace {
// This thread's slabs, by the id of the Counters they belong to. Leaving the
// cache (the thread ends, or a ninth Counters takes the place) hands a slab
// back to its pool, unless the Counters are gone.
struct SlabCache {
  struct Entry {
    uint64_t owner = 0;
    detail::Slab* slab = nullptr;
    std::weak_ptr<detail::SlabPool> pool;
  };
  std::array<Entry, 8> entries{};
  size_t victim = 0;

  static void release(Entry& e) {
    if (e.slab) {
      if (std::shared_ptr<detail::SlabPool> p = e.pool.lock()) {
        std::lock_guard<std::mutex> lock(p->mu);
        p->idle.push_back(e.slab);
      }
    }
    e = Entry{};
  }
  ~SlabCache() {
    for (Entry& e : entries) release(e);
  }
};
thread_local SlabCache t_slabs;
}  // namespace

detail::Slab& Counters::slab() {
  SlabCache& cache = t_slabs;
  for (const SlabCache::Entry& e : cache.entries) {
    if (e.owner == id_) return *e.slab;
  }
  detail::Slab* s;
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    if (!pool_->idle.empty()) {
      s = pool_->idle.back();
      pool_->idle.pop_back();
    } else {
      try {
        auto fresh = std::make_unique<detail::Slab>();
        pool_->all.reserve(pool_->all.size() + 1);
        pool_->idle.reserve(pool_->all.size() + 1);  // release() never allocates
        pool_->all.push_back(std::move(fresh));
        s = pool_->all.back().get();
      } catch (const std::bad_alloc&) {
        return *pool_->spare;  // not cached: a later call may find memory for its own
      }
    }
  }
  SlabCache::Entry& e = cache.entries[cache.victim];
  cache.victim = (cache.victim + 1) % cache.entries.size();
  SlabCache::release(e);
  e = {id_, s, pool_};
  return *s;
}

void Counters::add(Id id, uint64_t v) {
  if constexpr (!kEnabled) return;
  detail::Slab& s = slab();
  const size_t i = static_cast<size_t>(id);
  bump(s.sum[i], v);
  bump(s.count[i], 1);
}

void Counters::sample(Id id, uint64_t v) {
  if constexpr (!kEnabled) return;
  detail::Slab& s = slab();
  const size_t i = static_cast<size_t>(id);
  bump(s.sum[i], v);
  bump(s.count[i], 1);
  bump(s.hist[i][detail::bucket_index(v)], 1);
  if (v > s.max[i].load(kRelaxed)) s.max[i].store(v, kRelaxed);
}

Counters::Raw Counters::read_raw() const {
  // mu_ held by the caller.
  Raw r;
  r.t = now();
  std::lock_guard<std::mutex> lock(pool_->mu);
  for (const auto& s : pool_->all) {
    for (size_t i = 0; i < kNumIds; ++i) {
      r.sum[i] += s->sum[i].load(kRelaxed);
      r.count[i] += s->count[i].load(kRelaxed);
      r.max[i] = std::max(r.max[i], s->max[i].load(kRelaxed));
      if (info(static_cast<Id>(i)).kind == Kind::kDistribution) {
        uint64_t* h = &r.hist[i * kHistBuckets];
        for (size_t b = 0; b < kHistBuckets; ++b) h[b] += s->hist[i][b].load(kRelaxed);
      }
    }
  }
  for (size_t c = 0; c < kNumComponents; ++c) r.busy[c] = unions_[c].busy_until(r.t);
  return r;
}

void Counters::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  *baseline_ = read_raw();
  {
    std::lock_guard<std::mutex> pool_lock(pool_->mu);
    for (const auto& s : pool_->all) {
      for (auto& m : s->max) m.store(0, kRelaxed);
    }
  }
  // Keep the open epoch (restarted now), forget the others.
  if (!epochs_.empty() && epochs_.back().open) {
    EpochState e = std::move(epochs_.back());
    e.t0 = baseline_->t;
    e.start = std::make_shared<Raw>(*baseline_);
    e.first_step_end = 0;
    e.first_step_compute = 0;
    epochs_.clear();
    epochs_.shrink_to_fit();
    epochs_.push_back(std::move(e));
  } else {
    epochs_.clear();
    epochs_.shrink_to_fit();  // what a long run kept goes back too
  }
}

uint64_t Counters::memory_bytes() const {
  const uint64_t raw = sizeof(Raw) + kNumIds * kHistBuckets * sizeof(uint64_t);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t b = raw + epochs_.capacity() * sizeof(EpochState);  // the baseline, the epochs
  for (const EpochState& e : epochs_) {
    if (e.packed.capacity() > 15) b += e.packed.capacity() + 1;  // beyond the string's inline buffer
    if (e.start) b += raw;
  }
  if (trace_slots_) b += trace_opts_.max_events * sizeof(detail::TraceSlot);
  for (const std::string& f : file_names_) b += sizeof(std::string) + f.capacity();
  std::lock_guard<std::mutex> pool_lock(pool_->mu);
  b += pool_->all.size() * sizeof(detail::Slab) + (pool_->all.capacity() + pool_->idle.capacity()) * sizeof(void*);
  return b;
}

// ---------------------------------------------------------------------------
// Spans and regions

uint64_t Counters::span_begin(const SpanKind& k, uint64_t t0) {
  if constexpr (!kEnabled) return 0;
  if (k.component != Component::kCount) interval_begin(k.component, t0);
  return k.io_overlap != Id::kCount ? unions_[static_cast<size_t>(Component::kIo)].busy_seen_at(t0) : 0;
}

void Counters::span_end(const SpanKind& k, uint64_t t0, uint64_t t1, uint64_t io0, uint64_t a0, uint64_t a1,
                        uint64_t a2) {
  if constexpr (!kEnabled) return;
  if (t1 < t0) t1 = t0;
  const uint64_t d = t1 - t0;
  if (k.component != Component::kCount) interval_end(k.component, t1);
  if (k.id != Id::kCount) sample(k.id, d);
  if (k.io_overlap != Id::kCount) {
    const uint64_t io1 = unions_[static_cast<size_t>(Component::kIo)].busy_seen_at(t1);
    io0 = std::max(io0, epoch_io0_.load(std::memory_order_relaxed));
    add(k.io_overlap, std::min(io1 > io0 ? io1 - io0 : 0, d));
  }
  if (k.name != nullptr && d >= k.trace_min_ns && tracing()) trace(k.name, k.cat, t0, d, a0, a1, a2);
}

void Span::begin(Counters* c, uint64_t t0) {
  c_ = c;
  t0_ = t0;
  io0_ = c->span_begin(kind_, t0);
}

void Span::end_at(uint64_t t1) {
  if (c_ == nullptr) return;
  Counters* c = c_;
  c_ = nullptr;
  c->span_end(kind_, t0_, t1, io0_, a0_, a1_, a2_);
}

uint64_t Counters::region_begin(Region r, uint64_t t0) {
  return span_begin(r == Region::kBarrier ? kBarrierSpan : kComputeSpan, t0);
}

void Counters::region_end(Region r, uint64_t t0, uint64_t t1, uint64_t io_busy_at_t0) {
  span_end(r == Region::kBarrier ? kBarrierSpan : kComputeSpan, t0, t1, io_busy_at_t0, 0, 0, 0);
}

}  // namespace dlfeed::counters
