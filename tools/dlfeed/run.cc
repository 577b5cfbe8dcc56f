// SPDX-License-Identifier: Apache-2.0
// dlfeed run: emulated training. Iterates a dataset (or a workload preset's,
// generated when missing) for N epochs through the loader, with an emulated
// compute time per step (fixed, or normal(mean, stdev) truncated at 0, drawn
// from --seed), like the DLIO benchmark. Per epoch it reports AU, samples/s,
// MiB/s delivered and the I/O hidden behind compute vs exposed, and, given a
// calibration (`dlfeed calibrate`), efficiency: the loader's samples/s as a
// fraction of the storage's limit for the order's access pattern. Prints the
// counters' summary table (docs/counters.md); --summary-json writes it with a
// "run" section (docs/workloads.md), --trace the trace events; with
// --checksum, an order-independent checksum of every byte delivered.
//
// Shape (so a distributed version can hook in): configure() builds the
// RunConfig from flags; Trainer::run_epoch() is the epoch loop and
// Trainer::step() the per-step hook; report_epoch() and final_report() print
// and write the results.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "calibration.h"
#include "command.h"
#include "common_format.h"
#include "compute_model.h"
#include "dev/raw_read.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/error.h"
#include "dlfeed/loader.h"
#include "dlfeed/order/random.h"
#include "json.h"
#if DLFEED_WITH_S3
#include "dlfeed/s3/s3.h"
#endif
#include "loader_flags.h"
#include "run_scale.h"
#include "run_util.h"
#include "workloads.h"

ABSL_FLAG(uint64_t, epochs, 1, "Epochs to run");
ABSL_FLAG(double, compute_ms, 0.0,
          "Emulated compute per step (batch), in milliseconds; the mean when --compute-stdev-ms is set "
          "(with --workload: default the preset's)");
ABSL_FLAG(double, compute_stdev_ms, 0.0,
          "Standard deviation of the compute per step: each step draws normal(--compute-ms, this) truncated at "
          "0 (negative draws are drawn again), from a generator seeded by --seed");
ABSL_FLAG(std::string, field_shapes, "",
          "Per field, the sample shape where the files do not record it (TFRecord features), fields separated by "
          "';': 'x=3,224,224;y=' reads x's raw bytes as (3, 224, 224) and y as a scalar; a field not named takes "
          "--feature-shape");
ABSL_FLAG(std::string, field_dtypes, "",
          "Per field, the element type of a TFRecord bytes feature, fields separated by ';', e.g. 'x=uint8'; a field "
          "not named takes --feature-dtype");
ABSL_FLAG(bool, drop_last_batch, dlfeed::LoaderOptions{}.drop_last_batch, "Drop a rank's last partial batch");
ABSL_FLAG(bool, ragged, dlfeed::LoaderOptions{}.ragged,
          "Allow samples of different shapes in one field (ragged batches); without it such a dataset is refused");
ABSL_FLAG(bool, checksum, false, "Print an order-independent checksum of every sample delivered");
ABSL_FLAG(bool, quiet, false, "Print only the summary lines");
ABSL_FLAG(bool, evict, false,
          "Drop the dataset's cached pages before each epoch (cold cache, as calibrate measures; default on "
          "with --workload)");
ABSL_FLAG(std::string, calibration, "",
          "Calibration JSON from `dlfeed calibrate`: report efficiency = samples/s / the samples/s the storage's "
          "limit for this order's pattern allows (default: the file calibrate writes for this dataset, when it "
          "exists)");
ABSL_FLAG(std::string, summary_json, "",
          "Write the counters' summary (JSON, docs/counters.md) with a \"run\" section (docs/workloads.md) to "
          "this file");
ABSL_FLAG(std::string, trace, "", "Record trace events and write them to this file");
ABSL_FLAG(std::string, trace_format, "chrome",
          "Trace format: chrome (Chrome trace JSON, opens in Perfetto) or dftracer (one event per line; the "
          "default for a --trace ending in .pfw or .pfw.gz)");
ABSL_FLAG(uint64_t, trace_max_events, dlfeed::counters::TraceOptions{}.max_events,
          "Most trace events kept (later ones are dropped and counted)");
ABSL_FLAG(uint32_t, trace_io_sample, dlfeed::counters::TraceOptions{}.io_sample_every,
          "Trace one of every N read requests");

namespace dlfeed::cli {
namespace {

using Clock = std::chrono::steady_clock;

bool given(const std::string& flag) { return flag_given(flag); }

/// Everything a run is made of, resolved from the flags (and the preset).
struct RunConfig {
  LoaderOptions loader;
  std::optional<ScaledWorkload> workload;
  uint64_t epochs = 1;
  double compute_mean_s = 0, compute_stdev_s = 0;
  bool checksum = false, quiet = false, evict = false;
  std::string trace_path;
  counters::TraceFormat trace_format = counters::TraceFormat::kChrome;
  std::string calibration_flag;  // --calibration as given ("" : look for the default file)
  std::string json_path;
};

/// The calibration a run compares against, resolved for its strategy.
struct Efficiency {
  Calibration calibration;
  PatternLimit limit;  // the calibration's pattern for the run's strategy
  bool auto_detected = false;
  /// The limit in samples/s: limit MiB/s over the mean bytes calibrate read
  /// per sample (the calibrated field's extents). Calibrate and the loader read
  /// the same extents for a sample, so samples/s compare like with like in
  /// every layout, where a MiB/s of extents would not be bytes delivered (a
  /// DLIO-layout NPZ sample's extent spans every sample of its array).
  double limit_samples_per_s() const {
    const double per_sample = calibration.dataset.samples ? static_cast<double>(calibration.dataset_bytes) /
                                                                static_cast<double>(calibration.dataset.samples)
                                                          : 0;
    return per_sample > 0 ? limit.limit_mib_per_s * 1048576.0 / per_sample : 0;
  }
};

/// What one epoch delivered, as the consumer saw it.
struct EpochResult {
  uint64_t epoch = 0, batches = 0, samples = 0, bytes = 0;
  double secs = 0, stall_s = 0;
  bool interrupted = false;  // stopped by Ctrl-C after `batches`
  LoaderStats before, after;
};

// --field-shapes and --field-dtypes: NAME=VALUE entries separated by ';'
// (spaces around each part ignored).
void apply_field_flags(LoaderOptions& o) {
  auto entries = [](const std::string& flag, const std::string& text, absl::string_view example) {
    std::vector<std::pair<std::string, std::string>> out;
    for (absl::string_view entry : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
      const size_t eq = entry.find('=');
      const std::string name(absl::StripAsciiWhitespace(entry.substr(0, eq)));
      if (eq == absl::string_view::npos || name.empty()) {
        throw Error(absl::InvalidArgumentError(
            absl::StrCat("--", flag, ": '", absl::StripAsciiWhitespace(entry), "': expected ", example)));
      }
      out.emplace_back(name, std::string(absl::StripAsciiWhitespace(entry.substr(eq + 1))));
    }
    return out;
  };
  for (const auto& [name, dims] :
       entries("field-shapes", absl::GetFlag(FLAGS_field_shapes), "NAME=DIMS, e.g. x=3,224,224 (y= for a scalar)")) {
    o.field_shapes[name] = dims == "()" ? Shape{} : value_or_throw(parse_shape(dims));
  }
  for (const auto& [name, dtype] :
       entries("field-dtypes", absl::GetFlag(FLAGS_field_dtypes), "NAME=DTYPE, e.g. x=uint8")) {
    o.field_dtypes[name] = value_or_throw(DType::parse(dtype));
  }
}

/// An output the run writes at its end, checked before it: a folder that is
/// missing or not writable is an error now, not after the epochs.
void check_output_path(const char* flag, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    throw Error(absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": is a folder; give a file name")));
  }
  const fs::path folder = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  if (!fs::is_directory(folder, ec)) {
    throw Error(
        absl::NotFoundError(absl::StrCat(flag, " ", path, ": the folder ", folder.string(), " does not exist")));
  }
  // A file is written beside its path and renamed over it (a device or a pipe
  // is written through): its folder must take a new file.
  if (::access(folder.c_str(), W_OK) != 0) {
    const int err = errno;
    struct stat st {};
    const bool through = ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
    if (!through) {
      throw Error(absl::PermissionDeniedError(
          absl::StrCat(flag, " ", path, ": the folder ", folder.string(), " is not writable: ", std::strerror(err))));
    }
  }
}

RunConfig configure(const std::vector<std::string>& args) {
  RunConfig c;
  LoaderOptions& o = c.loader;
  c.compute_mean_s = absl::GetFlag(FLAGS_compute_ms) * 1e-3;
  c.compute_stdev_s = absl::GetFlag(FLAGS_compute_stdev_ms) * 1e-3;
  if (!(c.compute_mean_s >= 0) || !(c.compute_stdev_s >= 0) || !std::isfinite(c.compute_mean_s) ||
      !std::isfinite(c.compute_stdev_s)) {
    throw Error(absl::InvalidArgumentError("--compute-ms and --compute-stdev-ms must be finite and at least 0"));
  }
  std::vector<std::string> fields = absl::StrSplit(absl::GetFlag(FLAGS_fields), ',', absl::SkipEmpty());
  if (workload_given()) {
    if (!args.empty()) {
      throw Error(absl::InvalidArgumentError("give either --workload or dataset paths, not both"));
    }
    c.workload = value_or_throw(workload_from_flags());
    o.paths = {value_or_throw(workload_dataset_from_flags(*c.workload, absl::GetFlag(FLAGS_quiet), &o.format))};
    o.fields = fields.empty() ? c.workload->base->fields : fields;
  } else {
    if (args.empty())
      throw Error(absl::InvalidArgumentError("give a dataset file or folder, or --workload (see --help)"));
    o.paths = args;
    o.format = value_or_throw(format_options_from_flags());
    o.fields = fields;
    // A folder the deepcam preset wrote (its marker says so) is one sample per file: no guess.
    if (!given("axis") && args.size() == 1 && preset_layout_of(args[0]) == WorkloadLayout::kDeepCam) {
      o.format.axis = SampleAxis::kNone;
      std::printf("dataset: written by the deepcam preset (dlfeed-workload.json): axis none, one sample per file\n");
    }
  }
  // A preset supplies the batch, compute and strategy a flag does not.
  const uint64_t batch_size = absl::GetFlag(FLAGS_batch_size);
  if (batch_size > UINT32_MAX) {
    throw Error(absl::InvalidArgumentError(absl::StrCat("--batch-size ", batch_size, ": at most ", UINT32_MAX)));
  }
  o.batch_size = static_cast<uint32_t>(batch_size);
  o.order = value_or_throw(order_spec_from_flags());
  c.evict = absl::GetFlag(FLAGS_evict);
  if (c.workload) {
    if (!given("batch_size")) o.batch_size = c.workload->batch_size;
    if (!given("compute_ms")) c.compute_mean_s = c.workload->compute_s;
    if (!given("strategy")) o.order.strategy = "global_shuffle";
    if (!given("evict")) c.evict = true;
  }
  apply_field_flags(o);
  o.drop_last_batch = absl::GetFlag(FLAGS_drop_last_batch);
  o.ragged = absl::GetFlag(FLAGS_ragged);
  apply_loader_flags(o, c.evict);
  c.trace_path = absl::GetFlag(FLAGS_trace);
  if (!counters::parse_trace_format(absl::GetFlag(FLAGS_trace_format), &c.trace_format)) {
    throw Error(absl::InvalidArgumentError(absl::StrCat("--trace-format '", absl::GetFlag(FLAGS_trace_format),
                                                        "': expected one of ", counters::trace_format_names())));
  }
  // A DFTracer file name (.pfw, .pfw.gz) asks for DFTracer's format unless --trace-format says otherwise.
  if (!given("trace_format") && (absl::EndsWith(c.trace_path, ".pfw") || absl::EndsWith(c.trace_path, ".pfw.gz"))) {
    c.trace_format = counters::TraceFormat::kDfTracer;
  }
  o.trace.enabled = !c.trace_path.empty();
  o.trace.max_events = absl::GetFlag(FLAGS_trace_max_events);
  o.trace.io_sample_every = absl::GetFlag(FLAGS_trace_io_sample);
  if (o.trace.max_events == 0 || o.trace.io_sample_every == 0) {
    throw Error(absl::InvalidArgumentError(
        absl::StrCat(o.trace.max_events == 0 ? "--trace-max-events" : "--trace-io-sample", " is at least 1, not 0")));
  }
  c.epochs = absl::GetFlag(FLAGS_epochs);
  c.checksum = absl::GetFlag(FLAGS_checksum);
  c.quiet = absl::GetFlag(FLAGS_quiet);
  c.calibration_flag = absl::GetFlag(FLAGS_calibration);
  c.json_path = absl::GetFlag(FLAGS_summary_json);
  check_output_path("--summary-json", c.json_path);
  check_output_path("--trace", c.trace_path);
  return c;
}

/// The calibration to compare with: --calibration (must be for this dataset),
/// else the default file for the dataset when it exists and matches.
std::optional<Efficiency> find_calibration(const RunConfig& c, const Loader& loader) {
  const DatasetIdentity id = identify(loader.index());
  std::string path = c.calibration_flag;
  const bool automatic = path.empty();
  if (automatic) {
    path = default_calibration_path(c.loader.paths, id);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
  }
  Efficiency e;
  e.auto_detected = automatic;
  e.calibration = value_or_throw(load_calibration(path));
  if (e.calibration.dataset.fingerprint != id.fingerprint) {
    const std::string what =
        absl::StrCat(path, ": this calibration was measured on another dataset (", e.calibration.dataset.describe(),
                     e.calibration.paths.empty() ? "" : absl::StrCat(" at ", absl::StrJoin(e.calibration.paths, " ")),
                     "), not on ", absl::StrJoin(c.loader.paths, " "), " (", id.describe(), "); run `dlfeed calibrate ",
                     absl::StrJoin(c.loader.paths, " "), "` first");
    if (!automatic) throw Error(absl::FailedPreconditionError(what));
    std::printf("note: %s\n", what.c_str());  // stale default file: no efficiency, not an error
    return std::nullopt;
  }
  const std::string& first = loader.field_names().front();  // "data": the default field, name unknown
  if (e.calibration.field != first && e.calibration.field != "data" && first != "data") {
    std::printf("note: %s measured field '%s', this run's first field is '%s': efficiency compares their rates\n",
                path.c_str(), e.calibration.field.c_str(), first.c_str());
  }
  const PatternLimit* limit = limit_for(e.calibration, c.loader.order.strategy);
  if (limit == nullptr) {
    std::printf("note: %s has no pattern for strategy %s (nor its class, %s); no efficiency reported\n", path.c_str(),
                c.loader.order.strategy.c_str(), pattern_class(c.loader.order.strategy).c_str());
    return std::nullopt;
  }
  e.limit = *limit;
  return e;
}

/// The epoch loop: start the epoch, take batches until the end, one step each.
class Trainer {
 public:
  Trainer(Loader& loader, const RunConfig& c, const ScaleOut& scale)
      : loader_(loader),
        config_(c),
        scale_(scale),
        compute_(c.compute_mean_s, c.compute_stdev_s, c.loader.order.seed) {}

  EpochResult run_epoch(uint64_t e) {
    if (config_.evict) throw_if_error(evict_pages(loader_.index().files));  // before the epoch's clock starts
    EpochResult r;
    r.epoch = e;
    r.before = loader_.stats();
    scale_.begin_epoch();  // under MPI: the ranks start the epoch together
    const auto t0 = Clock::now();
    throw_if_error(loader_.start_epoch(e));
    while (true) {
      const auto w0 = Clock::now();
      std::shared_ptr<const Batch> b = value_or_throw(loader_.next());
      r.stall_s += std::chrono::duration<double>(Clock::now() - w0).count();
      if (!b) break;
      ++r.batches;
      r.samples += b->size();
      r.bytes += b->nbytes();
      step(*b);
      if (interrupt_requested()) {
        r.interrupted = interrupted_ = true;
        break;
      }
    }
    r.secs = std::chrono::duration<double>(Clock::now() - t0).count();
    r.after = loader_.stats();
    rss_.push_back(resident_bytes());
    return r;
  }

  /// The per-step hook: what a trainer does with a batch.
  void step(const Batch& b) {
    if (config_.checksum) {
      for (size_t i = 0; i < b.size(); ++i) {
        uint64_t h = b.sample_ids[i] * 0x9E3779B97F4A7C15ull;
        for (size_t f = 0; f < b.fields.size(); ++f) h ^= hash_bytes(b.fields[f].sample(i), f + 1);
        checksum_ += h;  // a sum: independent of the order samples arrive in
      }
    }
    if (compute_.active()) {
      const double t = compute_.next();
      counters::ScopedTimer region(loader_.counters(), counters::Region::kCompute);
      const auto start = Clock::now();
      std::this_thread::sleep_until(start +
                                    std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t)));
      measured_.add(std::chrono::duration<double>(Clock::now() - start).count());
    }
    scale_.end_step(loader_.counters());  // under MPI: DLIO's barrier per step
  }

  uint64_t checksum() const { return checksum_; }
  /// Whether Ctrl-C stopped the run (in an epoch, the last one run, or between two).
  bool interrupted() const { return interrupted_; }
  void stop() { interrupted_ = true; }
  const ComputeModel& compute() const { return compute_; }
  const Moments& measured() const { return measured_; }
  /// Resident bytes at the end of each epoch (the summary JSON's rss_bytes).
  const std::vector<uint64_t>& rss() const { return rss_; }

 private:
  Loader& loader_;
  const RunConfig& config_;
  const ScaleOut& scale_;
  ComputeModel compute_;
  Moments measured_;
  uint64_t checksum_ = 0;
  bool interrupted_ = false;
  std::vector<uint64_t> rss_;
};

/// DLIO's I/O rate: samples/s x the bytes delivered per sample (every field,
/// as decoded), in MiB/s: bytes delivered over the epoch's wall time. Not the
/// samples' extents: a DLIO-layout NPZ sample's extent spans the whole array,
/// and a compressed HDF5 chunk or a TFRecord record is not what the trainer
/// gets. Unlike read_mib_per_s it leaves out what coalescing reads between
/// samples and what is read but not delivered.
double io_mib_per_s(const counters::EpochReport& e) {
  return e.wall_s > 0 ? static_cast<double>(e.bytes_delivered) / e.wall_s / 1048576.0 : 0;
}

std::optional<double> efficiency_of(const counters::EpochReport& e, const std::optional<Efficiency>& eff) {
  if (!eff || !(eff->limit_samples_per_s() > 0)) return std::nullopt;
  return e.samples_per_s / eff->limit_samples_per_s();
}

/// "the random limit 8261 samples/s (pread, 516.3 MiB/s as delivered)": the
/// limit in samples/s and in this epoch's delivered bytes per sample.
std::string limit_str(const counters::EpochReport& e, const Efficiency& eff) {
  const double per_sample = e.samples ? static_cast<double>(e.bytes_delivered) / static_cast<double>(e.samples) : 0;
  return absl::StrFormat("the %s limit %.0f samples/s (%s, %.1f MiB/s as delivered)", eff.limit.pattern,
                         eff.limit_samples_per_s(), eff.limit.limit_reader,
                         eff.limit_samples_per_s() * per_sample / 1048576.0);
}

/// The mean bytes of a sample's extents in the loader's first field (what
/// calibrate reads per sample; reported as record_bytes, not a rate's basis).
double record_bytes_of(const Loader& loader) {
  const SampleIndex& index = loader.index(0);
  const uint64_t total = index.total_read_bytes();
  return !index.empty() ? static_cast<double>(total) / static_cast<double>(index.size()) : 0;
}

void report_epoch(const RunConfig& c, const EpochResult& r, const counters::EpochReport& e,
                  const std::optional<Efficiency>& eff) {
  if (c.quiet) return;
  const double secs = r.secs;
  // Read: what the read stage got, as the AU line and the JSON count it
  // (from files, held copies, peers' job caches); LoaderStats::bytes_read
  // counts the files' only, and is the rate without counters.
  const uint64_t read = e.bytes_read ? e.bytes_read : r.after.bytes_read - r.before.bytes_read;
  // Reads and operations as the JSON counts them (copies of unpacked arrays
  // and held files too); LoaderStats' without counters.
  const bool counted = counters::kEnabled;
  const uint64_t planned = counted ? e.planned_reads : r.after.planned_reads - r.before.planned_reads;
  const uint64_t extents = counted ? e.extents : r.after.extents - r.before.extents;
  const uint64_t operations = counted ? e.io_operations : r.after.io_operations - r.before.io_operations;
  std::printf(
      "epoch %llu: %llu batches, %llu samples in %.3f s: %.0f samples/s, %.1f MiB/s delivered, "
      "%.1f MiB/s read (%llu planned reads for %llu extents, %llu I/O operations), waited %.3f s for data\n",
      static_cast<unsigned long long>(r.epoch), static_cast<unsigned long long>(r.batches),
      static_cast<unsigned long long>(r.samples), secs, secs > 0 ? r.samples / secs : 0,
      secs > 0 ? r.bytes / secs / 1048576.0 : 0, secs > 0 ? static_cast<double>(read) / secs / 1048576.0 : 0,
      static_cast<unsigned long long>(planned), static_cast<unsigned long long>(extents),
      static_cast<unsigned long long>(operations), r.stall_s);
  std::string line = absl::StrFormat(
      "  AU %.1f%%, %.0f samples/s, %.1f MiB/s (%.1f MiB/s read); I/O %.3f s hidden, %.3f s exposed; "
      "first step %.3f s",
      e.au_percent, e.samples_per_s, io_mib_per_s(e), e.read_mib_per_s, e.io_hidden_s, e.io_exposed_s, e.first_step_s);
  if (auto x = efficiency_of(e, eff)) {
    absl::StrAppend(&line, absl::StrFormat("; efficiency %.1f%% of %s", *x * 100, limit_str(e, *eff)));
  }
  std::printf("%s\n", line.c_str());
}

std::string report_json(const counters::EpochReport& e, const std::optional<Efficiency>& eff) {
  const std::optional<double> x = efficiency_of(e, eff);
  return absl::StrCat(
      "{\"epoch\":", e.epoch, ",\"au_percent\":", json_number(e.au_percent),
      ",\"samples_per_s\":", json_number(e.samples_per_s), ",\"io_mib_per_s\":", json_number(io_mib_per_s(e)),
      ",\"read_mib_per_s\":", json_number(e.read_mib_per_s),
      ",\"delivered_mib_per_s\":", json_number(e.delivered_mib_per_s), ",\"io_hidden_s\":", json_number(e.io_hidden_s),
      ",\"io_exposed_s\":", json_number(e.io_exposed_s), ",\"efficiency\":", x ? json_number(*x) : "null", "}");
}

/// The "run" section of the summary JSON (docs/workloads.md).
std::string run_json(const RunConfig& c, const Loader& loader, const Trainer& t, const counters::Snapshot& snap,
                     const std::optional<Efficiency>& eff) {
  std::vector<std::string> paths;
  for (const std::string& p : c.loader.paths) paths.push_back(json_quote(p));
  std::string workload = "null";
  if (c.workload) {
    const ScaledWorkload& w = *c.workload;
    std::vector<std::string> dims;
    for (int64_t d : w.sample_shape) dims.push_back(absl::StrCat(d));
    workload = absl::StrCat("{\"name\":", json_quote(w.base->name), ",\"scale\":", json_number(w.scale),
                            ",\"files\":", w.files, ",\"samples_per_file\":", w.samples_per_file, ",\"sample_shape\":[",
                            absl::StrJoin(dims, ","), "],\"dtype\":", json_quote(w.base->dtype.name()),
                            ",\"sample_bytes\":", w.sample_bytes(), ",\"dataset_bytes\":", w.dataset_bytes(),
                            ",\"compute_s\":", json_number(w.compute_s), "}");
  }
  const ComputeModel& m = t.compute();
  const std::string compute = absl::StrCat(
      "{\"distribution\":\"", m.stdev() > 0 ? "normal" : "fixed", "\",\"mean_ms\":", json_number(m.mean() * 1e3),
      ",\"stdev_ms\":", json_number(m.stdev() * 1e3), ",\"seed\":", c.loader.order.seed, ",\"steps\":", m.drawn().n,
      ",\"drawn_mean_ms\":", json_number(m.drawn().mean * 1e3),
      ",\"drawn_stdev_ms\":", json_number(m.drawn().stdev() * 1e3), ",\"drawn_total_s\":", json_number(m.drawn().sum),
      ",\"measured_mean_ms\":", json_number(t.measured().mean * 1e3),
      ",\"measured_stdev_ms\":", json_number(t.measured().stdev() * 1e3),
      ",\"measured_total_s\":", json_number(t.measured().sum), "}");
  std::string calibration = "null";
  if (eff) {
    const PatternLimit& p = eff->limit;
    calibration =
        absl::StrCat("{\"file\":", json_quote(eff->calibration.file), ",\"pattern\":", json_quote(p.pattern),
                     ",\"strategy\":", json_quote(p.strategy), ",\"limit_mib_per_s\":", json_number(p.limit_mib_per_s),
                     ",\"limit_samples_per_s\":", json_number(eff->limit_samples_per_s()),
                     ",\"limit_reader\":", json_quote(p.limit_reader),
                     ",\"auto_detected\":", eff->auto_detected ? "true" : "false", "}");
  }
  std::vector<std::string> epochs;
  for (size_t i = 0; i < snap.epochs.size(); ++i) {
    std::string e = report_json(snap.epochs[i], eff);
    // This process's resident memory at the epoch's end (rank 0's under MPI).
    if (i < t.rss().size()) e.insert(e.size() - 1, absl::StrCat(",\"rss_bytes\":", t.rss()[i]));
    epochs.push_back(std::move(e));
  }
  const counters::EpochReport& all = snap.total;
  return absl::StrCat(
      "{\"schema\":\"dlfeed.run/1\",\"paths\":[", absl::StrJoin(paths, ","), "],\"workload\":", workload,
      ",\"fields\":[",
      absl::StrJoin(loader.field_names(), ",",
                    [](std::string* out, const std::string& f) { out->append(json_quote(f)); }),
      "],\"strategy\":", json_quote(c.loader.order.strategy),
      ",\"pattern\":", json_quote(eff ? eff->limit.pattern : pattern_class(c.loader.order.strategy)),
      ",\"batch_size\":", c.loader.batch_size, ",\"epochs_run\":", snap.epochs.size(),
      ",\"interrupted\":", t.interrupted() ? "true" : "false", ",\"evict\":", c.evict ? "true" : "false",
      ",\"io_backend\":", json_quote(loader.stats().io_backend), ",\"io_engines\":", loader.stats().io_engines,
      ",\"threads\":", loader.stats().threads, ",\"cores\":", loader.stats().cores,
      ",\"autotune\":", loader.stats().autotune ? "true" : "false",
      ",\"autotune_changes\":", loader.stats().autotune_changes, ",\"prefetch\":", json_quote(loader.stats().prefetch),
      ",\"memory_budget\":{\"bytes\":", loader.stats().memory_budget,
      ",\"why\":", json_quote(loader.stats().memory_budget_reason), "}",
      ",\"record_bytes\":", json_number(record_bytes_of(loader)), ",\"delivered_bytes_per_sample\":",
      json_number(all.samples ? static_cast<double>(all.bytes_delivered) / static_cast<double>(all.samples) : 0),
      ",\"compute\":", compute, ",\"calibration\":", calibration, ",\"epochs\":[", absl::StrJoin(epochs, ","),
      "],\"total\":", report_json(snap.total, eff), "}");
}

#if DLFEED_WITH_S3
// `s` (the process's object-store counters), under MPI summed over the
// ranks (a collective): the job's, for its JSON.
s3::Stats job_object_store(const ScaleOut& scale, s3::Stats s) {
  constexpr uint64_t s3::Stats::*kFields[] = {&s3::Stats::requests,
                                              &s3::Stats::gets,
                                              &s3::Stats::lists,
                                              &s3::Stats::heads,
                                              &s3::Stats::bytes,
                                              &s3::Stats::retries,
                                              &s3::Stats::retry_throttled,
                                              &s3::Stats::retry_server,
                                              &s3::Stats::retry_network,
                                              &s3::Stats::retry_short,
                                              &s3::Stats::credentials_reread,
                                              &s3::Stats::failures,
                                              &s3::Stats::request_ns,
                                              &s3::Stats::cache_hits,
                                              &s3::Stats::cache_bytes,
                                              &s3::Stats::cache_kept,
                                              &s3::Stats::cache_damaged,
                                              &s3::Stats::cache_let_go,
                                              &s3::Stats::cache_old_versions};
  static_assert(sizeof(kFields) / sizeof(kFields[0]) * sizeof(uint64_t) == sizeof(s3::Stats),
                "every counter of s3::Stats is summed over the ranks");
  for (uint64_t s3::Stats::*f : kFields) s.*f = scale.sum(s.*f);
  return s;
}
#endif

void final_report(const RunConfig& c, const Loader& loader, const Trainer& t, uint64_t total_samples, double total_s,
                  const std::optional<Efficiency>& eff, const ScaleOut& scale) {
  const LoaderStats st = loader.stats();
  std::printf(
      "total: %llu samples in %.3f s (%.0f samples/s); peak in flight %.1f MiB of %.0f MiB budget; "
      "buffers %llu allocated, %llu reused; %llu batches on more I/O engines (of %u)\n",
      static_cast<unsigned long long>(total_samples), total_s, total_s > 0 ? total_samples / total_s : 0,
      st.peak_in_flight_bytes / 1048576.0, st.memory_budget / 1048576.0,
      static_cast<unsigned long long>(st.pool_allocations), static_cast<unsigned long long>(st.pool_reuses),
      static_cast<unsigned long long>(st.batches_spread), st.io_engines);
  if (c.checksum) {
    uint64_t sum = t.checksum(), samples = total_samples;
    scale.reduce_checksum(sum, samples);  // under MPI: the job's
    std::printf("checksum: %016llx over %llu samples\n", static_cast<unsigned long long>(sum),
                static_cast<unsigned long long>(samples));
  }
#if DLFEED_WITH_S3
  const s3::Stats store = s3::stats();  // printed: this process's (each rank's with --all-ranks-print)
  const s3::Stats job_store = job_object_store(scale, store);
  if (store.requests > 0) {
    std::printf(
        "object store: %llu requests (%llu ranged GETs, %llu listings, %llu HEADs), %.1f MiB; %llu retries (%llu "
        "throttled, %llu server errors, %llu network, %llu short bodies); %llu failed\n",
        static_cast<unsigned long long>(store.requests), static_cast<unsigned long long>(store.gets),
        static_cast<unsigned long long>(store.lists), static_cast<unsigned long long>(store.heads),
        store.bytes / 1048576.0, static_cast<unsigned long long>(store.retries),
        static_cast<unsigned long long>(store.retry_throttled), static_cast<unsigned long long>(store.retry_server),
        static_cast<unsigned long long>(store.retry_network), static_cast<unsigned long long>(store.retry_short),
        static_cast<unsigned long long>(store.failures));
    if (store.credentials_reread > 0) {
      std::printf("object store: credentials read again %llu times (the server refused the ones signed with)\n",
                  static_cast<unsigned long long>(store.credentials_reread));
    }
    if (store.cache_hits + store.cache_kept > 0) {
      std::printf(
          "object cache: %llu reads from it (%.1f MiB), %.1f MiB kept, %llu pieces let go for ones used sooner, %llu "
          "damaged pieces fetched again\n",
          static_cast<unsigned long long>(store.cache_hits), store.cache_bytes / 1048576.0,
          store.cache_kept / 1048576.0, static_cast<unsigned long long>(store.cache_let_go),
          static_cast<unsigned long long>(store.cache_damaged));
    }
  }
#endif
  // Under MPI the job's (rank 0), each rank's own JSON written beside it.
  const counters::Snapshot snap = scale.summary(loader, c.json_path);
  if (eff) {
    std::printf("efficiency: %.1f%% of %s, from %s%s\n", efficiency_of(snap.total, eff).value_or(0) * 100,
                limit_str(snap.total, *eff).c_str(), eff->calibration.file.c_str(),
                c.evict ? "" : "; warm page cache (no --evict), so it may exceed 100%");
    if (snap.total.au_percent > 90 && !c.quiet) {
      std::printf(
          "note: AU is %.1f%%: compute, not the loader, sets the pace; efficiency measures the loader "
          "when the run is I/O-bound (less compute)\n",
          snap.total.au_percent);
    }
  }
  std::printf("\n%s", snap.summary_table().c_str());
  if (!c.json_path.empty() && scale.is_root()) {
    std::string js = snap.to_json();
    // The counters' object with a "run" member added last: its keys stay as they are.
    if (js.empty() || js.back() != '}') throw Error(absl::InternalError("counters JSON does not end with '}'"));
    js.pop_back();
    js += absl::StrCat(",\"run\":", run_json(c, loader, t, snap, eff));
#if DLFEED_WITH_S3
    if (job_store.requests > 0) js += absl::StrCat(",\"object_store\":", s3::stats_json(job_store));
#endif
    js += scale.job_cache_json();
    js += "}\n";
    throw_if_error(write_text_file(c.json_path, js));
    std::printf("summary: %s\n", c.json_path.c_str());
  }
  if (!c.trace_path.empty()) {
    throw_if_error(loader.write_trace(scale.rank_path(c.trace_path), c.trace_format));
    std::printf("trace: %s (%s, %llu events, %llu dropped)\n", scale.rank_path(c.trace_path).c_str(),
                std::string(counters::trace_format_name(c.trace_format)).c_str(),
                static_cast<unsigned long long>(snap.trace.recorded),
                static_cast<unsigned long long>(snap.trace.dropped));
  }
}

int run_job(const std::vector<std::string>& args, ScaleOut* scale);

int run_run(const std::vector<std::string>& args) {
  const std::unique_ptr<ScaleOut> scale = ScaleOut::begin();  // MPI, staging (run_scale.h)
  try {
    return run_job(args, scale.get());
  } catch (const std::exception& e) {
    // Said here: an exception leaving with MPI up aborts the job before main() could print it.
    if (scale->distributed()) std::fprintf(stderr, "dlfeed run: error on rank %d: %s\n", scale->rank(), e.what());
    throw;
  }
}

int run_job(const std::vector<std::string>& args, ScaleOut* scale) {
  scale->agree(workload_settings());  // before rank 0 makes a preset's dataset and the others look at it
  RunConfig config = scale->root_first([&] { return configure(args); });  // a preset's dataset: made once
  scale->agree(config.loader, {{"--epochs", absl::StrCat(config.epochs)}, {"--checksum", config.checksum ? "1" : "0"}});
  scale->configure(config.loader);
  const RunConfig& c = config;
  const auto t_open = Clock::now();
  std::unique_ptr<Loader> loader = value_or_throw(Loader::create(c.loader));
  scale->trace_cache(loader->counters());  // with --cache: its remote rounds in the trace
  const double open_s = std::chrono::duration<double>(Clock::now() - t_open).count();
  const LoaderOptions& o = c.loader;
  const LoaderStats s0 = loader->stats();
  std::printf("dataset: %llu samples in %llu files; fields: %s; rank %u/%u reads %llu samples in %llu batches of %u\n",
              static_cast<unsigned long long>(loader->num_samples()),
              static_cast<unsigned long long>(loader->index().num_files()),
              absl::StrJoin(loader->field_names(), ",").c_str(), o.order.rank, o.order.world_size,
              static_cast<unsigned long long>(loader->samples_per_epoch()),
              static_cast<unsigned long long>(loader->batches_per_epoch()), o.batch_size);
  for (size_t f = 0; f < loader->field_names().size(); ++f) {  // what each field is, as read (layout, axis)
    const SampleIndex& idx = loader->index(f);
    if (idx.sources.empty()) continue;
    std::printf("field %s: %s; [%s] %s%s\n", loader->field_names()[f].c_str(), samples_per_file_str(idx).c_str(),
                idx.sources[0]->layout().c_str(), idx.sources[0]->describe().c_str(),
                idx.sources.size() > 1 ? " (the first file's)" : "");
  }
  std::printf("order: %s seed %llu; io: %s%s; prefetch: %s; route: %s; indexed in %.3f s\n", o.order.strategy.c_str(),
              static_cast<unsigned long long>(o.order.seed), s0.io_backend.c_str(),
              s0.io_fallback_reason.empty() ? "" : absl::StrCat(" (fallback: ", s0.io_fallback_reason, ")").c_str(),
              o.advanced.prefetch.str() == s0.prefetch
                  ? s0.prefetch.c_str()
                  : absl::StrCat(o.advanced.prefetch.str(), " (", s0.prefetch, ")").c_str(),
              s0.route.c_str(), open_s);
  std::printf("memory budget %.0f MiB (%s)\ndataset %s\n", s0.memory_budget / 1048576.0,
              s0.memory_budget_reason.c_str(), s0.resident_reason.c_str());
  if (!s0.unpacked_reason.empty()) std::printf("arrays %s\n", s0.unpacked_reason.c_str());
  const std::optional<Efficiency> eff = find_calibration(c, *loader);
  if (!c.quiet) {
    std::printf("compute: %s per step; cache: %s\n",
                c.compute_stdev_s > 0 ? absl::StrFormat("normal(%.3f ms, %.3f ms) truncated at 0",
                                                        c.compute_mean_s * 1e3, c.compute_stdev_s * 1e3)
                                            .c_str()
                                      : absl::StrFormat("%.3f ms", c.compute_mean_s * 1e3).c_str(),
                c.evict ? "cold (pages dropped before each epoch)" : "as it is (no --evict)");
    if (eff) {
      std::printf("calibration: %s (%s pattern: limit %.1f MiB/s of sample extents, %.0f samples/s, %s)\n",
                  eff->calibration.file.c_str(), eff->limit.pattern.c_str(), eff->limit.limit_mib_per_s,
                  eff->limit_samples_per_s(), eff->limit.limit_reader.c_str());
    }
  }

  // One process: Ctrl-C stops after the step it is in and reports what ran
  // (under MPI it ends the job as before: the ranks would stop at different
  // steps of their collectives).
  if (!scale->distributed()) catch_interrupt();
  Trainer trainer(*loader, c, *scale);
  uint64_t total_samples = 0;
  double total_s = 0;
  for (uint64_t e = 0; e < c.epochs && !trainer.interrupted(); ++e) {
    if (interrupt_requested()) {  // between epochs (or while staging waited): no new one
      std::printf("interrupted (SIGINT) before epoch %llu; the summary covers what ran\n",
                  static_cast<unsigned long long>(e));
      trainer.stop();
      break;
    }
    const EpochResult r = trainer.run_epoch(e);
    total_samples += r.samples;
    total_s += r.secs;
    // This epoch's report only: a whole snapshot per epoch costs O(epochs).
    report_epoch(c, r, loader->counters().last_epoch().value_or(counters::EpochReport{}), eff);
    if (r.interrupted) {
      // Closed, incomplete, now: the trace then has its epoch span and start.
      loader->counters().end_epoch(loader->counters().now(), false);
      std::printf("interrupted (SIGINT) in epoch %llu after %llu batches; the summary covers what ran\n",
                  static_cast<unsigned long long>(e), static_cast<unsigned long long>(r.batches));
    } else {
      scale->end_epoch(*loader, e);
    }
  }
  final_report(c, *loader, trainer, total_samples, total_s, eff, *scale);
  return trainer.interrupted() ? 128 + SIGINT : 0;
}

std::vector<FlagGroup> run_flags() {
  return {flag_group("", FLAGS_epochs, FLAGS_batch_size, FLAGS_fields, FLAGS_field_shapes, FLAGS_field_dtypes,
                     FLAGS_compute_ms, FLAGS_compute_stdev_ms, FLAGS_drop_last_batch, FLAGS_ragged, FLAGS_checksum,
                     FLAGS_quiet, FLAGS_evict, FLAGS_calibration, FLAGS_summary_json, FLAGS_trace, FLAGS_trace_format,
                     FLAGS_trace_max_events, FLAGS_trace_io_sample),
          loader_flags(),
          workload_flags(),
          format_flags(),
          order_flags(),
          scale_out_flags()};
}

}  // namespace

DLFEED_COMMAND(run,
               "emulated training: iterate a dataset or a --workload preset for N epochs with compute per step; "
               "AU, throughput, I/O breakdown, efficiency vs `calibrate`",
               "[PATH...]", run_run, run_flags);

}  // namespace dlfeed::cli
