// SPDX-License-Identifier: Apache-2.0
// `dlfeed dlio`'s summary: every rank's per-epoch metrics gathered, then on
// rank 0 DLIO's summary.json (same keys and units, host facts included)
// with dlfeed's own record beside them, per_epoch_stats.json and DLIO's
// closing [METRIC] lines.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/error.h"
#include "dlio_internal.h"
#include "json.h"

namespace dlfeed::cli::dlio {

namespace fs = std::filesystem;

std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return absl::StrFormat("%s.%06d", buf, us);
}

std::string default_output_folder(const DlioConfig& c) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d-%H-%M-%S", &tm);
  return (fs::path("hydra_log") / c.model / buf).string();
}

namespace {

double mean_of(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

/// numpy's std (population, ddof 0).
double std_of(const std::vector<double>& v) {
  if (v.empty()) return 0;
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

std::string num_list(const std::vector<double>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", ", [](std::string* o, double x) { o->append(json_number(x)); }), "]");
}

// --- host facts (summary.json's host_* keys) ---------------------------------

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

/// DLIO's lines_to_dict: "key : value" lines of a /proc file, later ones
/// winning, "processor" left out.
std::string proc_dict(const char* path) {
  std::ifstream in(path);
  std::map<std::string, std::string> kv;
  std::vector<std::string> order;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, ':');
    if (parts.size() != 2) continue;
    const std::string k(absl::StripAsciiWhitespace(parts[0])), v(absl::StripAsciiWhitespace(parts[1]));
    if (k == "processor" || k.empty()) continue;
    if (!kv.count(k)) order.push_back(k);
    kv[k] = v;
  }
  return absl::StrCat("{",
                      absl::StrJoin(order, ", ",
                                    [&](std::string* o, const std::string& k) {
                                      absl::StrAppend(o, json_quote(k), ": ", json_quote(kv[k]));
                                    }),
                      "}");
}

double host_memory_gb() {
  const double pages = static_cast<double>(::sysconf(_SC_PHYS_PAGES));
  return pages * static_cast<double>(::sysconf(_SC_PAGESIZE)) / 1073741824.0;
}

std::string json_path_join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

/// The job's metrics per epoch: throughput summed over ranks, AU averaged
/// (DLIO's allreduce); eval_* only for the epochs that evaluated.
struct JobMetrics {
  std::vector<double> train_au, train_tp, eval_au, eval_tp;
  int num_hosts = 1;
};

/// One rank's per-epoch AU and throughput (train, eval) and its host name, as
/// gathered.
std::string rank_metrics(const RunRecord& r) {
  std::string mine;
  for (const EpochStats& e : r.epochs) {
    absl::StrAppend(&mine,
                    absl::StrFormat("%.17g %.17g %.17g %.17g;", e.au, e.throughput, e.eval ? e.eval->au_percent() : 0.0,
                                    e.eval ? e.eval->throughput(r.batch_eval) : 0.0));
  }
  absl::StrAppend(&mine, "|", host_name());
  return mine;
}

JobMetrics job_metrics(const DlioConfig& c, const RunRecord& r, const std::vector<std::string>& all) {
  const std::vector<EpochStats>& epochs = r.epochs;
  JobMetrics m;
  m.train_au.assign(epochs.size(), 0);
  m.train_tp.assign(epochs.size(), 0);
  std::set<std::string> hosts;
  for (const std::string& rank : all) {
    std::vector<std::string> parts = absl::StrSplit(rank, '|');
    hosts.insert(parts.size() > 1 ? parts[1] : "");
    std::vector<std::string> rows = absl::StrSplit(parts[0], ';', absl::SkipEmpty());
    for (size_t e = 0; e < rows.size() && e < epochs.size(); ++e) {
      double v[4] = {};
      std::sscanf(rows[e].c_str(), "%lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3]);
      m.train_au[e] += v[0] / static_cast<double>(all.size());
      m.train_tp[e] += v[1];
      if (epochs[e].eval) {
        if (m.eval_au.size() <= e) {
          m.eval_au.resize(e + 1, 0);
          m.eval_tp.resize(e + 1, 0);
        }
        m.eval_au[e] += v[2] / static_cast<double>(all.size());
        m.eval_tp[e] += v[3];
      }
    }
  }
  if (c.do_eval) {  // only the epochs that evaluated
    std::vector<double> a, t;
    for (size_t e = 0; e < epochs.size(); ++e) {
      if (epochs[e].eval) {
        a.push_back(m.eval_au[e]);
        t.push_back(m.eval_tp[e]);
      }
    }
    m.eval_au = a;
    m.eval_tp = t;
  }
  m.num_hosts = static_cast<int>(std::max<size_t>(1, hosts.size()));
  return m;
}

const char* meet(const DlioConfig& c, const std::vector<double>& au) {
  return mean_of(au) >= c.au * 100 ? "success" : "fail";
}

/// One phase's keys of summary.json's "metric" ("train" or "eval"), each
/// after ", ": AU and throughput per epoch, their means and deviations.
void append_phase_metrics(std::string& out, const char* phase, const DlioConfig& c, const std::vector<double>& au,
                          const std::vector<double>& tp) {
  const double mb = c.record_length / 1024.0 / 1024.0;
  const auto key = [&](const char* name, const std::string& value) {
    absl::StrAppend(&out, ", \"", phase, "_", name, "\": ", value);
  };
  key("au_percentage", num_list(au));
  key("au_mean_percentage", json_number(mean_of(au)));
  key("au_meet_expectation", json_quote(meet(c, au)));
  key("au_stdev_percentage", json_number(std_of(au)));
  key("throughput_samples_per_second", num_list(tp));
  key("throughput_mean_samples_per_second", json_number(mean_of(tp)));
  key("throughput_stdev_samples_per_second", json_number(std_of(tp)));
  key("io_mean_MB_per_second", json_number(mean_of(tp) * mb));
  key("io_stdev_MB_per_second", json_number(std_of(tp) * mb));
}

/// summary.json's "metric", as DLIO writes it.
std::string metric_json(const DlioConfig& c, const JobMetrics& m) {
  std::string body;
  append_phase_metrics(body, "train", c, m.train_au, m.train_tp);
  if (c.do_eval) append_phase_metrics(body, "eval", c, m.eval_au, m.eval_tp);
  return absl::StrCat("{", body.substr(2), "}");  // without the first ", "
}

/// summary.json's "dlfeed": how the config was mapped, the phases' times,
/// the loader's counters.
std::string dlfeed_json(const DlioConfig& c, const RunRecord& r, const counters::Snapshot& train_snap,
                        const std::optional<counters::Snapshot>& eval_snap) {
  std::vector<std::string> per_epoch;
  for (size_t e = 0; e < r.epochs.size(); ++e) {
    const EpochStats& es = r.epochs[e];
    double cs = 0;
    uint64_t cb = 0;
    for (const Ckpt& k : es.ckpts) {
      cs += k.result.secs;
      cb += k.result.bytes;
    }
    per_epoch.push_back(absl::StrCat(
        "{\"epoch\": ", e + 1, ", \"steps\": ", es.steps, ", \"train_s\": ", json_number(es.secs),
        ", \"eval_s\": ", es.eval ? json_number(es.eval->secs) : "null", ", \"checkpoints\": ", es.ckpts.size(),
        ", \"checkpoint_s\": ", json_number(cs), ", \"checkpoint_bytes\": ", cb,
        ", \"checkpoint_MB_per_second\": ", json_number(cs > 0 ? cb / cs / 1048576.0 : 0), "}"));
  }
  auto uses = [](const std::vector<DlioConfig::KeyUse>& v) {
    return absl::StrCat("[",
                        absl::StrJoin(v, ", ",
                                      [](std::string* o, const DlioConfig::KeyUse& k) {
                                        absl::StrAppend(o, "{\"key\": ", json_quote(k.key),
                                                        ", \"value\": ", json_quote(k.value),
                                                        ", \"note\": ", json_quote(k.note), "}");
                                      }),
                        "]");
  };
  return absl::StrCat(
      "{\"schema\": \"dlfeed.dlio/1\", \"config\": ", json_quote(r.config_path),
      ", \"data_folder\": ", json_quote(c.data_dir()), ", \"strategy\": ", json_quote(r.order.strategy),
      ", \"seed\": ", r.order.seed, ", \"order_note\": ", json_quote(r.order.why), ", \"steps_per_epoch\": ", r.cap,
      ", \"drop_last_batch\": true, \"generate_s\": ", json_number(r.generate_s),
      ", \"train_s\": ", json_number(r.train_s), ", \"eval_s\": ", json_number(r.eval_s),
      ", \"checkpoint_s\": ", json_number(r.ckpt_s), ", \"checkpoint_bytes\": ", r.ckpt_bytes,
      ", \"checkpoint_files\": ", r.ckpt_files, ", \"run_s\": ", json_number(r.run_s), ", \"epochs\": [",
      absl::StrJoin(per_epoch, ", "), "], \"compute\": {\"drawn_mean_s\": ", json_number(r.drawn.mean),
      ", \"drawn_stdev_s\": ", json_number(r.drawn.stdev()), ", \"steps\": ", r.drawn.n,
      "}, \"honoured\": ", uses(c.honoured), ", \"ignored\": ", uses(c.ignored),
      ", \"train_counters\": ", train_snap.to_json(),
      ", \"eval_counters\": ", eval_snap ? eval_snap->to_json() : "null", "}");
}

/// summary.json: DLIO's keys and host facts, then dlfeed's record.
std::string summary_json(const DlioConfig& c, const RunRecord& r, const JobMetrics& m, int world,
                         const std::string& dlfeed) {
  const int num_hosts = m.num_hosts;
  const int per_node = std::max(1, world / num_hosts);
  // Integer division first, as DLIO's statscounter computes it (// in Python).
  const uint64_t samples_per_host =
      static_cast<uint64_t>(per_node) * r.spf * r.train_files / static_cast<uint64_t>(world);
  const double data_per_host_gb = static_cast<double>(samples_per_host) * c.record_length / 1073741824.0;
  const double mem_gb = host_memory_gb();
  struct utsname u {};
  ::uname(&u);
  std::vector<std::string> caching(static_cast<size_t>(num_hosts), mem_gb <= data_per_host_gb ? "0" : "1");
  std::vector<double> mems(static_cast<size_t>(num_hosts), mem_gb);
  const std::string cpus = absl::StrCat(std::thread::hardware_concurrency());
  return absl::StrCat(
      "{\n    \"start\": ", json_quote(r.start_ts), ",\n    \"num_accelerators\": ", world,
      ",\n    \"num_hosts\": ", num_hosts, ",\n    \"hostname\": ", json_quote(host_name()),
      ",\n    \"metric\": ", metric_json(c, m), ",\n    \"num_files_train\": ", r.train_files,
      ",\n    \"num_files_eval\": ", r.eval_files, ",\n    \"num_samples_per_file\": ", r.spf,
      ",\n    \"host_cpu_count\": [", absl::StrJoin(std::vector<std::string>(num_hosts, cpus), ", "), "]",
      ",\n    \"host_processor_name\": ", json_quote(u.machine), ",\n    \"potential_caching\": [",
      absl::StrJoin(caching, ", "), "],\n    \"host_cpuinfo\": ", proc_dict("/proc/cpuinfo"),
      ",\n    \"host_meminfo\": ", proc_dict("/proc/meminfo"), ",\n    \"host_memory_GB\": ", num_list(mems),
      ",\n    \"data_size_per_host_GB\": ", json_number(data_per_host_gb), ",\n    \"epochs\": ", m.train_au.size(),
      ",\n    \"end\": ", json_quote(timestamp()), ",\n    \"dlfeed\": ", dlfeed, "\n}\n");
}

/// per_epoch_stats.json: DLIO's per-epoch record (durations as "%.2f"
/// strings, as DLIO writes them).
std::string per_epoch_stats_json(const RunRecord& r) {
  auto span = [](const std::string& s, const std::string& e, double secs) {
    return absl::StrCat("{\"start\": ", json_quote(s), ", \"end\": ", json_quote(e),
                        ", \"duration\": ", json_quote(absl::StrFormat("%.2f", secs)), "}");
  };
  std::vector<std::string> pes;
  for (size_t e = 0; e < r.epochs.size(); ++e) {
    const EpochStats& es = r.epochs[e];
    std::vector<std::string> m = {absl::StrCat("\"start\": ", json_quote(es.start))};
    for (size_t b = 0; b < es.blocks.size(); ++b) {
      m.push_back(
          absl::StrCat("\"block", b + 1, "\": ", span(es.blocks[b].start, es.blocks[b].end, es.blocks[b].secs)));
    }
    for (size_t k = 0; k < es.ckpts.size(); ++k) {
      m.push_back(
          absl::StrCat("\"ckpt", k + 1, "\": ", span(es.ckpts[k].start, es.ckpts[k].end, es.ckpts[k].result.secs)));
    }
    m.push_back(absl::StrCat("\"end\": ", json_quote(es.end)));
    m.push_back(absl::StrCat("\"duration\": ", json_quote(absl::StrFormat("%.2f", es.secs))));
    if (es.eval) m.push_back(absl::StrCat("\"eval\": ", span(es.eval->start, es.eval->end, es.eval->secs)));
    pes.push_back(absl::StrCat("    \"", e + 1, "\": {", absl::StrJoin(m, ", "), "}"));
  }
  return absl::StrCat("{\n", absl::StrJoin(pes, ",\n"), "\n}\n");
}

/// DLIO's closing lines, so scripts that grep its log find them here too.
void print_metric_lines(const DlioConfig& c, const RunRecord& r, const JobMetrics& m, int world) {
  const double mb = c.record_length / 1024.0 / 1024.0;
  std::printf("[METRIC] ==========================================================\n");
  std::printf("[METRIC] Number of Simulated Accelerators: %d\n", world);
  std::printf("[METRIC] Training Accelerator Utilization [AU] (%%): %.4f (%.4f)\n", mean_of(m.train_au),
              std_of(m.train_au));
  std::printf("[METRIC] Training Throughput (samples/second): %.4f (%.4f)\n", mean_of(m.train_tp), std_of(m.train_tp));
  std::printf("[METRIC] Training I/O Throughput (MB/second): %.4f (%.4f)\n", mean_of(m.train_tp) * mb,
              std_of(m.train_tp) * mb);
  std::printf("[METRIC] train_au_meet_expectation: %s\n", meet(c, m.train_au));
  if (c.do_eval) {
    std::printf("[METRIC] Eval Accelerator Utilization [AU] (%%): %.4f (%.4f)\n", mean_of(m.eval_au),
                std_of(m.eval_au));
    std::printf("[METRIC] Eval Throughput (samples/second): %.6f (%.6f)\n", mean_of(m.eval_tp), std_of(m.eval_tp));
    std::printf("[METRIC] Eval Throughput (MB/second): %.6f (%.6f)\n", mean_of(m.eval_tp) * mb, std_of(m.eval_tp) * mb);
    std::printf("[METRIC] eval_au_meet_expectation: %s\n", meet(c, m.eval_au));
  }
  std::printf("[METRIC] ==========================================================\n");
  std::printf("times: train %.3f s, eval %.3f s, checkpoint %.3f s (%llu files, %.1f MB)%s\n", r.train_s, r.eval_s,
              r.ckpt_s, static_cast<unsigned long long>(r.ckpt_files), r.ckpt_bytes / 1e6,
              r.generate_s > 0 ? absl::StrFormat(", generate %.3f s", r.generate_s).c_str() : "");
  std::printf("summary: %s\n", json_path_join(r.out_dir, "summary.json").c_str());
}

}  // namespace

void write_summary(const DlioConfig& c, const RunRecord& r, const ScaleOut& scale, const Loader& train_loader,
                   const Loader* eval_loader) {
  const std::vector<std::string> all = scale.gather(rank_metrics(r));
  const counters::Snapshot train_snap = scale.summary(train_loader, "");
  std::optional<counters::Snapshot> eval_snap;
  if (eval_loader) eval_snap = scale.summary(*eval_loader, "");
  if (!scale.is_root()) return;

  const JobMetrics m = job_metrics(c, r, all);
  const std::string dlfeed = dlfeed_json(c, r, train_snap, eval_snap);
  const std::string summary = summary_json(c, r, m, scale.size(), dlfeed);
  std::error_code ec;
  fs::create_directories(r.out_dir, ec);
  if (ec) throw_if_error(absl::InternalError(absl::StrCat(r.out_dir, ": mkdir: ", ec.message())));
  throw_if_error(write_text_file(json_path_join(r.out_dir, "summary.json"), summary));
  throw_if_error(write_text_file(json_path_join(r.out_dir, "per_epoch_stats.json"), per_epoch_stats_json(r)));
  print_metric_lines(c, r, m, scale.size());
}

}  // namespace dlfeed::cli::dlio
