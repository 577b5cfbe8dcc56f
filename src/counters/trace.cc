// SPDX-License-Identifier: Apache-2.0
// The trace buffer: a bounded array of events preallocated when tracing is
// first enabled, each claimed with one fetch_add; the threads' trace ids and
// names. export_trace.cc writes the events out.
#include <algorithm>

#include "internal.h"

namespace dlfeed::inline DLFEED_ABI::counters {

namespace {

std::atomic<uint32_t> g_next_thread{1};

std::mutex& thread_names_mu() {
  static std::mutex mu;
  return mu;
}
std::map<uint32_t, std::string>& thread_names() {
  static auto* m = new std::map<uint32_t, std::string>();
  return *m;
}

}  // namespace

std::map<uint32_t, std::string> thread_names_copy() {
  std::lock_guard<std::mutex> lock(thread_names_mu());
  return thread_names();
}

uint32_t Counters::thread_index() {
  thread_local uint32_t idx = g_next_thread.fetch_add(1);
  return idx;
}

void Counters::set_thread_name(const std::string& name) {
  const uint32_t t = thread_index();
  std::lock_guard<std::mutex> lock(thread_names_mu());
  thread_names()[t] = name;
}

absl::string_view trace_format_name(TraceFormat f) { return f == TraceFormat::kChrome ? "chrome" : "dftracer"; }
namespace {
// Every name parse_trace_format accepts (perfetto and pfw are the names the
// tools reading each format go by).
constexpr std::pair<absl::string_view, TraceFormat> kTraceFormatNames[] = {
    {"chrome", TraceFormat::kChrome},
    {"perfetto", TraceFormat::kChrome},
    {"dftracer", TraceFormat::kDfTracer},
    {"pfw", TraceFormat::kDfTracer},
};
}  // namespace

bool parse_trace_format(absl::string_view s, TraceFormat* out) {
  for (const auto& [name, format] : kTraceFormatNames) {
    if (s == name) {
      *out = format;
      return true;
    }
  }
  return false;
}

std::string trace_format_names() {
  std::string out;
  for (const auto& [name, format] : kTraceFormatNames) {
    if (!out.empty()) out += ", ";
    out += std::string(name);
    if (name != trace_format_name(format)) out += " (= " + std::string(trace_format_name(format)) + ")";
  }
  return out;
}

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

uint32_t Counters::new_lane(const std::string& name) {
  const uint32_t t = g_next_thread.fetch_add(1);
  std::lock_guard<std::mutex> lock(thread_names_mu());
  thread_names()[t] = name;
  return t;
}

void Counters::trace(const char* name, const char* cat, uint64_t ts, uint64_t dur, uint64_t a0, uint64_t a1,
                     uint64_t a2) {
  if constexpr (!kEnabled) return;
  if (!tracing()) return;
  trace_on_lane(thread_index(), name, cat, ts, dur, a0, a1, a2);
}

void Counters::trace_on_lane(uint32_t lane, const char* name, const char* cat, uint64_t ts, uint64_t dur, uint64_t a0,
                             uint64_t a1, uint64_t a2) {
  if constexpr (!kEnabled) return;
  if (!tracing()) return;
  const uint64_t i = trace_next_.fetch_add(1, kRelaxed);
  if (i >= trace_opts_.max_events) {
    trace_dropped_.fetch_add(1, kRelaxed);
    return;
  }
  detail::TraceSlot& s = trace_slots_[i];
  s.tid = lane;
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

}  // namespace dlfeed::counters
