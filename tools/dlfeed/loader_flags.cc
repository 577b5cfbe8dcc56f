// SPDX-License-Identifier: Apache-2.0
// The loader's tuning flags, shared by `dlfeed run` and `dlfeed dlio`.
#include "loader_flags.h"

#include "absl/flags/flag.h"
#include "dlfeed/error.h"
#include "dlfeed/io/io_backend.h"
#include "dlfeed/loader.h"

// Each flag's default is the C++ default of the field it sets (in its units), so the two never differ.
namespace {
const dlfeed::prefetch::CoalesceOptions kCoalesce{};
}  // namespace

ABSL_FLAG(std::string, io, std::string(dlfeed::io_kind_name(dlfeed::IoOptions{}.kind)),
          "I/O backend: auto (io_uring if it works, else thread_pool), io_uring, "
          "thread_pool, sync");
ABSL_FLAG(uint32_t, queue_depth, dlfeed::IoOptions{}.queue_depth, "io_uring queue depth");
ABSL_FLAG(uint64_t, max_in_flight_mb, dlfeed::IoOptions{}.max_bytes_in_flight >> 20,
          "io_uring: most MiB of reads in the kernel at once (0: no limit)");
ABSL_FLAG(uint32_t, io_threads, dlfeed::IoOptions{}.threads, "thread_pool backend: reader threads");
ABSL_FLAG(uint32_t, io_engines, dlfeed::AdvancedOptions{}.io_engines,
          "I/O engine threads, each with its own backend; batches go to more than the first only while it "
          "is busy on the CPU (page-cache hits). 0: from the cores the process may use (affinity and cgroup quota): 1 "
          "on 1 core, then one per core (at least 2) up to 16");
ABSL_FLAG(bool, io_spread_always, false,
          "Send batches round all --io_engines whatever their reads (to measure what spreading costs)");
ABSL_FLAG(bool, direct, dlfeed::IoOptions{}.direct, "Read with O_DIRECT (bypass the page cache)");
ABSL_FLAG(std::string, prefetch, dlfeed::AdvancedOptions{}.prefetch.str(),
          "Prefetch policy: auto (depth:8,budget:256M when samples are read, depth:8,budget:16M when the files "
          "are held in memory), off, depth:N (batches), budget:BYTES (e.g. budget:256M), or both joined by a comma");
ABSL_FLAG(uint64_t, memory_budget_mb, dlfeed::LoaderOptions{}.memory_budget >> 20,
          "Most MiB of batches in flight (reads and decoded batches); 0: a quarter of the memory the process may "
          "use (MemAvailable, cgroup memory.max, ulimit -v), shared by the job's ranks on this node, at least 256");
ABSL_FLAG(uint64_t, max_gap, kCoalesce.max_gap,
          "Coalesce extents of a file at most this many bytes apart. Not given: at most 64 KiB and at most the "
          "batch's mean extent (a read carries at most about as many bytes nobody asked for as it was asked for); "
          "given: this gap for every batch");
ABSL_FLAG(uint64_t, max_read, kCoalesce.max_read,
          "Largest read in bytes: merged reads stop growing here, longer ones go in pieces (0 or at least 4096)");
ABSL_FLAG(bool, no_coalesce, false, "One read per extent (for measuring coalescing)");
ABSL_FLAG(uint64_t, split_above, kCoalesce.split_above,
          "Buffered reads longer than this go in --split-piece pieces (more reads in flight fill more of the "
          "kernel's read-ahead on a cold cache; 0: no such split)");
ABSL_FLAG(uint64_t, split_piece, kCoalesce.split_piece, "The piece size of --split-above (0 or at least 4096)");
ABSL_FLAG(
    uint64_t, split_piece_cold, kCoalesce.split_piece_cold,
    "The piece size of --split-above while most reads miss the page cache (0: --split-piece; else at least 4096)");
ABSL_FLAG(uint64_t, large_above, kCoalesce.large_above,
          "Reads of at least this many bytes go in --large-piece pieces that kernel workers copy, so one batch's "
          "large samples spread over the cores (0: no such route)");
ABSL_FLAG(uint64_t, large_piece, kCoalesce.large_piece, "The piece size of --large-above (0 or at least 4096)");
ABSL_FLAG(bool, fadvise, dlfeed::AdvancedOptions{}.fadvise_willneed,
          "posix_fadvise(WILLNEED) each batch's reads when planned");
ABSL_FLAG(std::string, resident, std::string(dlfeed::mode_name(dlfeed::LoaderOptions{}.resident)),
          "Hold the dataset in memory: auto (when its files fit in half the memory budget: each read once, "
          "from the start on, in the order the first epoch uses them, then copies from memory), on (all read "
          "at the start, or fail saying why not), off");
ABSL_FLAG(std::string, unpack, std::string(dlfeed::mode_name(dlfeed::LoaderOptions{}.unpack)),
          "Deflated NPZ members and strided (DLIO-layout) arrays: auto (those that fit in half the memory budget, "
          "less the held files, are read once whole per epoch, inflated once, and gathered from memory), on (all of "
          "them, or an error saying why not), off (read per sample)");
ABSL_FLAG(uint32_t, threads, dlfeed::LoaderOptions{}.threads,
          "Decode threads, also spreading copies from held files when more than 2 (0: the cores the process may use, "
          "at least 2); this loader's own");

ABSL_FLAG(std::string, autotune, std::string(dlfeed::mode_name(dlfeed::LoaderOptions{}.autotune)),
          "auto (on with 4 cores or more), on: move what is left to the machine (I/O engines when --io_engines is 0, "
          "the read-ahead depth when --prefetch is auto, decode threads when --threads is 0) toward the best rate "
          "while it runs, within the memory budget; off: keep the defaults");

namespace dlfeed::cli {

void apply_loader_flags(LoaderOptions& o, bool cold) {
  o.io.kind = value_or_throw(parse_io_kind(absl::GetFlag(FLAGS_io)));
  o.io.queue_depth = absl::GetFlag(FLAGS_queue_depth);
  o.io.max_bytes_in_flight = absl::GetFlag(FLAGS_max_in_flight_mb) << 20;
  o.io.threads = absl::GetFlag(FLAGS_io_threads);
  o.advanced.io_engines = absl::GetFlag(FLAGS_io_engines);
  o.advanced.tuning.io_spread_always = absl::GetFlag(FLAGS_io_spread_always);
  o.io.direct = absl::GetFlag(FLAGS_direct);
  o.advanced.prefetch = absl::GetFlag(FLAGS_prefetch);
  o.memory_budget = absl::GetFlag(FLAGS_memory_budget_mb) << 20;
  o.advanced.coalesce.max_gap = absl::GetFlag(FLAGS_max_gap);
  o.advanced.coalesce.adaptive_gap = !flag_given("max_gap");
  o.advanced.coalesce.max_read = absl::GetFlag(FLAGS_max_read);
  o.advanced.coalesce.enabled = !absl::GetFlag(FLAGS_no_coalesce);
  o.advanced.coalesce.split_above = absl::GetFlag(FLAGS_split_above);
  o.advanced.coalesce.split_piece = absl::GetFlag(FLAGS_split_piece);
  o.advanced.coalesce.split_piece_cold = absl::GetFlag(FLAGS_split_piece_cold);
  o.advanced.coalesce.large_above = absl::GetFlag(FLAGS_large_above);
  o.advanced.coalesce.large_piece = absl::GetFlag(FLAGS_large_piece);
  o.advanced.fadvise_willneed = absl::GetFlag(FLAGS_fadvise);
  o.resident = value_or_throw(parse_mode(absl::GetFlag(FLAGS_resident), "resident"));
  // Held in memory, the dropped pages would never be read.
  if (cold && o.resident == Mode::kAuto && !flag_given("resident")) o.resident = Mode::kOff;
  o.unpack = value_or_throw(parse_mode(absl::GetFlag(FLAGS_unpack), "unpack"));
  o.threads = absl::GetFlag(FLAGS_threads);
  o.autotune = value_or_throw(parse_mode(absl::GetFlag(FLAGS_autotune), "autotune"));
}

FlagGroup loader_flags() {
  return flag_group("Loader flags", FLAGS_io, FLAGS_queue_depth, FLAGS_max_in_flight_mb, FLAGS_io_threads,
                    FLAGS_io_engines, FLAGS_io_spread_always, FLAGS_direct, FLAGS_prefetch, FLAGS_memory_budget_mb,
                    FLAGS_max_gap, FLAGS_max_read, FLAGS_no_coalesce, FLAGS_split_above, FLAGS_split_piece,
                    FLAGS_split_piece_cold, FLAGS_large_above, FLAGS_large_piece, FLAGS_fadvise, FLAGS_resident,
                    FLAGS_unpack, FLAGS_threads, FLAGS_autotune);
}

}  // namespace dlfeed::cli
