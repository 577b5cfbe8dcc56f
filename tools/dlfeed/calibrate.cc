// SPDX-License-Identifier: Apache-2.0
// dlfeed calibrate: the storage's limits for a dataset's access patterns.
// For each pattern (sequential and random reads of the dataset's own sample
// extents, or any strategy's order) and each reader (io_uring at a deep
// queue, and one thread of pread) it drops the files' cached pages and reads
// a bounded prefix of the order with dlfeed::raw_read. Prints a table and
// writes the calibration JSON that `dlfeed run` compares the loader with.
#include <cstdio>
#include <filesystem>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "calibration.h"
#include "command.h"
#include "common_format.h"
#include "dev/raw_read.h"
#include "dlfeed/error.h"
#include "dlfeed/io/object_store.h"
#include "dlfeed/order/order.h"
#include "json.h"
#include "workloads.h"

ABSL_FLAG(std::string, patterns, "sequential,random",
          "Access patterns to measure: sequential (the sequential order), random (global_shuffle), or a "
          "strategy's name (its order, with the order flags)");
ABSL_FLAG(uint32_t, qd, 32, "io_uring queue depth of the deep-queue reader");
ABSL_FLAG(double, max_mb, 256, "Most MiB read per measurement (a prefix of the order; 0: the whole order)");
ABSL_FLAG(double, max_seconds, 5, "Most seconds per measurement (0: no limit)");
ABSL_FLAG(bool, evict_only, false, "Only drop the dataset's cached pages (fdatasync + posix_fadvise DONTNEED)");

namespace dlfeed::cli {
namespace {
namespace fs = std::filesystem;

/// Drops every file's pages and returns the most bytes still resident in
/// one file right after (0 when the file system honours the hint).
absl::StatusOr<uint64_t> evict_all(const SampleIndex& index) {
  DLFEED_RETURN_IF_ERROR(evict_pages(index.files));
  uint64_t resident = 0;
  for (const std::string& f : index.files) {
    DLFEED_ASSIGN_OR_RETURN(uint64_t r, resident_bytes(f));
    resident += r;
  }
  return resident;
}

/// The dataset's paths and format options from --workload or the PATH
/// arguments (and its fields when --fields names none); false (with the
/// message printed) on a usage error.
bool resolve_dataset(const std::vector<std::string>& args, std::vector<std::string>* paths, FormatOptions* fo,
                     std::vector<std::string>* fields) {
  *paths = args;
  if (workload_given()) {
    if (!args.empty()) {
      std::fprintf(stderr, "dlfeed calibrate: give either --workload or dataset paths, not both\n");
      return false;
    }
    const ScaledWorkload w = value_or_throw(workload_from_flags());
    *paths = {value_or_throw(workload_dataset_from_flags(w, false, fo))};
    if (fields->empty()) *fields = w.base->fields;
  } else {
    if (paths->empty()) {
      std::fprintf(stderr, "dlfeed calibrate: give a dataset file or folder, or --workload (see --help)\n");
      return false;
    }
    *fo = value_or_throw(format_options_from_flags());
  }
  if (!fields->empty()) {
    fo->name = fields->front();
    fo->feature = fields->front();
  }
  return true;
}

/// The calibration's settings from the flags (field, dataset, limits per
/// measurement, seed); `spec` gets the order flags.
Calibration calibration_settings(const std::vector<std::string>& paths, const std::vector<std::string>& fields,
                                 const FormatOptions& fo, const SampleIndex& index, OrderSpec* spec) {
  Calibration c;
  c.paths = paths;
  // Named as the loader names its fields ("data": the default --name/--feature).
  c.field = fields.empty() ? (fo.format == FileFormat::kTfRecord ? fo.feature : fo.name) : fields.front();
  if (c.field.empty()) c.field = "data";
  c.dataset = identify(index);
  c.dataset_bytes += index.total_read_bytes();
  c.queue_depth = absl::GetFlag(FLAGS_qd);
  const double max_mb = absl::GetFlag(FLAGS_max_mb);
  c.max_bytes = max_mb > 0 ? static_cast<uint64_t>(max_mb * 1048576.0) : 0;
  c.max_seconds = absl::GetFlag(FLAGS_max_seconds);
  if (c.queue_depth == 0 || max_mb < 0 || c.max_seconds < 0) {
    throw Error(absl::InvalidArgumentError("--qd must be at least 1, --max-mb and --max-seconds at least 0"));
  }
  *spec = value_or_throw(order_spec_from_flags());
  c.seed = spec->seed;
  c.evicted_files = index.num_files();
  return c;
}

/// The line saying what is measured, and the table's header.
void print_header(const Calibration& c) {
  std::printf(
      "calibrating %s: %s, %s of field '%s' (%s per sample on average); cold cache, at most %s and %g s "
      "per measurement\n",
      absl::StrJoin(c.paths, " ").c_str(), c.dataset.describe().c_str(), bytes_str(c.dataset_bytes).c_str(),
      c.field.c_str(), bytes_str(c.dataset.samples ? c.dataset_bytes / c.dataset.samples : 0).c_str(),
      c.max_bytes ? absl::StrFormat("%.0f MiB", absl::GetFlag(FLAGS_max_mb)).c_str() : "the whole order",
      c.max_seconds);
  std::printf("%-12s %-16s %-14s %9s %9s %8s %9s %10s\n", "pattern", "strategy", "reader", "samples", "MiB", "seconds",
              "MiB/s", "samples/s");
}

/// One reader's read of `ids` from a cold cache, printed as a table row.
ReaderResult measure_reader(const SampleIndex& index, const std::vector<uint64_t>& ids, RawReader reader,
                            const PatternLimit& pl, Calibration* c) {
  c->resident_bytes_after_evict = std::max(c->resident_bytes_after_evict, value_or_throw(evict_all(index)));
  RawReadOptions ro;
  ro.reader = reader;
  ro.queue_depth = c->queue_depth;
  ro.max_bytes = c->max_bytes;
  ro.max_seconds = c->max_seconds;
  ReaderResult rr;
  rr.reader = std::string(raw_reader_name(reader));
  rr.queue_depth = reader == RawReader::kIoUring ? c->queue_depth : 1;
  rr.result = value_or_throw(raw_read(index, ids, ro));
  std::printf("%-12s %-16s %-14s %9llu %9.1f %8.3f %9.1f %10.0f\n", pl.pattern.c_str(), pl.strategy.c_str(),
              rr.label().c_str(), static_cast<unsigned long long>(rr.result.samples),
              static_cast<double>(rr.result.bytes) / 1048576.0, rr.result.seconds, rr.result.mib_per_s(),
              rr.result.samples_per_s());
  std::fflush(stdout);
  return rr;
}

/// Every reader on one pattern's order; its limit is the fastest reader's.
PatternLimit measure_pattern(const SampleIndex& index, const std::string& pattern, OrderSpec* spec, Calibration* c) {
  PatternLimit pl;
  pl.pattern = pattern;
  pl.strategy = pattern_strategy(pattern);
  spec->strategy = pl.strategy;
  spec->epoch = 0;
  const std::vector<uint64_t> ids = value_or_throw(rank_order(FileLayout::of(index), *spec));
  for (const RawReader reader : {RawReader::kIoUring, RawReader::kPread}) {
    ReaderResult rr = measure_reader(index, ids, reader, pl, c);
    if (rr.result.mib_per_s() > pl.limit_mib_per_s) {
      pl.limit_mib_per_s = rr.result.mib_per_s();
      pl.limit_reader = rr.label();
    }
    pl.readers.push_back(std::move(rr));
  }
  if (!(pl.limit_mib_per_s > 0)) {
    throw Error(absl::FailedPreconditionError(absl::StrCat(absl::StrJoin(c->paths, " "), ": pattern ", pattern,
                                                           " read nothing measurable (empty samples?)")));
  }
  return pl;
}

/// Prints the limits (and a note when the pages stayed cached) and writes
/// the calibration JSON to `out`.
void report_and_write(const Calibration& c, const std::string& out) {
  std::vector<std::string> limits;
  for (const PatternLimit& p : c.patterns) {
    limits.push_back(absl::StrFormat("%s %.1f MiB/s (%s)", p.pattern, p.limit_mib_per_s, p.limit_reader));
  }
  std::printf("limits: %s\n", absl::StrJoin(limits, ", ").c_str());
  if (c.resident_bytes_after_evict > 0) {
    std::printf(
        "note: %s stayed cached after dropping the pages (a file system that ignores POSIX_FADV_DONTNEED, "
        "such as tmpfs?): these are page-cache speeds, not the device's\n",
        bytes_str(c.resident_bytes_after_evict).c_str());
  }
  std::error_code ec;
  if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path(), ec);
  throw_if_error(write_text_file(out, c.to_json()));
  std::printf("calibration: %s\n", out.c_str());
}

int run_calibrate(const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  FormatOptions fo;
  std::vector<std::string> fields = absl::StrSplit(absl::GetFlag(FLAGS_fields), ',', absl::SkipEmpty());
  if (!resolve_dataset(args, &paths, &fo, &fields)) return 2;
  for (const std::string& p : paths) {
    if (is_object_url(p)) {
      std::fprintf(stderr,
                   "dlfeed calibrate: %s: an object store has no page cache to drop or device to measure here; "
                   "`dlfeed run` reads it and reports its rate and requests\n",
                   p.c_str());
      return 2;
    }
  }
  const SampleIndex index = value_or_throw(open_dataset(paths, fo));
  if (absl::GetFlag(FLAGS_evict_only)) {
    const uint64_t resident = value_or_throw(evict_all(index));
    std::printf("evicted %llu files; %llu bytes still cached%s\n", static_cast<unsigned long long>(index.num_files()),
                static_cast<unsigned long long>(resident),
                resident ? " (the file system ignores POSIX_FADV_DONTNEED?)" : "");
    return 0;
  }

  OrderSpec spec;
  Calibration c = calibration_settings(paths, fields, fo, index, &spec);
  const std::string out =
      absl::GetFlag(FLAGS_out).empty() ? default_calibration_path(paths, c.dataset) : absl::GetFlag(FLAGS_out);
  print_header(c);
  const std::vector<std::string> patterns = absl::StrSplit(absl::GetFlag(FLAGS_patterns), ',', absl::SkipEmpty());
  for (const std::string& pattern : patterns) {
    if (c.find(pattern)) continue;
    c.patterns.push_back(measure_pattern(index, pattern, &spec, &c));
  }
  if (c.patterns.empty()) throw Error(absl::InvalidArgumentError("--patterns names no pattern"));
  report_and_write(c, out);
  return 0;
}

std::vector<FlagGroup> calibrate_flags() {
  return {flag_group("", FLAGS_patterns, FLAGS_fields, FLAGS_qd, FLAGS_max_mb, FLAGS_max_seconds, FLAGS_evict_only,
                     FLAGS_out),
          workload_flags(), format_flags(), order_flags()};
}

}  // namespace

DLFEED_COMMAND(calibrate,
               "measure the storage's limits for a dataset's access patterns (cold cache); `run` reports "
               "efficiency against them",
               "[PATH...]", run_calibrate, calibrate_flags);

}  // namespace dlfeed::cli
