#include "dlfeed/counters/counters.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <map>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dlfeed::counters {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

const CounterInfo kInfo[kNumIds] = {
    {"open_ns", Unit::kNanoseconds, Kind::kDistribution, "index one field's files at Loader::create"},
    {"plan_ns", Unit::kNanoseconds, Kind::kDistribution, "plan a batch: ids, extents, coalescing"},
    {"admit_wait_ns", Unit::kNanoseconds, Kind::kDistribution,
     "planner blocked by the prefetch policy or the memory budget"},
    {"io_latency_ns", Unit::kNanoseconds, Kind::kDistribution, "one read request, submitted to completion reaped"},
    {"decode_ns", Unit::kNanoseconds, Kind::kDistribution, "decode a batch: CRC, inflate, parse, copy into place"},
    {"collate_ns", Unit::kNanoseconds, Kind::kDistribution, "hand a decoded batch to the consumer"},
    {"stall_ns", Unit::kNanoseconds, Kind::kDistribution, "consumer blocked in next() waiting for a batch"},
    {"compute_ns", Unit::kNanoseconds, Kind::kDistribution, "user compute regions (ScopedTimer)"},
    {"step_ns", Unit::kNanoseconds, Kind::kDistribution, "one training step, boundary to boundary"},
    {"bytes_read", Unit::kBytes, Kind::kSum, "bytes read from files"},
    {"read_requests", Unit::kCount, Kind::kSum, "read requests completed (after coalescing)"},
    {"extents", Unit::kCount, Kind::kSum, "extents asked for (before coalescing)"},
    {"read_errors", Unit::kCount, Kind::kSum, "read requests that failed"},
    {"batches", Unit::kCount, Kind::kSum, "batches delivered to the consumer"},
    {"samples", Unit::kCount, Kind::kSum, "samples delivered to the consumer"},
    {"bytes_delivered", Unit::kBytes, Kind::kSum, "decoded bytes delivered to the consumer"},
    {"io_hidden_ns", Unit::kNanoseconds, Kind::kSum, "I/O busy while a compute region ran"},
    {"io_exposed_ns", Unit::kNanoseconds, Kind::kSum, "I/O busy while the consumer stalled"},
    {"decode_crc_ns", Unit::kNanoseconds, Kind::kDistribution, "verify a TFRecord record's CRC32C (per sample)"},
    {"decode_inflate_ns", Unit::kNanoseconds, Kind::kDistribution,
     "inflate a deflated NPZ member or HDF5 chunk (per call)"},
    {"decode_parse_ns", Unit::kNanoseconds, Kind::kDistribution,
     "parse a tf.train.Example for the sample's feature (per sample)"},
    {"bytes_read_staged", Unit::kBytes, Kind::kSum, "bytes of reads from staged copies (the rest: from the source)"},
    {"stage_copied_bytes", Unit::kBytes, Kind::kSum, "bytes copied into the staging folder"},
    {"barrier_ns", Unit::kNanoseconds, Kind::kDistribution,
     "waiting for the other ranks at the end of a step (emulated all-reduce)"},
};

const char* const kComponentNames[kNumComponents] = {"plan", "io", "decode", "collate", "stall", "compute"};

inline void bump(std::atomic<uint64_t>& a, uint64_t v) { a.store(a.load(kRelaxed) + v, kRelaxed); }

std::atomic<uint64_t> g_next_counters_id{1};
std::atomic<uint32_t> g_next_thread{1};

std::mutex& thread_names_mu() {
  static std::mutex mu;
  return mu;
}
std::map<uint32_t, std::string>& thread_names() {
  static auto* m = new std::map<uint32_t, std::string>();
  return *m;
}

constexpr uint64_t kCntBits = 12;
constexpr uint64_t kCntMask = (uint64_t{1} << kCntBits) - 1;

std::string json_escape(absl::string_view s) {
  std::string o;
  o.reserve(s.size() + 2);
  for (char ch : s) {
    switch (ch) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          o += absl::StrFormat("\\u%04x", static_cast<int>(ch));
        } else {
          o += ch;
        }
    }
  }
  return o;
}

// A double as JSON (finite; NaN/inf become 0).
std::string num(double v) {
  if (!std::isfinite(v)) return "0";
  return absl::StrFormat("%.9g", v);
}

// ns as microseconds with three decimals, exactly.
std::string us3(uint64_t ns) { return absl::StrFormat("%d.%03d", ns / 1000, ns % 1000); }

double secs(uint64_t ns) { return static_cast<double>(ns) * 1e-9; }

}  // namespace

namespace detail {

struct Slab {
  std::array<std::atomic<uint64_t>, kNumIds> sum{};
  std::array<std::atomic<uint64_t>, kNumIds> count{};
  std::array<std::atomic<uint64_t>, kNumIds> max{};
  std::array<std::array<std::atomic<uint64_t>, kHistBuckets>, kNumIds> hist{};
};

// Every slab of one Counters. A slab is written by one thread at a time: the
// thread that holds it in its cache; when that thread ends (or evicts it from
// its cache) the slab goes to `idle` with its sums, and the next thread to
// record takes it and adds to them. So the slabs are as many as the threads
// that ever recorded at once, however many threads come and go (the loader
// starts a pipeline thread per epoch).
struct SlabPool {
  std::mutex mu;
  std::vector<std::unique_ptr<Slab>> all;  // summed by read_raw
  std::vector<Slab*> idle;                 // held by no thread
};

struct TraceSlot {
  std::atomic<uint32_t> ready{0};
  uint32_t tid = 0;
  const char* name = nullptr;
  const char* cat = nullptr;
  uint64_t ts = 0, dur = 0, a0 = 0, a1 = 0, a2 = 0;
};

void Union::begin(uint64_t t) {
  uint64_t s = state_.load(kRelaxed);
  while (true) {
    const uint64_t from = std::max(t, last_end_.load(std::memory_order_acquire));
    const uint64_t ns = (s & kCntMask) == 0 ? ((from << kCntBits) | 1) : s + 1;
    if (state_.compare_exchange_weak(s, ns, std::memory_order_acq_rel, kRelaxed)) return;
  }
}

void Union::end(uint64_t t) {
  uint64_t s = state_.load(kRelaxed);
  while (true) {
    const uint64_t n = s & kCntMask;
    if (n == 0) return;  // unbalanced end: ignored
    if (n > 1) {
      if (state_.compare_exchange_weak(s, s - 1, std::memory_order_acq_rel, kRelaxed)) return;
      continue;
    }
    const uint64_t start = s >> kCntBits;
    const uint64_t d = t > start ? t - start : 0;
    // Add first, then publish "idle": a reader never sees idle without it.
    closed_.fetch_add(d, std::memory_order_acq_rel);
    uint64_t last = last_end_.load(kRelaxed);
    while (last < t && !last_end_.compare_exchange_weak(last, t, std::memory_order_acq_rel, kRelaxed)) {
    }
    if (state_.compare_exchange_strong(s, 0, std::memory_order_acq_rel, kRelaxed)) return;
    closed_.fetch_sub(d, std::memory_order_acq_rel);  // someone began meanwhile: retry
  }
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

const CounterInfo& info(Id id) { return kInfo[static_cast<size_t>(id)]; }

#if DLFEED_COUNTERS_ENABLED
namespace {
thread_local Counters* t_current = nullptr;
}  // namespace
Counters* current() { return t_current; }
CurrentScope::CurrentScope(Counters* c) : prev_(t_current) { t_current = c; }
CurrentScope::~CurrentScope() { t_current = prev_; }
StepTimer::StepTimer(Id id) : c_(t_current), id_(id) {
  if (c_) t0_ = c_->now();
}
StepTimer::~StepTimer() {
  if (c_) c_->sample(id_, c_->now() - t0_);
}
#else
Counters* current() { return nullptr; }
CurrentScope::CurrentScope(Counters*) {}
CurrentScope::~CurrentScope() {}
StepTimer::StepTimer(Id) {}
StepTimer::~StepTimer() {}
#endif
const char* component_name(Component c) { return kComponentNames[static_cast<size_t>(c)]; }
const char* unit_name(Unit u) {
  switch (u) {
    case Unit::kNanoseconds: return "ns";
    case Unit::kBytes: return "bytes";
    case Unit::kCount: return "count";
    case Unit::kPercent: return "percent";
    case Unit::kPerSecond: return "1/s";
    case Unit::kBytesPerSecond: return "bytes/s";
  }
  return "?";
}
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kSum: return "sum";
    case Kind::kDistribution: return "distribution";
    case Kind::kRate: return "rate";
  }
  return "?";
}

size_t bucket_of(uint64_t v) {
  if (v < 8) return static_cast<size_t>(v);
  const unsigned k = 63 - std::countl_zero(v);  // >= 3
  const uint64_t sub = (v >> (k - 3)) & 7;
  return (k - 2) * 8 + sub;
}
uint64_t bucket_low(size_t b) {
  if (b < 8) return b;
  const unsigned k = static_cast<unsigned>(b / 8 + 2);
  return (8 + b % 8) << (k - 3);
}
uint64_t bucket_high(size_t b) {
  if (b < 8) return b + 1;
  if (b + 1 >= kHistBuckets) return UINT64_MAX;
  return bucket_low(b + 1);
}

absl::string_view trace_format_name(TraceFormat f) { return f == TraceFormat::kChrome ? "chrome" : "dftracer"; }
bool parse_trace_format(absl::string_view s, TraceFormat* out) {
  if (s == "chrome" || s == "perfetto") {
    *out = TraceFormat::kChrome;
  } else if (s == "dftracer" || s == "pfw") {
    *out = TraceFormat::kDfTracer;
  } else {
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------

struct Counters::Raw {
  uint64_t t = 0;
  std::array<uint64_t, kNumIds> sum{}, count{}, max{};
  std::vector<uint64_t> hist = std::vector<uint64_t>(kNumIds * kHistBuckets, 0);
  std::array<uint64_t, kNumComponents> busy{};

  void subtract(const Raw& b) {
    for (size_t i = 0; i < kNumIds; ++i) {
      sum[i] -= std::min(sum[i], b.sum[i]);
      count[i] -= std::min(count[i], b.count[i]);
    }
    for (size_t i = 0; i < hist.size(); ++i) hist[i] -= std::min(hist[i], b.hist[i]);
    for (size_t i = 0; i < kNumComponents; ++i) busy[i] -= std::min(busy[i], b.busy[i]);
  }
};

// An epoch's counters: a reading less the one at the epoch's start, with
// sparse histograms. max: the largest value since creation or reset (a
// distribution's max is its top bucket's, clamped to this).
struct Counters::Delta {
  std::array<uint64_t, kNumIds> sum{}, count{}, max{};
  std::array<uint64_t, kNumComponents> busy{};
  std::array<Histogram, kNumIds> hist;
};

struct Counters::EpochState {
  uint64_t epoch = 0;
  uint64_t t0 = 0, t1 = 0;
  bool open = true, complete = false;
  std::shared_ptr<Raw> start;  // while open
  uint64_t first_step_end = 0;
  uint64_t first_step_compute = 0;
  // Once closed: its Delta as varints (end_epoch packs, report_of unpacks).
  // A full EpochReport is ~2 KiB and its histograms more; this is ~150 bytes
  // for a short epoch, a few bytes more per histogram bucket.
  std::string packed;
};

namespace {
Distribution summarize_dense(const uint64_t* hist, uint64_t count, uint64_t sum, uint64_t max_known) {
  Distribution d;
  d.count = count;
  d.sum = sum;
  if (count == 0) return d;
  d.mean = static_cast<double>(sum) / static_cast<double>(count);
  uint64_t total = 0;
  size_t top = 0;
  for (size_t b = 0; b < kHistBuckets; ++b) {
    if (hist[b]) {
      total += hist[b];
      top = b;
      d.hist.emplace_back(static_cast<uint16_t>(b), hist[b]);
    }
  }
  uint64_t mx = bucket_high(top) - 1;
  if (max_known) mx = std::min(mx, max_known);
  d.max = mx;
  if (total == 0) return d;
  auto q = [&](double p) -> double {
    const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(p * static_cast<double>(total))));
    uint64_t seen = 0;
    for (size_t b = 0; b < kHistBuckets; ++b) {
      seen += hist[b];
      if (seen >= rank) {
        if (b < 8) return static_cast<double>(b);
        const double mid = (static_cast<double>(bucket_low(b)) + static_cast<double>(bucket_high(b))) / 2;
        return std::min(mid, static_cast<double>(mx));
      }
    }
    return static_cast<double>(mx);
  };
  d.p50 = q(0.50);
  d.p95 = q(0.95);
  d.p99 = q(0.99);
  return d;
}
}  // namespace

namespace {
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

Distribution summarize(const Histogram& hist, uint64_t count, uint64_t sum, uint64_t max_known) {
  if (count == 0) return summarize_dense(nullptr, 0, sum, max_known);
  std::vector<uint64_t> dense(kHistBuckets, 0);
  for (const auto& [b, n] : hist) {
    if (b < kHistBuckets) dense[b] += n;
  }
  return summarize_dense(dense.data(), count, sum, max_known);
}

Counters::Counters(TraceOptions trace)
    : base_(std::chrono::steady_clock::now()),
      wall_base_us_(std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count()),
      id_(g_next_counters_id.fetch_add(1)),
      pool_(std::make_shared<detail::SlabPool>()),
      baseline_(std::make_unique<Raw>()),
      trace_opts_(trace) {
  if (trace_opts_.io_sample_every == 0) trace_opts_.io_sample_every = 1;
  if (trace_opts_.enabled) set_tracing(true);
}

Counters::~Counters() = default;

uint32_t Counters::thread_index() {
  thread_local uint32_t idx = g_next_thread.fetch_add(1);
  return idx;
}

void Counters::set_thread_name(const std::string& name) {
  const uint32_t t = thread_index();
  std::lock_guard<std::mutex> lock(thread_names_mu());
  thread_names()[t] = name;
}

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
      pool_->all.push_back(std::make_unique<detail::Slab>());
      s = pool_->all.back().get();
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
  bump(s.hist[i][bucket_of(v)], 1);
  if (v > s.max[i].load(kRelaxed)) s.max[i].store(v, kRelaxed);
}

uint64_t Counters::region_begin(Region r, uint64_t t0) {
  if constexpr (!kEnabled) return 0;
  if (r == Region::kBarrier) return 0;
  interval_begin(Component::kCompute, t0);
  return busy_until(Component::kIo, t0);
}

void Counters::region_end(Region r, uint64_t t0, uint64_t t1, uint64_t io0) {
  if constexpr (!kEnabled) return;
  if (t1 < t0) t1 = t0;
  if (r == Region::kBarrier) {
    sample(Id::kBarrier, t1 - t0);
    if (tracing()) trace("barrier", "consumer", t0, t1 - t0);
    return;
  }
  interval_end(Component::kCompute, t1);
  sample(Id::kCompute, t1 - t0);
  const uint64_t io1 = busy_until(Component::kIo, t1);
  add(Id::kIoHidden, std::min(io1 > io0 ? io1 - io0 : 0, t1 - t0));
  if (tracing()) trace("compute", "consumer", t0, t1 - t0);
}

#if DLFEED_COUNTERS_ENABLED
ScopedTimer::ScopedTimer(Counters& c, Region r) : c_(&c), r_(r) {
  t0_ = c.now();
  io0_ = c.region_begin(r, t0_);
}
void ScopedTimer::stop() {
  if (!running_) return;
  running_ = false;
  c_->region_end(r_, t0_, c_->now(), io0_);
}
#endif

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
      if (kInfo[i].kind == Kind::kDistribution) {
        uint64_t* h = &r.hist[i * kHistBuckets];
        for (size_t b = 0; b < kHistBuckets; ++b) h[b] += s->hist[i][b].load(kRelaxed);
      }
    }
  }
  for (size_t c = 0; c < kNumComponents; ++c) r.busy[c] = unions_[c].busy_until(r.t);
  return r;
}

void Counters::begin_epoch(uint64_t epoch, uint64_t t) {
  if constexpr (!kEnabled) return;
  if (epoch_open_.load(kRelaxed)) end_epoch(t, false);
  std::lock_guard<std::mutex> lock(mu_);
  EpochState e;
  e.epoch = epoch;
  e.t0 = t;
  e.start = std::make_shared<Raw>(read_raw());
  e.start->t = t;
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
      if (kInfo[i].kind != Kind::kDistribution || d.count[i] == 0) continue;
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
    if (kInfo[i].kind != Kind::kDistribution) continue;
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
    if (kInfo[i].kind != Kind::kDistribution || d.count[i] == 0) continue;
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
  r.read_requests = S(Id::kReadRequests);
  r.extents = S(Id::kExtents);
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
    if (kInfo[i].kind != Kind::kDistribution) continue;
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
    v.name = kInfo[i].name;
    v.unit = kInfo[i].unit;
    v.kind = kInfo[i].kind;
    v.value = d.sum[i];
    v.count = d.count[i];
    if (v.kind == Kind::kDistribution) v.dist = summarize_dense(&d.hist[i * kHistBuckets], d.count[i], d.sum[i], r.max[i]);
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
    t.read_requests += e.read_requests;
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
  for (const std::string& f : file_names_) b += sizeof(f) + f.capacity();
  std::lock_guard<std::mutex> pool_lock(pool_->mu);
  b += pool_->all.size() * sizeof(detail::Slab) + (pool_->all.capacity() + pool_->idle.capacity()) * sizeof(void*);
  return b;
}

// ---------------------------------------------------------------------------
// Traces

void Counters::set_tracing(bool on) {
  if constexpr (!kEnabled) return;
  if (on && !trace_slots_) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!trace_slots_) {
      trace_slots_.reset(new detail::TraceSlot[trace_opts_.max_events]);
    }
  }
  trace_on_.store(on, std::memory_order_release);
}

void Counters::trace(const char* name, const char* cat, uint64_t ts, uint64_t dur, uint64_t a0, uint64_t a1,
                     uint64_t a2) {
  if constexpr (!kEnabled) return;
  if (!tracing()) return;
  const uint64_t i = trace_next_.fetch_add(1, kRelaxed);
  if (i >= trace_opts_.max_events) {
    trace_dropped_.fetch_add(1, kRelaxed);
    return;
  }
  detail::TraceSlot& s = trace_slots_[i];
  s.tid = thread_index();
  s.name = name;
  s.cat = cat;
  s.ts = ts;
  s.dur = dur;
  s.a0 = a0;
  s.a1 = a1;
  s.a2 = a2;
  s.ready.store(1, std::memory_order_release);
}

void Counters::set_file_names(std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(mu_);
  file_names_ = std::move(names);
}

std::vector<TraceEvent> Counters::trace_events() const {
  std::vector<TraceEvent> out;
  if (!trace_slots_) return out;
  const uint64_t n = std::min(trace_next_.load(std::memory_order_acquire), trace_opts_.max_events);
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    const detail::TraceSlot& s = trace_slots_[i];
    if (!s.ready.load(std::memory_order_acquire)) continue;
    out.push_back({s.name, s.cat, s.tid, s.ts, s.dur, s.a0, s.a1, s.a2});
  }
  std::stable_sort(out.begin(), out.end(), [](const TraceEvent& a, const TraceEvent& b) {
    return a.ts_ns != b.ts_ns ? a.ts_ns < b.ts_ns : a.dur_ns > b.dur_ns;
  });
  return out;
}

namespace {
constexpr uint32_t kIoLaneBase = 100000;

std::string args_json(const TraceEvent& e, const std::vector<std::string>& files) {
  const absl::string_view n = e.name;
  if (n == "read") {
    std::string fname = e.a0 < files.size() ? files[e.a0] : absl::StrCat(e.a0);
    return absl::StrCat("{\"fname\":\"", json_escape(fname), "\",\"offset\":", e.a1, ",\"size\":", e.a2, "}");
  }
  if (n == "plan") return absl::StrCat("{\"epoch\":", e.a0, ",\"batch\":", e.a1, ",\"reads\":", e.a2, "}");
  if (n == "decode") return absl::StrCat("{\"epoch\":", e.a0, ",\"batch\":", e.a1, ",\"samples\":", e.a2, "}");
  if (n == "admit_wait" || n == "collate" || n == "stall")
    return absl::StrCat("{\"epoch\":", e.a0, ",\"batch\":", e.a1, "}");
  if (n == "step") return absl::StrCat("{\"step\":", e.a1, "}");
  if (n == "epoch") return absl::StrCat("{\"epoch\":", e.a0, ",\"complete\":", e.a1 ? "true" : "false", "}");
  if (n == "open") return absl::StrCat("{\"field\":", e.a0, ",\"files\":", e.a1, "}");
  if (n == "stage") {
    std::string fname = e.a0 < files.size() ? files[e.a0] : absl::StrCat(e.a0);
    return absl::StrCat("{\"fname\":\"", json_escape(fname), "\",\"size\":", e.a1, "}");
  }
  return "{}";
}
}  // namespace

std::string Counters::trace_string(TraceFormat format) const {
  std::vector<TraceEvent> ev = trace_events();
  std::vector<std::string> files;
  {
    std::lock_guard<std::mutex> lock(mu_);
    files = file_names_;
  }
  // Reads overlap on the engine thread: give each a lane (a virtual thread)
  // where it does not overlap, so every tid's events nest.
  std::vector<uint64_t> lane_end;
  for (TraceEvent& e : ev) {
    if (absl::string_view(e.name) != "read") continue;
    size_t l = 0;
    while (l < lane_end.size() && lane_end[l] > e.ts_ns) ++l;
    if (l == lane_end.size()) lane_end.push_back(0);
    lane_end[l] = e.ts_ns + e.dur_ns;
    e.tid = kIoLaneBase + static_cast<uint32_t>(l);
  }
  const int64_t pid = trace_opts_.pid >= 0 ? trace_opts_.pid : static_cast<int64_t>(::getpid());
  const uint64_t max_events = trace_slots_ ? trace_opts_.max_events : 0;
  const uint64_t recorded = std::min(trace_next_.load(kRelaxed), max_events);
  const std::string meta =
      absl::StrCat("{\"max_events\":", max_events, ",\"recorded\":", recorded, ",\"dropped\":",
                   trace_dropped_.load(kRelaxed), ",\"io_sample_every\":", trace_opts_.io_sample_every,
                   ",\"time_base_unix_us\":", wall_base_us_, ",\"producer\":\"dlfeed\"}");
  std::map<uint32_t, std::string> names;
  {
    std::lock_guard<std::mutex> lock(thread_names_mu());
    names = thread_names();
  }
  std::map<uint32_t, std::string> used;
  for (const TraceEvent& e : ev) {
    if (used.count(e.tid)) continue;
    if (e.tid >= kIoLaneBase) {
      used[e.tid] = absl::StrCat("io read lane ", e.tid - kIoLaneBase);
    } else {
      auto it = names.find(e.tid);
      used[e.tid] = it != names.end() ? it->second : absl::StrCat("thread ", e.tid);
    }
  }
  std::string out;
  out.reserve(ev.size() * 160 + 1024);
  if (format == TraceFormat::kChrome) {
    out += "{\"traceEvents\":[\n";
    bool first = true;
    auto sep = [&] {
      if (!first) out += ",\n";
      first = false;
    };
    sep();
    absl::StrAppend(&out, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":", pid,
                    ",\"tid\":0,\"args\":{\"name\":\"", json_escape(trace_opts_.process_name), "\"}}");
    for (const auto& [tid, name] : used) {
      sep();
      absl::StrAppend(&out, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
                      ",\"args\":{\"name\":\"", json_escape(name), "\"}}");
    }
    for (const TraceEvent& e : ev) {
      sep();
      absl::StrAppend(&out, "{\"name\":\"", e.name, "\",\"cat\":\"", e.cat, "\",\"ph\":\"X\",\"pid\":", pid,
                      ",\"tid\":", e.tid, ",\"ts\":", us3(e.ts_ns), ",\"dur\":", us3(e.dur_ns),
                      ",\"args\":", args_json(e, files), "}");
    }
    absl::StrAppend(&out, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"dlfeed_trace\":", meta, "}}\n");
  } else {
    // DFTracer: "[" then one event per line (ts, dur in integer microseconds
    // since 1970), then "]".
    out += "[\n";
    uint64_t id = 0;
    absl::StrAppend(&out, "{\"id\":", id++, ",\"name\":\"dlfeed_trace\",\"cat\":\"dlfeed\",\"pid\":", pid,
                    ",\"tid\":0,\"ts\":", wall_base_us_, ",\"dur\":0,\"ph\":\"M\",\"args\":", meta, "}\n");
    for (const auto& [tid, name] : used) {
      absl::StrAppend(&out, "{\"id\":", id++, ",\"name\":\"thread_name\",\"cat\":\"dlfeed\",\"pid\":", pid,
                      ",\"tid\":", tid, ",\"ts\":", wall_base_us_, ",\"dur\":0,\"ph\":\"M\",\"args\":{\"name\":\"",
                      json_escape(name), "\"}}\n");
    }
    for (const TraceEvent& e : ev) {
      const uint64_t ts = e.ts_ns / 1000, end = (e.ts_ns + e.dur_ns) / 1000;
      absl::StrAppend(&out, "{\"id\":", id++, ",\"name\":\"", e.name, "\",\"cat\":\"", e.cat, "\",\"pid\":", pid,
                      ",\"tid\":", e.tid, ",\"ts\":", static_cast<uint64_t>(wall_base_us_) + ts, ",\"dur\":", end - ts,
                      ",\"ph\":\"X\",\"args\":", args_json(e, files), "}\n");
    }
    out += "]\n";
  }
  return out;
}

absl::Status Counters::write_trace(const std::string& path, TraceFormat format) const {
  const std::string s = trace_string(format);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return absl::NotFoundError(absl::StrCat(path, ": cannot open for writing"));
  const bool ok = std::fwrite(s.data(), 1, s.size(), f) == s.size();
  if (std::fclose(f) != 0 || !ok) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Exports

namespace {

// "hist":[[low,count],...]: the non-empty buckets by their lower bound.
std::string hist_json(const Histogram& h) {
  std::string s = ",\"hist\":[";
  for (size_t i = 0; i < h.size(); ++i) absl::StrAppend(&s, i ? "," : "", "[", bucket_low(h[i].first), ",", h[i].second, "]");
  s += "]";
  return s;
}

std::string dist_json(const Distribution& d) {
  return absl::StrCat("{\"count\":", d.count, ",\"sum\":", d.sum, ",\"mean\":", num(d.mean), ",\"p50\":", num(d.p50),
                      ",\"p95\":", num(d.p95), ",\"p99\":", num(d.p99), ",\"max\":", d.max, hist_json(d.hist), "}");
}

std::string epoch_json(const EpochReport& e) {
  std::string s = absl::StrCat(
      "{\"epoch\":", e.epoch, ",\"complete\":", e.complete ? "true" : "false", ",\"wall_s\":", num(e.wall_s),
      ",\"steps\":", e.steps, ",\"batches\":", e.batches, ",\"samples\":", e.samples, ",\"bytes_read\":", e.bytes_read,
      ",\"bytes_delivered\":", e.bytes_delivered, ",\"read_requests\":", e.read_requests, ",\"extents\":", e.extents,
      ",\"coalesced_extents\":", e.extents > e.read_requests ? e.extents - e.read_requests : 0);
  absl::StrAppend(&s, ",\"plan_s\":", num(e.plan_s), ",\"io_busy_s\":", num(e.io_busy_s), ",\"decode_s\":",
                  num(e.decode_s), ",\"collate_s\":", num(e.collate_s), ",\"stall_s\":", num(e.stall_s),
                  ",\"compute_s\":", num(e.compute_s), ",\"io_hidden_s\":", num(e.io_hidden_s),
                  ",\"io_exposed_s\":", num(e.io_exposed_s), ",\"first_step_s\":", num(e.first_step_s),
                  ",\"au_percent\":", num(e.au_percent), ",\"compute_share_percent\":", num(e.compute_share_percent),
                  ",\"samples_per_s\":", num(e.samples_per_s), ",\"read_mib_per_s\":", num(e.read_mib_per_s),
                  ",\"delivered_mib_per_s\":", num(e.delivered_mib_per_s), ",\"bytes_read_staged\":",
                  e.bytes_read_staged, ",\"bytes_staged\":", e.bytes_staged, ",\"ranks\":", e.ranks,
                  ",\"wall_min_s\":", num(e.wall_min_s), ",\"au_min_percent\":", num(e.au_min_percent),
                  ",\"au_max_percent\":", num(e.au_max_percent), ",\"latency\":{");
  bool first = true;
  for (size_t i = 0; i < kNumIds; ++i) {
    if (kInfo[i].kind != Kind::kDistribution) continue;
    absl::StrAppend(&s, first ? "" : ",", "\"", kInfo[i].name, "\":", dist_json(e.dist[i]));
    first = false;
  }
  s += "}}";
  return s;
}

}  // namespace

std::string Snapshot::to_json() const {
  std::string s = absl::StrCat("{\"schema\":\"dlfeed.counters/1\",\"enabled\":", enabled ? "true" : "false",
                               ",\"uptime_s\":", num(uptime_s), ",\"counters\":{");
  for (size_t i = 0; i < counters.size(); ++i) {
    const CounterValue& c = counters[i];
    absl::StrAppend(&s, i ? "," : "", "\"", c.name, "\":{\"unit\":\"", unit_name(c.unit), "\",\"kind\":\"",
                    kind_name(c.kind), "\",\"value\":", c.value, ",\"count\":", c.count);
    if (c.kind == Kind::kDistribution) {
      absl::StrAppend(&s, ",\"mean\":", num(c.dist.mean), ",\"p50\":", num(c.dist.p50), ",\"p95\":", num(c.dist.p95),
                      ",\"p99\":", num(c.dist.p99), ",\"max\":", c.dist.max, hist_json(c.dist.hist));
    }
    s += "}";
  }
  s += "},\"epochs\":[";
  for (size_t i = 0; i < epochs.size(); ++i) absl::StrAppend(&s, i ? "," : "", epoch_json(epochs[i]));
  absl::StrAppend(&s, "],\"total\":", epoch_json(total), ",\"trace\":{\"enabled\":", trace.enabled ? "true" : "false",
                  ",\"max_events\":", trace.max_events, ",\"recorded\":", trace.recorded, ",\"dropped\":",
                  trace.dropped, ",\"io_sample_every\":", trace.io_sample_every, "},\"ranks\":", ranks,
                  ",\"per_rank\":[");
  for (size_t r = 0; r < rank_totals.size(); ++r) {
    absl::StrAppend(&s, r ? "," : "", "{\"rank\":", r, ",\"total\":", epoch_json(rank_totals[r]), "}");
  }
  s += "]}";
  return s;
}

std::string Snapshot::summary_table() const {
  std::string s;
  if (!enabled) return "counters: compiled out (DLFEED_COUNTERS=OFF)\n";
  absl::StrAppend(&s, absl::StrFormat("%-6s %8s %6s %9s %10s %9s %8s %9s %8s %9s %8s %6s\n", "epoch", "wall_s",
                                      "steps", "samples", "samples/s", "read_MB/s", "stall_s", "compute_s",
                                      "io_busy", "io_hidden", "decode_s", "AU%"));
  auto row = [&](const EpochReport& e) {
    const std::string name = e.epoch < 0 ? "total" : absl::StrCat(e.epoch, e.complete ? "" : "*");
    absl::StrAppend(&s, absl::StrFormat("%-6s %8.3f %6d %9d %10.0f %9.1f %8.3f %9.3f %8.3f %9.3f %8.3f %6.1f\n", name,
                                        e.wall_s, e.steps, e.samples, e.samples_per_s, e.read_mib_per_s, e.stall_s,
                                        e.compute_s, e.io_busy_s, e.io_hidden_s, e.decode_s, e.au_percent));
  };
  if (ranks > 1) {
    absl::StrAppend(&s, absl::StrFormat("(%d ranks: samples, rates and bytes summed; wall_s the slowest rank's; "
                                        "times and AU%% the mean over ranks)\n",
                                        ranks));
  }
  for (const EpochReport& e : epochs) row(e);
  if (!epochs.empty()) row(total);
  if (ranks > 1) {
    absl::StrAppend(&s, absl::StrFormat("AU%% over ranks: mean %.1f, min %.1f, max %.1f; wall_s min %.3f, max %.3f\n",
                                        total.au_percent, total.au_min_percent, total.au_max_percent,
                                        total.wall_min_s, total.wall_s));
    absl::StrAppend(&s, absl::StrFormat("%-6s %8s %6s %9s %10s %9s %8s %9s %8s %9s %8s %6s\n", "rank", "wall_s",
                                        "steps", "samples", "samples/s", "read_MB/s", "stall_s", "compute_s",
                                        "io_busy", "io_hidden", "decode_s", "AU%"));
    for (size_t r = 0; r < rank_totals.size(); ++r) {
      const EpochReport& e = rank_totals[r];
      absl::StrAppend(&s, absl::StrFormat("%-6d %8.3f %6d %9d %10.0f %9.1f %8.3f %9.3f %8.3f %9.3f %8.3f %6.1f\n", r,
                                          e.wall_s, e.steps, e.samples, e.samples_per_s, e.read_mib_per_s, e.stall_s,
                                          e.compute_s, e.io_busy_s, e.io_hidden_s, e.decode_s, e.au_percent));
    }
  }
  if (total.bytes_read_staged > 0 || total.bytes_staged > 0) {
    for (const EpochReport& e : epochs) {
      const uint64_t src = e.bytes_read > e.bytes_read_staged ? e.bytes_read - e.bytes_read_staged : 0;
      absl::StrAppend(&s, absl::StrFormat("staging, epoch %d: read %.1f MiB from staged copies (%.0f%%), %.1f MiB from "
                                          "the source; %.1f MiB copied to the stage\n",
                                          e.epoch, e.bytes_read_staged / 1048576.0,
                                          e.bytes_read ? 100.0 * e.bytes_read_staged / e.bytes_read : 0.0,
                                          src / 1048576.0, e.bytes_staged / 1048576.0));
    }
  }
  const auto& br = (*this)[Id::kBytesRead];
  const auto& rq = (*this)[Id::kReadRequests];
  const auto& ex = (*this)[Id::kExtents];
  absl::StrAppend(&s, absl::StrFormat("read %.1f MiB in %d requests for %d extents (%d coalesced away)%s\n",
                                      br.value / 1048576.0, rq.value, ex.value,
                                      ex.value > rq.value ? ex.value - rq.value : 0,
                                      epochs.empty() || total.complete ? "" : "; * = epoch not complete"));
  absl::StrAppend(&s, absl::StrFormat("%-14s %9s %9s %9s %9s %9s %9s %9s\n", "latency", "count", "mean_ms", "p50_ms",
                                      "p95_ms", "p99_ms", "max_ms", "total_s"));
  for (const CounterValue& c : counters) {
    if (c.kind != Kind::kDistribution || c.count == 0) continue;
    std::string name(c.name);
    if (name.size() > 3 && name.substr(name.size() - 3) == "_ns") name.resize(name.size() - 3);
    absl::StrAppend(&s, absl::StrFormat("%-14s %9d %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", name, c.count,
                                        c.dist.mean * 1e-6, c.dist.p50 * 1e-6, c.dist.p95 * 1e-6, c.dist.p99 * 1e-6,
                                        c.dist.max * 1e-6, c.value * 1e-9));
  }
  if (trace.enabled || trace.max_events) {
    absl::StrAppend(&s, absl::StrFormat("trace: %d events recorded, %d dropped (cap %d, 1 in %d reads)\n",
                                        trace.recorded, trace.dropped, trace.max_events, trace.io_sample_every));
  }
  return s;
}

}  // namespace dlfeed::counters
