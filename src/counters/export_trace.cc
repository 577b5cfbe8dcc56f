// Trace exports: the Chrome/Perfetto trace-event JSON and DFTracer's lines
// (one event per line), from the events of the trace buffer (trace.cc).
#include <algorithm>
#include <cstdio>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dlfeed/detail/json.h"
#include "internal.h"

namespace dlfeed::inline DLFEED_ABI::counters {

using dlfeed::detail::json_quote;

namespace {

constexpr uint32_t kIoLaneBase = 100000;

// ns as microseconds with three decimals, exactly.
std::string us3(uint64_t ns) { return absl::StrFormat("%d.%03d", ns / 1000, ns % 1000); }

std::string args_json(const TraceEvent& e, const std::vector<std::string>& files) {
  const absl::string_view n = e.name;
  if (n == "read") {
    std::string fname = e.a0 < files.size() ? files[e.a0] : absl::StrCat(e.a0);
    return absl::StrCat("{\"fname\":", json_quote(fname), ",\"offset\":", e.a1, ",\"size\":", e.a2, "}");
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
    return absl::StrCat("{\"fname\":", json_quote(fname), ",\"size\":", e.a1, "}");
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
      absl::StrCat("{\"max_events\":", max_events, ",\"recorded\":", recorded,
                   ",\"dropped\":", trace_dropped_.load(kRelaxed), ",\"io_sample_every\":", trace_opts_.io_sample_every,
                   ",\"time_base_unix_us\":", wall_base_us_, ",\"producer\":\"dlfeed\"}");
  const std::map<uint32_t, std::string> names = thread_names_copy();
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
                    ",\"tid\":0,\"args\":{\"name\":", json_quote(trace_opts_.process_name), "}}");
    for (const auto& [tid, name] : used) {
      sep();
      absl::StrAppend(&out, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
                      ",\"args\":{\"name\":", json_quote(name), "}}");
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
                      ",\"tid\":", tid, ",\"ts\":", wall_base_us_,
                      ",\"dur\":0,\"ph\":\"M\",\"args\":{\"name\":", json_quote(name), "}}\n");
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

}  // namespace dlfeed::counters
