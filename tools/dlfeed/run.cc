// dlfeed run: iterate a dataset for N epochs through the loader, with an
// optional emulated compute time per step, and report throughput; with
// --checksum, an order-independent checksum of every byte delivered, so two
// backends or strategies can be compared from outside. Prints the built-in
// counters' summary table (docs/counters.md); --summary-json and --trace
// write the machine-readable summary and the trace events.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "command.h"
#include "common_format.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/error.h"
#include "dlfeed/loader.h"

ABSL_FLAG(uint64_t, epochs, 1, "Epochs to run");
ABSL_FLAG(double, compute_ms, 0.0, "Emulated compute per step (batch), in milliseconds");
ABSL_FLAG(std::string, fields, "",
          "Comma-separated fields of a sample (NPZ members, HDF5 datasets, TFRecord features), e.g. x,y; "
          "default: the one --name/--feature selects");
ABSL_FLAG(std::string, io, "auto", "I/O backend: auto (io_uring if it works, else thread_pool), io_uring, "
                                   "thread_pool, sync");
ABSL_FLAG(uint32_t, queue_depth, 64, "io_uring queue depth");
ABSL_FLAG(uint64_t, max_in_flight_mb, 16, "io_uring: most MiB of reads in the kernel at once (0: no limit)");
ABSL_FLAG(uint32_t, io_threads, 4, "thread_pool backend: reader threads");
ABSL_FLAG(bool, direct, false, "Read with O_DIRECT (bypass the page cache)");
ABSL_FLAG(std::string, prefetch, "depth:8,budget:256M",
          "Prefetch policy: off, depth:N (batches), budget:BYTES (e.g. budget:256M), or both joined by a comma");
ABSL_FLAG(uint64_t, memory_budget_mb, 1024, "Most MiB of batches in flight (reads and decoded batches)");
ABSL_FLAG(uint64_t, max_gap, 64 * 1024, "Coalesce extents of a file at most this many bytes apart");
ABSL_FLAG(uint64_t, max_read, 4 << 20, "Largest read in bytes: merged reads stop growing here, longer ones go in pieces");
ABSL_FLAG(bool, no_coalesce, false, "One read per extent (for measuring coalescing)");
ABSL_FLAG(bool, fadvise, false, "posix_fadvise(WILLNEED) each batch's reads when planned");
ABSL_FLAG(uint32_t, threads, 0, "Decode threads (0: the machine's cores, at least 2)");
ABSL_FLAG(bool, drop_last_batch, false, "Drop a rank's last partial batch");
ABSL_FLAG(bool, checksum, false, "Print an order-independent checksum of every sample delivered");
ABSL_FLAG(bool, quiet, false, "Print only the summary lines");
ABSL_FLAG(std::string, summary_json, "", "Write the counters' summary (JSON, docs/counters.md) to this file");
ABSL_FLAG(std::string, trace, "", "Record trace events and write them to this file");
ABSL_FLAG(std::string, trace_format, "chrome",
          "Trace format: chrome (Chrome trace JSON, opens in Perfetto) or dftracer (one event per line)");
ABSL_FLAG(uint64_t, trace_max_events, 500000, "Most trace events kept (later ones are dropped and counted)");
ABSL_FLAG(uint32_t, trace_io_sample, 1, "Trace one of every N read requests");

namespace dlfeed::cli {
namespace {

// A fast 64-bit hash of a byte string (8 bytes at a time), stable across
// runs and machines of the same endianness.
uint64_t hash_bytes(std::span<const std::byte> b, uint64_t seed) {
  uint64_t h = seed ^ (b.size() * 0x9E3779B97F4A7C15ull);
  size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    uint64_t v;
    std::memcpy(&v, b.data() + i, 8);
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  if (i < b.size()) std::memcpy(&tail, b.data() + i, b.size() - i);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  return h ^ (h >> 31);
}

int run_run(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fprintf(stderr, "dlfeed run: give a dataset file or folder (see --help)\n");
    return 2;
  }
  LoaderOptions o;
  o.paths = args;
  o.format = value_or_throw(format_options_from_flags());
  const std::string fields = absl::GetFlag(FLAGS_fields);
  if (!fields.empty()) o.fields = absl::StrSplit(fields, ',', absl::SkipEmpty());
  o.batch_size = static_cast<uint32_t>(absl::GetFlag(FLAGS_batch_size));
  o.drop_last_batch = absl::GetFlag(FLAGS_drop_last_batch);
  o.order = value_or_throw(order_spec_from_flags());
  o.io.kind = value_or_throw(parse_io_kind(absl::GetFlag(FLAGS_io)));
  o.io.queue_depth = absl::GetFlag(FLAGS_queue_depth);
  o.io.max_bytes_in_flight = absl::GetFlag(FLAGS_max_in_flight_mb) << 20;
  o.io.threads = absl::GetFlag(FLAGS_io_threads);
  o.io.direct = absl::GetFlag(FLAGS_direct);
  o.prefetch = absl::GetFlag(FLAGS_prefetch);
  o.memory_budget = absl::GetFlag(FLAGS_memory_budget_mb) << 20;
  o.coalesce.max_gap = absl::GetFlag(FLAGS_max_gap);
  o.coalesce.max_read = absl::GetFlag(FLAGS_max_read);
  o.coalesce.enabled = !absl::GetFlag(FLAGS_no_coalesce);
  o.fadvise_willneed = absl::GetFlag(FLAGS_fadvise);
  o.threads = absl::GetFlag(FLAGS_threads);
  const std::string trace_path = absl::GetFlag(FLAGS_trace);
  counters::TraceFormat trace_format = counters::TraceFormat::kChrome;
  if (!counters::parse_trace_format(absl::GetFlag(FLAGS_trace_format), &trace_format)) {
    std::fprintf(stderr, "dlfeed run: --trace-format must be chrome or dftracer, not '%s'\n",
                 absl::GetFlag(FLAGS_trace_format).c_str());
    return 2;
  }
  o.trace.enabled = !trace_path.empty();
  o.trace.max_events = std::max<uint64_t>(1, absl::GetFlag(FLAGS_trace_max_events));
  o.trace.io_sample_every = std::max<uint32_t>(1, absl::GetFlag(FLAGS_trace_io_sample));
  const bool quiet = absl::GetFlag(FLAGS_quiet);
  const bool checksum = absl::GetFlag(FLAGS_checksum);
  const auto compute = std::chrono::duration<double, std::milli>(absl::GetFlag(FLAGS_compute_ms));

  const auto t_open = std::chrono::steady_clock::now();
  std::unique_ptr<Loader> loader = value_or_throw(Loader::create(o));
  const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_open).count();
  const LoaderStats s0 = loader->stats();
  std::printf("dataset: %llu samples in %llu files; fields: %s; rank %u/%u reads %llu samples in %llu batches of %u\n",
              static_cast<unsigned long long>(loader->num_samples()),
              static_cast<unsigned long long>(loader->index().num_files()),
              absl::StrJoin(loader->field_names(), ",").c_str(), o.order.rank, o.order.world_size,
              static_cast<unsigned long long>(loader->samples_per_epoch()),
              static_cast<unsigned long long>(loader->batches_per_epoch()), o.batch_size);
  std::printf("order: %s seed %llu; io: %s%s; prefetch: %s; indexed in %.3f s\n", o.order.strategy.c_str(),
              static_cast<unsigned long long>(o.order.seed), s0.io_backend.c_str(),
              s0.io_fallback_reason.empty() ? "" : absl::StrCat(" (fallback: ", s0.io_fallback_reason, ")").c_str(),
              o.prefetch.c_str(), open_s);

  uint64_t sum = 0;
  uint64_t total_samples = 0;
  double total_s = 0;
  for (uint64_t e = 0; e < absl::GetFlag(FLAGS_epochs); ++e) {
    const LoaderStats before = loader->stats();
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t batches = 0, samples = 0, bytes = 0;
    double stall_s = 0;
    throw_if_error(loader->start_epoch(e));
    while (true) {
      const auto w0 = std::chrono::steady_clock::now();
      std::shared_ptr<const Batch> b = value_or_throw(loader->next());
      stall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      if (!b) break;
      ++batches;
      samples += b->size();
      bytes += b->nbytes();
      if (checksum) {
        for (size_t i = 0; i < b->size(); ++i) {
          uint64_t h = b->sample_ids[i] * 0x9E3779B97F4A7C15ull;
          for (size_t f = 0; f < b->fields.size(); ++f) h ^= hash_bytes(b->fields[f].sample(i), f + 1);
          sum += h;  // a sum: independent of the order samples arrive in
        }
      }
      if (compute.count() > 0) {
        counters::ScopedTimer region(loader->counters(), counters::Region::kCompute);
        std::this_thread::sleep_for(compute);
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const LoaderStats after = loader->stats();
    total_samples += samples;
    total_s += secs;
    if (!quiet) {
      std::printf(
          "epoch %llu: %llu batches, %llu samples in %.3f s: %.0f samples/s, %.1f MiB/s delivered, "
          "%.1f MiB/s read (%llu reads for %llu extents), waited %.3f s for data\n",
          static_cast<unsigned long long>(e), static_cast<unsigned long long>(batches),
          static_cast<unsigned long long>(samples), secs, secs > 0 ? samples / secs : 0,
          secs > 0 ? bytes / secs / 1048576.0 : 0,
          secs > 0 ? (after.bytes_read - before.bytes_read) / secs / 1048576.0 : 0,
          static_cast<unsigned long long>(after.read_requests - before.read_requests),
          static_cast<unsigned long long>(after.extents - before.extents), stall_s);
    }
  }
  const LoaderStats st = loader->stats();
  std::printf("total: %llu samples in %.3f s (%.0f samples/s); peak in flight %.1f MiB of %.0f MiB budget; "
              "buffers %llu allocated, %llu reused\n",
              static_cast<unsigned long long>(total_samples), total_s, total_s > 0 ? total_samples / total_s : 0,
              st.peak_in_flight_bytes / 1048576.0, o.memory_budget / 1048576.0,
              static_cast<unsigned long long>(st.pool_allocations), static_cast<unsigned long long>(st.pool_reuses));
  if (checksum) std::printf("checksum: %016llx over %llu samples\n", static_cast<unsigned long long>(sum),
                            static_cast<unsigned long long>(total_samples));
  const counters::Snapshot snap = loader->counters_snapshot();
  std::printf("\n%s", snap.summary_table().c_str());
  const std::string json_path = absl::GetFlag(FLAGS_summary_json);
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "wb");
    if (!f) throw_if_error(absl::NotFoundError(absl::StrCat(json_path, ": cannot open for writing")));
    const std::string js = snap.to_json() + "\n";
    const bool ok = std::fwrite(js.data(), 1, js.size(), f) == js.size();
    if (std::fclose(f) != 0 || !ok) throw_if_error(absl::DataLossError(absl::StrCat(json_path, ": write failed")));
    std::printf("summary: %s\n", json_path.c_str());
  }
  if (!trace_path.empty()) {
    throw_if_error(loader->write_trace(trace_path, trace_format));
    std::printf("trace: %s (%s, %llu events, %llu dropped)\n", trace_path.c_str(),
                std::string(counters::trace_format_name(trace_format)).c_str(),
                static_cast<unsigned long long>(snap.trace.recorded),
                static_cast<unsigned long long>(snap.trace.dropped));
  }
  return 0;
}

}  // namespace

DLFEED_COMMAND(run, "iterate a dataset through the loader for N epochs; throughput, and --checksum", run_run);

}  // namespace dlfeed::cli
