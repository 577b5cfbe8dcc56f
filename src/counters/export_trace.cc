// SPDX-License-Identifier: Apache-2.0
// Trace exports: the Chrome/Perfetto trace-event JSON and DFTracer's lines
// (one event per line, the style pydftracer 2.x writes), from the events of
// the trace buffer (trace.cc); a path ending in ".gz" is written gzip-compressed.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dlfeed/detail/json.h"
#include "internal.h"

namespace dlfeed::inline DLFEED_ABI::counters {

using dlfeed::detail::json_quote;

namespace {

// Reads overlap on the engine thread (one engine keeps dozens in flight), and
// a Chrome trace's complete events on one thread must nest. So reads go to a
// few virtual threads ("io reads N"), each read to the first lane free at its
// start; the reads that find every lane busy become async slices, which
// Perfetto stacks by itself on one "io reads (more in flight)" track. 16 lanes
// hold ~94% of the reads of a 3-epoch global-shuffle run with 16-sample
// batches; the rest overflow.
constexpr uint32_t kIoLaneBase = 100000;
constexpr size_t kIoLanes = 16;
constexpr int kOverflow = -1;

// ns as microseconds with three decimals, exactly.
std::string us3(uint64_t ns) { return absl::StrFormat("%d.%03d", ns / 1000, ns % 1000); }

std::string file_name(const std::vector<std::string>& files, uint64_t id) {
  return id < files.size() ? files[id] : absl::StrCat(id);
}

// dlfeed's own arguments of an event, as JSON members without braces.
std::string detail_members(const TraceEvent& e, const std::vector<std::string>& files) {
  const absl::string_view n = e.name;
  if (n == "read") {
    return absl::StrCat("\"fname\":", json_quote(file_name(files, e.a0)), ",\"offset\":", e.a1, ",\"size\":", e.a2);
  }
  if (n == "plan") return absl::StrCat("\"epoch\":", e.a0, ",\"batch\":", e.a1, ",\"reads\":", e.a2);
  if (n == "decode") return absl::StrCat("\"epoch\":", e.a0, ",\"batch\":", e.a1, ",\"samples\":", e.a2);
  if (n == "admit_wait" || n == "collate" || n == "stall") return absl::StrCat("\"epoch\":", e.a0, ",\"batch\":", e.a1);
  if (n == "step") return absl::StrCat("\"step\":", e.a1);
  if (n == "epoch") return absl::StrCat("\"epoch\":", e.a0, ",\"complete\":", e.a1 ? "true" : "false");
  if (n == "open") return absl::StrCat("\"field\":", e.a0, ",\"files\":", e.a1);
  if (n == "stage") return absl::StrCat("\"fname\":", json_quote(file_name(files, e.a0)), ",\"size\":", e.a1);
  if (n == "h2d") return absl::StrCat("\"epoch\":", e.a0, ",\"batch\":", e.a1, ",\"size\":", e.a2);
  if (n == "autotune") return absl::StrCat("\"io_engines\":", e.a0, ",\"depth\":", e.a1, ",\"changes\":", e.a2);
  if (n == "job_cache_stamps" || n == "job_cache_gets") return absl::StrCat("\"gets\":", e.a0, ",\"size\":", e.a1);
  return "";
}

std::string args_json(const TraceEvent& e, const std::vector<std::string>& files) {
  return absl::StrCat("{", detail_members(e, files), "}");
}

// The DFTracer category and name of a dlfeed event, as DLIO (through
// pydftracer's AI logging: dft_ai.pipeline.epoch, dataloader.fetch, compute,
// data.item ...) and DFTracer's POSIX interception name theirs, so that
// dftracer_view's dlio and io presets and dfanalyzer's DLIO layers select
// them. The reads are positional reads (io_uring or pread): POSIX pread.
struct DfName {
  absl::string_view dlfeed;
  const char* cat;
  const char* name;
};
constexpr DfName kDfNames[] = {
    {"read", "POSIX", "pread"},             // dftracer_view --preset io, dfanalyzer posix
    {"epoch", "pipeline", "epoch.block"},   // dfanalyzer epoch (pipeline, epoch*)
    {"step", "pipeline", "step"},           //
    {"compute", "compute", "compute"},      // dfanalyzer compute
    {"stall", "dataloader", "fetch.iter"},  // dfanalyzer fetch_data: the trainer waiting for a batch
    {"plan", "dataloader", "plan"},         //
    {"admit_wait", "dataloader", "admit_wait"},
    {"decode", "data", "item"},                 // dfanalyzer data_loader (cat data)
    {"collate", "data", "preprocess.collate"},  //
    {"open", "reader", "index.open"},           // dfanalyzer reader (cat reader, *.open)
    {"stage", "storage", "stage"},
    {"barrier", "comm", "barrier"},
    {"h2d", "device", "h2d"},                          // a batch's copy to the GPU (Python device=)
    {"job_cache_stamps", "comm", "job_cache.stamps"},  // dlfeed::mpi::JobCache: gets of other ranks' memory
    {"job_cache_gets", "comm", "job_cache.get"},
};

DfName df_name(const TraceEvent& e) {
  for (const DfName& d : kDfNames) {
    if (d.dlfeed == e.name) return d;
  }
  return {e.name, "dlfeed", e.name};
}

// A stable 64-bit hash (FNV-1a) as 16 hex digits: DFTracer names hosts and
// files by such hashes (args hhash, fhash) and maps them back through its
// HH and FH metadata lines.
std::string hash16(absl::string_view s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// Lanes of the reads (index into ev, kOverflow when every lane was busy),
// first fit by start time (ev is sorted by start).
std::vector<int> read_lanes(const std::vector<TraceEvent>& ev, size_t* lanes_used) {
  std::vector<int> lane(ev.size(), kOverflow);
  std::array<uint64_t, kIoLanes> lane_end{};
  *lanes_used = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    const TraceEvent& e = ev[i];
    if (absl::string_view(e.name) != "read") continue;
    for (size_t l = 0; l < kIoLanes; ++l) {
      if (lane_end[l] <= e.ts_ns) {  // free (a read may start where the last one ended)
        lane[i] = static_cast<int>(l);
        lane_end[l] = e.ts_ns + e.dur_ns;
        *lanes_used = std::max(*lanes_used, l + 1);
        break;
      }
    }
  }
  return lane;
}

// What both trace formats write beside the events: the process, the
// threads' names and the trace buffer's counts.
struct TraceContext {
  const std::vector<TraceEvent>& ev;
  const std::vector<std::string>& files;
  const std::map<uint32_t, std::string>& names;
  const TraceOptions& opts;
  const std::atomic<uint64_t>& dropped;  // loaded where each format writes its counts
  int64_t pid;
  uint64_t max_events;
  uint64_t recorded;
  int64_t wall_base_us;

  std::string thread_name(uint32_t tid) const {
    auto it = names.find(tid);
    return it != names.end() ? it->second : absl::StrCat("thread ", tid);
  }
};

// The Chrome/Perfetto trace-event JSON, appended to `out`.
class ChromeTrace {
 public:
  ChromeTrace(const TraceContext& c, std::string& out) : c_(c), out_(out) {}
  void write();

 private:
  void sep() {
    if (!first_) out_ += ",\n";
    first_ = false;
  }
  void meta_event(absl::string_view what, uint32_t tid, absl::string_view arg) {
    sep();
    absl::StrAppend(&out_, "{\"name\":\"", what, "\",\"ph\":\"M\",\"pid\":", c_.pid, ",\"tid\":", tid,
                    ",\"args\":", arg, "}");
  }
  void thread_events(size_t lanes_used);
  void event(const TraceEvent& e, int lane);

  const TraceContext& c_;
  std::string& out_;
  bool first_ = true;
  uint64_t async_id_ = 0;
};

void ChromeTrace::write() {
  const std::vector<TraceEvent>& ev = c_.ev;
  size_t lanes_used = 0;
  const std::vector<int> lane = read_lanes(ev, &lanes_used);
  size_t overflow = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (absl::string_view(ev[i].name) == "read" && lane[i] == kOverflow) ++overflow;
  }
  const std::string meta = absl::StrCat(
      "{\"max_events\":", c_.max_events, ",\"recorded\":", c_.recorded, ",\"dropped\":", c_.dropped.load(kRelaxed),
      ",\"io_sample_every\":", c_.opts.io_sample_every, ",\"time_base_unix_us\":", c_.wall_base_us,
      ",\"io_lanes\":", lanes_used, ",\"io_reads_async\":", overflow, ",\"producer\":\"dlfeed\"}");
  out_ += "{\"traceEvents\":[\n";
  meta_event("process_name", 0, absl::StrCat("{\"name\":", json_quote(c_.opts.process_name), "}"));
  thread_events(lanes_used);
  for (size_t i = 0; i < ev.size(); ++i) event(ev[i], lane[i]);
  absl::StrAppend(&out_, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"dlfeed_trace\":", meta, "}}\n");
}

void ChromeTrace::thread_events(size_t lanes_used) {
  // Threads by name, the consumer first, then the loader's threads, the
  // read lanes last (their sort index is their place).
  std::map<uint32_t, bool> threads;
  for (size_t i = 0; i < c_.ev.size(); ++i) {
    if (absl::string_view(c_.ev[i].name) != "read") threads[c_.ev[i].tid] = true;
  }
  for (const auto& [tid, unused] : threads) {
    const std::string name = c_.thread_name(tid);
    meta_event("thread_name", tid, absl::StrCat("{\"name\":", json_quote(name), "}"));
    meta_event("thread_sort_index", tid, absl::StrCat("{\"sort_index\":", name == "consumer" ? 0 : tid, "}"));
  }
  for (size_t l = 0; l < lanes_used; ++l) {
    const uint32_t tid = kIoLaneBase + static_cast<uint32_t>(l);
    meta_event("thread_name", tid, absl::StrCat("{\"name\":\"io reads ", l, "\"}"));
    meta_event("thread_sort_index", tid, absl::StrCat("{\"sort_index\":", tid, "}"));
  }
}

void ChromeTrace::event(const TraceEvent& e, int lane) {
  const int64_t pid = c_.pid;
  const std::string args = args_json(e, c_.files);
  if (absl::string_view(e.name) == "read" && lane == kOverflow) {
    // An async slice: begin and end with one id; Perfetto lays the
    // overlapping ones out in rows of one track named by the cat and name.
    ++async_id_;
    sep();
    absl::StrAppend(&out_, "{\"name\":\"read\",\"cat\":\"io\",\"ph\":\"b\",\"id\":", async_id_, ",\"pid\":", pid,
                    ",\"tid\":", e.tid, ",\"ts\":", us3(e.ts_ns), ",\"args\":", args, "}");
    sep();
    absl::StrAppend(&out_, "{\"name\":\"read\",\"cat\":\"io\",\"ph\":\"e\",\"id\":", async_id_, ",\"pid\":", pid,
                    ",\"tid\":", e.tid, ",\"ts\":", us3(e.ts_ns + e.dur_ns), "}");
    return;
  }
  const uint32_t tid = lane == kOverflow ? e.tid : kIoLaneBase + static_cast<uint32_t>(lane);
  sep();
  absl::StrAppend(&out_, "{\"name\":\"", e.name, "\",\"cat\":\"", e.cat, "\",\"ph\":\"X\",\"pid\":", pid,
                  ",\"tid\":", tid, ",\"ts\":", us3(e.ts_ns), ",\"dur\":", us3(e.dur_ns), ",\"args\":", args, "}");
  if (absl::string_view(e.name) == "epoch") {
    // The epoch's start, drawn across the whole process.
    sep();
    absl::StrAppend(&out_, "{\"name\":\"epoch ", e.a0,
                    " begins\",\"cat\":\"loader\",\"ph\":\"i\",\"s\":\"p\",\"pid\":", pid, ",\"tid\":", e.tid,
                    ",\"ts\":", us3(e.ts_ns), ",\"args\":{\"epoch\":", e.a0, "}}");
  }
}

// DFTracer: "[" then one JSON object per line, then "]". Complete events
// as pydftracer 2.x writes them: id, name, cat, pid, tid, ts and dur in
// integer microseconds since 1970, ph "X", args with the host hash first
// and, beside dlfeed's own arguments, "dlfeed" (the event's name in dlfeed
// and its Chrome traces). Metadata lines (ph "M", cat "dftracer") map the
// host and file hashes back (HH, FH) and name the process and threads.
class DfTrace {
 public:
  DfTrace(const TraceContext& c, std::string& out)
      : c_(c), out_(out), host_(host_name()), hhash_(hash16(host_)), fhash_(c.files.size()) {
    for (size_t i = 0; i < c_.files.size(); ++i) fhash_[i] = hash16(c_.files[i]);
  }
  void write() {
    metadata();
    root_spans();
    for (const TraceEvent& e : c_.ev) event(e);
    out_ += "]\n";
  }

 private:
  void meta_line(absl::string_view what, uint32_t tid, absl::string_view name, absl::string_view value) {
    absl::StrAppend(&out_, "{\"id\":", id_++, ",\"name\":\"", what, "\",\"cat\":\"dftracer\",\"pid\":", c_.pid,
                    ",\"tid\":", tid, ",\"ph\":\"M\",\"args\":{\"hhash\":\"", hhash_, "\",\"name\":", json_quote(name),
                    ",\"value\":", json_quote(value), "}}\n");
  }
  void x_line(const char* cat, const char* name, uint32_t tid, uint64_t ts_ns, uint64_t dur_ns,
              absl::string_view members) {
    const uint64_t ts = ts_ns / 1000, end = (ts_ns + dur_ns) / 1000;
    absl::StrAppend(&out_, "{\"id\":", id_++, ",\"name\":\"", name, "\",\"cat\":\"", cat, "\",\"pid\":", c_.pid,
                    ",\"tid\":", tid, ",\"ts\":", static_cast<uint64_t>(c_.wall_base_us) + ts, ",\"dur\":", end - ts,
                    ",\"ph\":\"X\",\"args\":{\"hhash\":\"", hhash_, "\"", members, "}}\n");
  }
  void metadata();
  void root_spans();
  void event(const TraceEvent& e);

  const TraceContext& c_;
  std::string& out_;
  const std::string host_;
  const std::string hhash_;
  std::vector<std::string> fhash_;  // by file id
  uint64_t id_ = 0;
};

void DfTrace::metadata() {
  const int64_t pid = c_.pid;
  const std::vector<std::string>& files = c_.files;
  const std::string meta =
      absl::StrCat("{\"hhash\":\"", hhash_, "\",\"max_events\":", c_.max_events, ",\"recorded\":", c_.recorded,
                   ",\"dropped\":", c_.dropped.load(kRelaxed), ",\"io_sample_every\":", c_.opts.io_sample_every,
                   ",\"time_base_unix_us\":", c_.wall_base_us, ",\"producer\":\"dlfeed\"}");
  out_ += "[\n";
  absl::StrAppend(&out_, "{\"id\":", id_++, ",\"name\":\"dlfeed_trace\",\"cat\":\"dftracer\",\"pid\":", pid,
                  ",\"tid\":0,\"ph\":\"M\",\"args\":", meta, "}\n");
  meta_line("HH", 0, host_, hhash_);
  meta_line("PR", 0, c_.opts.process_name, absl::StrCat(pid));
  absl::StrAppend(&out_, "{\"id\":", id_++, ",\"name\":\"process_name\",\"cat\":\"dftracer\",\"pid\":", pid,
                  ",\"tid\":0,\"ph\":\"M\",\"args\":{\"hhash\":\"", hhash_,
                  "\",\"name\":", json_quote(c_.opts.process_name), "}}\n");
  std::map<uint32_t, bool> threads;
  std::vector<bool> file_used(files.size(), false);
  for (const TraceEvent& e : c_.ev) {
    threads[e.tid] = true;
    const absl::string_view n = e.name;
    if ((n == "read" || n == "stage") && e.a0 < files.size()) file_used[e.a0] = true;
  }
  for (const auto& [tid, unused] : threads) {
    absl::StrAppend(&out_, "{\"id\":", id_++, ",\"name\":\"thread_name\",\"cat\":\"dftracer\",\"pid\":", pid,
                    ",\"tid\":", tid, ",\"ph\":\"M\",\"args\":{\"hhash\":\"", hhash_,
                    "\",\"name\":", json_quote(c_.thread_name(tid)), "}}\n");
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (file_used[i]) meta_line("FH", 0, files[i], fhash_[i]);
  }
}

// The run as DLIO's AI logging frames it: the root span (ai_root) over
// every event and the training (pipeline train) over the epochs.
void DfTrace::root_spans() {
  const std::vector<TraceEvent>& ev = c_.ev;
  if (ev.empty()) return;
  uint64_t t0 = ev.front().ts_ns, t1 = 0, e0 = UINT64_MAX, e1 = 0;
  uint32_t consumer = ev.front().tid;
  for (const TraceEvent& e : ev) {
    t1 = std::max(t1, e.ts_ns + e.dur_ns);
    if (absl::string_view(e.name) == "epoch") {
      e0 = std::min(e0, e.ts_ns);
      e1 = std::max(e1, e.ts_ns + e.dur_ns);
      consumer = e.tid;
    }
  }
  x_line("ai_root", "ai_root", consumer, t0, t1 - t0, ",\"dlfeed\":\"run\"");
  if (e1 > 0) x_line("pipeline", "train", consumer, e0, e1 - e0, ",\"dlfeed\":\"epochs\"");
}

void DfTrace::event(const TraceEvent& e) {
  const DfName d = df_name(e);
  std::string members = absl::StrCat(",\"dlfeed\":\"", e.name, "\"");
  const std::string own = detail_members(e, c_.files);
  if (!own.empty()) absl::StrAppend(&members, ",", own);
  const absl::string_view n = e.name;
  if ((n == "read" || n == "stage") && e.a0 < c_.files.size())
    absl::StrAppend(&members, ",\"fhash\":\"", fhash_[e.a0], "\"");
  // pydftracer's iteration count: the epoch's "count" (epochs from 1).
  if (n == "epoch") absl::StrAppend(&members, ",\"count\":", e.a0 + 1);
  x_line(d.cat, d.name, e.tid, e.ts_ns, e.dur_ns, members);
}

}  // namespace

std::string Counters::trace_string(TraceFormat format) const {
  const std::vector<TraceEvent> ev = trace_events();
  std::vector<std::string> files;
  {
    std::lock_guard<std::mutex> lock(mu_);
    files = file_names_;
  }
  const int64_t pid = trace_opts_.pid >= 0 ? trace_opts_.pid : static_cast<int64_t>(::getpid());
  const uint64_t max_events = trace_slots_ ? trace_opts_.max_events : 0;
  const uint64_t recorded = std::min(trace_next_.load(kRelaxed), max_events);
  const std::map<uint32_t, std::string> names = thread_names_copy();
  const TraceContext c{ev, files, names, trace_opts_, trace_dropped_, pid, max_events, recorded, wall_base_us_};
  std::string out;
  out.reserve(ev.size() * 180 + 1024);
  if (format == TraceFormat::kChrome) {
    ChromeTrace(c, out).write();
  } else {
    DfTrace(c, out).write();
  }
  return out;
}

absl::Status Counters::write_trace(const std::string& path, TraceFormat format) const {
  if constexpr (!kEnabled) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": no trace to write: this build has no counters (built with -DDLFEED_COUNTERS=OFF)"));
  }
  if (!trace_slots_) {
    return absl::FailedPreconditionError(
        absl::StrCat(path,
                     ": no trace to write: tracing was not enabled (LoaderOptions trace.enabled, Python trace=True, "
                     "dlfeed run --trace)"));
  }
  const std::string s = trace_string(format);
  if (absl::EndsWith(path, ".gz")) {
    gzFile gz = gzopen(path.c_str(), "wb6");
    if (!gz) return absl::NotFoundError(absl::StrCat(path, ": cannot open for writing"));
    size_t done = 0;
    bool ok = true;
    while (ok && done < s.size()) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(s.size() - done, 1u << 30));
      ok = gzwrite(gz, s.data() + done, chunk) == static_cast<int>(chunk);
      done += chunk;
    }
    if (gzclose(gz) != Z_OK || !ok) return absl::DataLossError(absl::StrCat(path, ": gzip write failed"));
    return absl::OkStatus();
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return absl::NotFoundError(absl::StrCat(path, ": cannot open for writing"));
  const bool ok = std::fwrite(s.data(), 1, s.size(), f) == s.size();
  if (std::fclose(f) != 0 || !ok) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace dlfeed::counters
