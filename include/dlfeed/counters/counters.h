// SPDX-License-Identifier: Apache-2.0
// Built-in timing counters, interval accounting, accelerator utilisation
// (AU) and trace events of the loader. Always on unless built with
// -DDLFEED_COUNTERS=OFF (recording then compiles to nothing, snapshots are
// all zeros; every class keeps its layout, so either setting links safely).
//
//   auto& c = loader->counters();
//   for (auto& batch : loader->epoch(e)) {
//     dlfeed::counters::ScopedTimer t(c, dlfeed::counters::Region::kCompute);
//     train(batch);
//   }
//   dlfeed::counters::Snapshot s = c.snapshot();   // any thread, any time
//   std::puts(s.summary_table().c_str());
//   std::string json = s.to_json();                // docs/counters.md
//   c.write_trace("run.json", TraceFormat::kChrome);          // when tracing was enabled
//   c.write_trace("run.pfw.gz", TraceFormat::kDfTracer);      // gzip: DFTracer's tools read it
//
// Recording: each thread writes its own slab of relaxed atomics (one writer
// per slab: a load and a store, no read-modify-write, no lock, no allocation
// after the thread's first event); snapshot() sums the slabs. Interval unions
// (the time at least one thread was in a component) use one compare-and-swap
// per interval on a word shared by that component; they are per batch or per
// read, never per sample. Trace events (off unless enabled) go to a bounded,
// preallocated array claimed with one fetch_add per event.
//
// Memory stays flat however long the Counters live: a thread that ends hands
// its slab to the next thread that records (so there are as many slabs as
// threads ever recorded at once, not one per thread ever started), and an
// ended epoch is kept as a packed delta of its counters (a few hundred bytes,
// more only for wide histograms), not as a full EpochReport.
//
// The data types, the histograms and the merge of snapshots are in
// dlfeed/counters/snapshot.h (header tier: usable without libdlfeed).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "dlfeed/counters/snapshot.h"
#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::counters {

enum class TraceFormat { kChrome, kDfTracer };
DLFEED_EXPORT absl::string_view trace_format_name(TraceFormat f);
DLFEED_EXPORT bool parse_trace_format(absl::string_view s, TraceFormat* out);
/// The names parse_trace_format accepts, for messages ("chrome, perfetto (= chrome), ...").
DLFEED_EXPORT std::string trace_format_names();

struct DLFEED_EXPORT TraceOptions {
  bool enabled = false;
  /// Events kept; later ones are dropped (and counted). 64 bytes each,
  /// allocated when tracing is first enabled.
  uint64_t max_events = 500'000;
  /// Record one of every N read requests (the most numerous events).
  uint32_t io_sample_every = 1;
  /// The trace's process id and name (a rank: pid = rank, "dlfeed rank R",
  /// so traces of several ranks merge into one Perfetto view). -1: getpid().
  int64_t pid = -1;
  std::string process_name = "dlfeed";
};

/// A decoded trace event (times in ns since the Counters were created).
struct DLFEED_EXPORT TraceEvent {
  const char* name = "";
  const char* cat = "";
  uint32_t tid = 0;
  uint64_t ts_ns = 0, dur_ns = 0;
  uint64_t a0 = 0, a1 = 0, a2 = 0;  // meaning per name (docs/counters.md)
};

/// Where a region's time goes: kCompute counts as compute (AU, I/O hidden);
/// kBarrier is the wait for the other ranks at a step's end (barrier_ns).
enum class Region : uint8_t { kCompute, kBarrier };

class Counters;

/// What a Span records: the value of distribution `id`; the interval of
/// `component` (Component::kCount: none) while the span is open; with
/// `io_overlap` (Id::kCount: none), the I/O busy time during the span into
/// that sum; and, when tracing, an event `name` in category `cat` (nullptr:
/// none; both string literals) if the span lasted at least `trace_min_ns`.
struct DLFEED_EXPORT SpanKind {
  Id id = Id::kCount;
  Component component = Component::kCount;
  const char* name = nullptr;
  const char* cat = "";
  Id io_overlap = Id::kCount;
  uint64_t trace_min_ns = 0;
};

/// The loader's spans, named as docs/counters.md names their trace events
/// (the arguments, set with Span::args, are listed there too).
inline constexpr SpanKind kOpenSpan{.id = Id::kOpen, .name = "open", .cat = "index"};
inline constexpr SpanKind kPlanSpan{.id = Id::kPlan, .component = Component::kPlan, .name = "plan", .cat = "plan"};
inline constexpr SpanKind kAdmitWaitSpan{
    .id = Id::kAdmitWait, .name = "admit_wait", .cat = "plan", .trace_min_ns = 1000};
inline constexpr SpanKind kDecodeSpan{
    .id = Id::kDecode, .component = Component::kDecode, .name = "decode", .cat = "decode"};
inline constexpr SpanKind kCollateSpan{
    .id = Id::kCollate, .component = Component::kCollate, .name = "collate", .cat = "collate"};
inline constexpr SpanKind kStallSpan{
    .id = Id::kStall, .component = Component::kStall, .name = "stall", .cat = "consumer", .io_overlap = Id::kIoExposed};
inline constexpr SpanKind kComputeSpan{.id = Id::kCompute,
                                       .component = Component::kCompute,
                                       .name = "compute",
                                       .cat = "consumer",
                                       .io_overlap = Id::kIoHidden};
inline constexpr SpanKind kBarrierSpan{.id = Id::kBarrier, .name = "barrier", .cat = "consumer"};

/// Times one operation from construction to end() or destruction and
/// records it as `kind` says (a distribution value, a component interval, an
/// I/O overlap, a trace event):
///
///   counters::Span span(counters, counters::kDecodeSpan);
///   decode(w);
///   span.args(w.epoch, w.index, w.ids.size());  // the trace event's, any time before the end
///
/// With null counters it records nothing; with -DDLFEED_COUNTERS=OFF it
/// reads no clock and records nothing, and its layout is the same.
class DLFEED_EXPORT Span {
 public:
  /// Begins now.
  Span(Counters* c, const SpanKind& kind);
  /// Begins at t0, a Counters::now() the caller already read.
  Span(Counters* c, const SpanKind& kind, uint64_t t0);
  ~Span() { end(); }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  /// The trace event's arguments (their meaning per event name: docs/counters.md).
  void args(uint64_t a0, uint64_t a1 = 0, uint64_t a2 = 0) {
    a0_ = a0;
    a1_ = a1;
    a2_ = a2;
  }
  /// When the span began (0 when it records nothing).
  uint64_t start() const { return t0_; }
  /// Whether it is still to record (begun on counters, not ended).
  bool open() const { return c_ != nullptr; }
  /// Ends now and records; returns the end time (0 when nothing was open).
  uint64_t end();
  /// Ends at t1, a Counters::now() the caller already read, and records.
  void end_at(uint64_t t1);

 private:
  void begin(Counters* c, uint64_t t0);

  Counters* c_ = nullptr;  // null once ended
  SpanKind kind_;
  uint64_t t0_ = 0, io0_ = 0;
  uint64_t a0_ = 0, a1_ = 0, a2_ = 0;
};

/// The counters of the loader whose decode runs on this thread (nullptr
/// elsewhere): format code times its steps (CRC, inflate, parse) with
/// StepTimer without being handed a Counters.
DLFEED_EXPORT Counters* current();

/// Makes `c` current on this thread while it lives (the loader's decode stage).
class DLFEED_EXPORT CurrentScope {
 public:
  explicit CurrentScope(Counters* c);
  ~CurrentScope();
  CurrentScope(const CurrentScope&) = delete;
  CurrentScope& operator=(const CurrentScope&) = delete;

 private:
  Counters* prev_ = nullptr;
};

/// Records the time from construction to destruction into distribution `id`
/// of the current counters (nothing when none are current).
class DLFEED_EXPORT StepTimer {
 public:
  explicit StepTimer(Id id) : span_(kEnabled ? current() : nullptr, SpanKind{.id = id}) {}
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

 private:
  Span span_;
};

/// Times a region on this thread from construction to destruction (or stop()).
class DLFEED_EXPORT ScopedTimer {
 public:
  ScopedTimer(Counters& c, Region r = Region::kCompute)
      : span_(&c, r == Region::kBarrier ? kBarrierSpan : kComputeSpan) {}
  ~ScopedTimer() { stop(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;
  void stop() { span_.end(); }

 private:
  Span span_;
};

namespace detail {
struct Slab;
struct SlabPool;
struct TraceSlot;
/// The union of intervals of one component, merged across threads.
class DLFEED_EXPORT Union {
 public:
  void begin(uint64_t t);
  void end(uint64_t t);
  /// Busy time (ns) in [0, t].
  uint64_t busy_until(uint64_t t) const;
  /// The same, read by a span at t (now): no period begins earlier than t
  /// after it (see begin()).
  uint64_t busy_seen_at(uint64_t t);

 private:
  // Low 12 bits: intervals open. High 52 bits: while busy, when the current
  // busy period began; while idle, when the last one ended. A thread reads its
  // clock, is preempted, and begins after another thread's period [b, e] with
  // e past its time: its period then starts at e, so no time is counted twice
  // and the busy time never exceeds the wall time it covers. The idle state
  // carries e itself (not a separate word) so that a begin whose compare-and-
  // swap succeeds saw the latest end: with idle always 0, a begin could read
  // an old end, lose the CPU while a whole period began and ended, and still
  // swap 0 for its stale start, counting that period twice.
  std::atomic<uint64_t> state_{0};
  std::atomic<uint64_t> closed_{0};
  std::atomic<uint64_t> asked_{0};  // the latest time busy_seen_at was asked for
};
}  // namespace detail

class DLFEED_EXPORT Counters {
 public:
  explicit Counters(TraceOptions trace = {});
  ~Counters();
  Counters(const Counters&) = delete;
  Counters& operator=(const Counters&) = delete;

  /// Nanoseconds since this object was created (steady clock).
  uint64_t now() const {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - base_).count());
  }

  // ---- user API (trainer) ----
  /// Ends the current step. Until the first call, every Loader::next() after
  /// an epoch's first batch ends a step; after it, only mark_step() does.
  void mark_step() { step_boundary(now(), /*explicit_call=*/true); }
  /// A region in now() time, as ScopedTimer records it: region_begin(r, t0)
  /// returns the I/O busy time at t0, which region_end takes back.
  uint64_t region_begin(Region r, uint64_t t0);
  void region_end(Region r, uint64_t t0, uint64_t t1, uint64_t io_busy_at_t0);

  // ---- what the loader records ----
  void add(Id id, uint64_t v);     // a sum
  void sample(Id id, uint64_t v);  // a distribution value
  void interval_begin(Component c, uint64_t t) { unions_[static_cast<size_t>(c)].begin(t); }
  void interval_end(Component c, uint64_t t) { unions_[static_cast<size_t>(c)].end(t); }
  uint64_t busy_until(Component c, uint64_t t) const { return unions_[static_cast<size_t>(c)].busy_until(t); }
  /// Epoch bounds (the consumer's thread).
  void begin_epoch(uint64_t epoch, uint64_t t);
  void end_epoch(uint64_t t, bool complete);
  /// A step boundary at t (the loader calls it from next(); explicit marks
  /// come from mark_step()).
  void step_boundary(uint64_t t, bool explicit_call = false);
  /// The loader tells when the consumer received a batch (for step logic).
  void on_batch_delivered();

  // ---- traces ----
  bool tracing() const { return kEnabled && trace_on_.load(std::memory_order_acquire); }
  uint32_t io_sample_every() const { return trace_opts_.io_sample_every; }
  /// name/cat must be string literals (stored as pointers).
  void trace(const char* name, const char* cat, uint64_t ts, uint64_t dur, uint64_t a0 = 0, uint64_t a1 = 0,
             uint64_t a2 = 0);
  /// Pauses or resumes recording (the buffer is allocated on first enable).
  void set_tracing(bool on);
  std::vector<TraceEvent> trace_events() const;
  /// Paths by file id, for "fname" in read events (set by the loader).
  void set_file_names(std::vector<std::string> names);
  /// Writes trace_string(format) to `path`, gzip-compressed when it ends in
  /// ".gz" (DFTracer's tools want .pfw.gz). FailedPrecondition, saying to
  /// enable tracing, when it never was (rather than an empty trace).
  absl::Status write_trace(const std::string& path, TraceFormat format = TraceFormat::kChrome) const;
  /// Chrome: reads on at most 16 "io reads" lanes, the rest as async slices;
  /// DFTracer: one event per line with DLIO's categories (docs/counters.md).
  std::string trace_string(TraceFormat format = TraceFormat::kChrome) const;

  // ---- reading ----
  Snapshot snapshot() const;
  /// The report of the epoch begun last (to now while it runs), as
  /// snapshot().epochs.back() has it, without building the other epochs'.
  std::optional<EpochReport> last_epoch() const;
  std::string snapshot_json() const { return snapshot().to_json(); }
  std::string summary_table() const { return snapshot().summary_table(); }
  /// Zeroes every counter and forgets the epochs (the trace is kept).
  void reset();
  /// Heap bytes these counters hold: the threads' slabs (~95 KiB each, as
  /// many as threads recorded at once), the ended epochs (a few hundred bytes
  /// each), the trace buffer when tracing was enabled.
  uint64_t memory_bytes() const;

  /// Small per-thread id used as the trace "tid".
  static uint32_t thread_index();
  /// Names the calling thread in traces (e.g. "dlfeed io").
  static void set_thread_name(const std::string& name);
  /// A trace lane of its own named `name` (e.g. "dlfeed h2d"), for events a
  /// thread records on behalf of work that runs elsewhere (copies on a GPU
  /// stream): pass it to trace_on_lane.
  static uint32_t new_lane(const std::string& name);
  /// trace(), on `lane` (new_lane) instead of the calling thread's.
  void trace_on_lane(uint32_t lane, const char* name, const char* cat, uint64_t ts, uint64_t dur, uint64_t a0 = 0,
                     uint64_t a1 = 0, uint64_t a2 = 0);

 private:
  struct Raw;
  struct Delta;
  struct EpochState;
  detail::Slab& slab();
  Raw read_raw() const;
  Delta delta_of(const EpochState& e, const Raw& now_raw) const;
  EpochReport make_report(const EpochState& e, const Delta& d, uint64_t t_now) const;
  EpochReport report_of(const EpochState& e, const Raw& now_raw) const;
  // A span's begin (returns the I/O busy time at t0 when the kind tracks it)
  // and end: Span, ScopedTimer and region_begin/region_end record through these.
  uint64_t span_begin(const SpanKind& k, uint64_t t0);
  void span_end(const SpanKind& k, uint64_t t0, uint64_t t1, uint64_t io0, uint64_t a0, uint64_t a1, uint64_t a2);

  const std::chrono::steady_clock::time_point base_;
  const int64_t wall_base_us_;  // system clock at base_, microseconds since 1970
  const uint64_t id_;
  mutable std::mutex mu_;  // epochs, baseline: never taken per event (before pool_->mu)
  // Shared with the threads' slab caches: a thread ending after the Counters
  // finds it gone and hands nothing back.
  std::shared_ptr<detail::SlabPool> pool_;
  std::unique_ptr<Raw> baseline_;
  std::vector<EpochState> epochs_;
  std::atomic<bool> epoch_open_{false};
  std::atomic<bool> explicit_steps_{false};
  std::atomic<uint64_t> epoch_batches_{0};
  std::atomic<uint64_t> first_step_end_{0};  // 0: not yet
  // The I/O busy time when the open epoch began: a span begun before it (a
  // next() that runs into the next epoch) counts its I/O from there, as the
  // epoch's io_busy does.
  std::atomic<uint64_t> epoch_io0_{0};
  uint64_t last_boundary_ = 0;  // consumer thread
  uint64_t step_no_ = 0;        // consumer thread
  std::array<detail::Union, kNumComponents> unions_;

  TraceOptions trace_opts_;
  std::atomic<bool> trace_on_{false};
  std::unique_ptr<detail::TraceSlot[]> trace_slots_;
  std::atomic<uint64_t> trace_next_{0};
  std::atomic<uint64_t> trace_dropped_{0};
  std::atomic<uint64_t> io_sample_counter_{0};
  std::vector<std::string> file_names_;

  friend class Span;
};

// Inline so that with DLFEED_COUNTERS=OFF a span reads no clock.
inline Span::Span([[maybe_unused]] Counters* c, const SpanKind& kind) : kind_(kind) {
  if constexpr (kEnabled) {
    if (c) begin(c, c->now());
  }
}

inline Span::Span([[maybe_unused]] Counters* c, const SpanKind& kind, [[maybe_unused]] uint64_t t0) : kind_(kind) {
  if constexpr (kEnabled) {
    if (c) begin(c, t0);
  }
}

inline uint64_t Span::end() {
  if constexpr (kEnabled) {
    if (c_) {
      const uint64_t t1 = c_->now();
      end_at(t1);
      return t1;
    }
  }
  return 0;
}

}  // namespace dlfeed::counters
