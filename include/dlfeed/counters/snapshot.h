// SPDX-License-Identifier: Apache-2.0
// The counters' data: what each counter is, the log-scale histograms, the
// snapshot types (Distribution, CounterValue, EpochReport, Snapshot), the
// snapshot's exact binary form and the merge of one snapshot per rank into the
// job's. Header tier (dlfeed::headers; dlfeed/detail/inline.h): usable from
// #include alone, for a tool that merges or reads snapshots another process
// recorded. Recording (Counters, Span) and the text exports
// (Snapshot::to_json, Snapshot::summary_table, traces) stay in libdlfeed:
// dlfeed/counters/counters.h.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "dlfeed/detail/export.h"

#ifndef DLFEED_COUNTERS_ENABLED
#define DLFEED_COUNTERS_ENABLED 1
#endif

namespace dlfeed::inline DLFEED_ABI::counters {

/// Whether recording is compiled in (CMake option DLFEED_COUNTERS).
inline constexpr bool kEnabled = DLFEED_COUNTERS_ENABLED != 0;

/// What a counter's values measure.
enum class Unit : uint8_t { kNanoseconds, kBytes, kCount, kPercent, kPerSecond, kBytesPerSecond };
/// kSum: a total (and count of events); kDistribution: one value per event,
/// with a log-scale histogram (p50/p95/p99/max); kRate: derived per epoch.
enum class Kind : uint8_t { kSum, kDistribution, kRate };

/// The recorded counters. Distributions are also summable (sum, count).
enum class Id : uint8_t {
  kOpen,             // ns  dist  index one field's files (Loader::create), per field
  kPlan,             // ns  dist  plan a batch: ids, extents, coalescing (per batch)
  kAdmitWait,        // ns  dist  planner blocked by prefetch policy / memory budget (per batch)
  kIoLatency,        // ns  dist  one read: submitted -> completion reaped (per read request)
  kDecode,           // ns  dist  decode a batch: CRC, inflate, parse, copy into place (per batch)
  kCollate,          // ns  dist  hand a decoded batch to the consumer queue (per batch)
  kStall,            // ns  dist  consumer blocked in next() (per call)
  kCompute,          // ns  dist  user compute regions (per region)
  kStep,             // ns  dist  step to step (per step)
  kBytesRead,        // bytes sum  bytes read from files
  kIoOperations,     // count sum  I/O operations: reads handed to the backend (pieces of planned reads)
  kExtents,          // count sum  extents asked for (before coalescing)
  kReadErrors,       // count sum  reads that failed
  kBatches,          // count sum  batches delivered
  kSamples,          // count sum  samples delivered
  kBytesDelivered,   // bytes sum  decoded bytes delivered
  kIoHidden,         // ns  sum   I/O busy while a compute region ran (read time hidden)
  kIoExposed,        // ns  sum   I/O busy while the consumer stalled (read time exposed)
  kDecodeCrc,        // ns  dist  verify a record's CRC32C (per TFRecord sample)
  kDecodeInflate,    // ns  dist  inflate a deflated NPZ member or HDF5 chunk (per call)
  kDecodeParse,      // ns  dist  parse a tf.train.Example for the feature (per sample)
  kBytesReadStaged,  // bytes sum  bytes of reads handed to the backend from staged copies (loader stage option)
  kStageCopied,      // bytes sum  bytes copied into the staging folder
  kBarrier,          // ns  dist  waiting for the other ranks at the end of a step (Region::kBarrier)
  kH2d,              // ns  dist  one batch's copy to the GPU, as the device timed it (per batch; Python device=)
  kH2dBytes,         // bytes sum  bytes copied to the GPU
  kPlannedReads,     // count sum  reads planned for the batches (after coalescing, before pieces)
  kCount
};
inline constexpr size_t kNumIds = static_cast<size_t>(Id::kCount);

/// Components whose time is accounted as the union of their intervals
/// (merged across threads).
enum class Component : uint8_t { kPlan, kIo, kDecode, kCollate, kStall, kCompute, kCount };
inline constexpr size_t kNumComponents = static_cast<size_t>(Component::kCount);

/// What a counter is: its JSON name, unit, kind and a line of help.
struct DLFEED_EXPORT CounterInfo {
  const char* name;  // stable JSON field name
  Unit unit;
  Kind kind;
  const char* help;
};
DLFEED_EXPORT const CounterInfo& info(Id id);
DLFEED_EXPORT const char* component_name(Component c);
DLFEED_EXPORT const char* unit_name(Unit u);
DLFEED_EXPORT const char* kind_name(Kind k);

/// Log-scale histogram: exact below 8, then 8 buckets per power of two
/// (relative bucket width <= 12.5%, quantiles reported at bucket midpoints).
inline constexpr size_t kHistBuckets = 496;
DLFEED_EXPORT size_t bucket_of(uint64_t v);
DLFEED_EXPORT uint64_t bucket_low(size_t b);
DLFEED_EXPORT uint64_t bucket_high(size_t b);  // exclusive
namespace detail {
/// bucket_of's arithmetic, inline in every mode: the recorder calls it per event.
constexpr size_t bucket_index(uint64_t v) {
  if (v < 8) return static_cast<size_t>(v);
  const unsigned k = 63 - static_cast<unsigned>(std::countl_zero(v));  // >= 3
  const uint64_t sub = (v >> (k - 3)) & 7;
  return (k - 2) * 8 + sub;
}
}  // namespace detail

/// A sparse histogram: (bucket, events) for the non-empty buckets, ascending.
using Histogram = std::vector<std::pair<uint16_t, uint64_t>>;

/// A distribution's summary, with the histogram it was computed from (so
/// distributions of several ranks merge into exact job-wide percentiles).
struct DLFEED_EXPORT Distribution {
  uint64_t count = 0;
  uint64_t sum = 0;
  uint64_t max = 0;
  double mean = 0, p50 = 0, p95 = 0, p99 = 0;
  Histogram hist;
};

/// The summary of a histogram: mean from sum/count, p50/p95/p99 at bucket
/// midpoints (clamped to max), max = the top of the highest bucket, or
/// `max_known` when it is non-zero and lower.
DLFEED_EXPORT Distribution summarize(const Histogram& hist, uint64_t count, uint64_t sum, uint64_t max_known);
/// summarize() of a dense histogram of kHistBuckets counts (`hist` may be
/// null when `count` is 0).
DLFEED_EXPORT Distribution summarize_dense(const uint64_t* hist, uint64_t count, uint64_t sum, uint64_t max_known);

/// One counter in a snapshot: its total, events and (distributions) summary.
struct DLFEED_EXPORT CounterValue {
  Id id{};
  const char* name = "";
  Unit unit{};
  Kind kind{};
  uint64_t value = 0;  // sum (for distributions: the sum of the values)
  uint64_t count = 0;  // events
  Distribution dist;   // kDistribution only
};

/// One epoch (or the total over all epochs), from Loader::start_epoch to the
/// end of the epoch (next() returning nullptr) or, while running, to now.
struct DLFEED_EXPORT EpochReport {
  int64_t epoch = -1;  // -1: the total
  bool complete = false;
  double wall_s = 0;      // merged over ranks: the slowest rank's
  double wall_min_s = 0;  // the fastest rank's (== wall_s for one rank)
  uint64_t steps = 0, batches = 0, samples = 0;
  uint64_t bytes_read = 0, bytes_delivered = 0, io_operations = 0, extents = 0, planned_reads = 0;
  // Interval unions (seconds), merged across threads.
  double plan_s = 0, io_busy_s = 0, decode_s = 0, collate_s = 0, stall_s = 0, compute_s = 0;
  double io_hidden_s = 0;   // I/O busy during compute
  double io_exposed_s = 0;  // I/O busy during stalls
  // DLIO's AU: compute over the steps after the first / (wall - first step), percent.
  double first_step_s = 0;
  double au_percent = 0;
  // compute / (compute + stall), first step included, percent.
  double compute_share_percent = 0;
  double samples_per_s = 0;
  double read_mib_per_s = 0;       // bytes read / wall / 2^20
  double delivered_mib_per_s = 0;  // bytes delivered / wall / 2^20
  // Staging (LoaderOptions::stage): bytes of reads from staged copies (the
  // rest of bytes_read came from the source), and bytes copied to the stage.
  uint64_t bytes_read_staged = 0, bytes_staged = 0;
  // Over ranks (merge_ranks): how many, and the lowest and highest AU.
  uint32_t ranks = 1;
  double au_min_percent = 0, au_max_percent = 0;
  std::array<Distribution, kNumIds> dist{};  // per-epoch distributions (max from the histogram)
};

/// The trace buffer's state in a snapshot.
struct DLFEED_EXPORT TraceInfo {
  bool enabled = false;
  uint64_t max_events = 0;
  uint64_t recorded = 0;
  uint64_t dropped = 0;
  uint32_t io_sample_every = 1;
};

/// Everything at one moment. Values since creation or the last reset().
struct DLFEED_EXPORT Snapshot {
  bool enabled = kEnabled;
  double uptime_s = 0;
  std::vector<CounterValue> counters;  // indexed by Id
  std::vector<EpochReport> epochs;     // in start order
  EpochReport total;                   // over the epochs
  TraceInfo trace;
  /// Ranks merged into this snapshot (1 for one process), and each rank's
  /// total, in rank order (empty for one process).
  uint32_t ranks = 1;
  std::vector<EpochReport> rank_totals;

  const CounterValue& operator[](Id id) const { return counters[static_cast<size_t>(id)]; }
  /// Stable, documented JSON (docs/counters.md), schema "dlfeed.counters/1".
  /// In libdlfeed (src/counters/export_json.cc), not the header tier.
  std::string to_json() const;
  /// A human table: per epoch and total, then latency distributions (and,
  /// merged, one line per rank). In libdlfeed (src/counters/export_table.cc).
  std::string summary_table() const;
  /// Exact binary form (every field, histograms included) for sending a
  /// snapshot to another process; deserialize() reads it back in a build
  /// with the same counters.
  std::string serialize() const;
  static absl::StatusOr<Snapshot> deserialize(absl::string_view bytes);
};

/// The job's snapshot from one snapshot per rank (in rank order; each of one
/// process). Counters and per-epoch byte, sample and request figures are
/// summed; histograms are summed, so percentiles are over every rank's
/// events; rates (samples/s, MiB/s) are summed, as DLIO reports throughput;
/// wall_s is the slowest rank's (wall_min_s the fastest), steps the most any
/// rank took, interval unions and first_step_s are means over the ranks, and
/// au_percent is the mean with au_min/max_percent the extremes. Epochs are
/// matched by position and must have the same epoch numbers on every rank.
DLFEED_EXPORT absl::StatusOr<Snapshot> merge_ranks(const std::vector<Snapshot>& ranks);

}  // namespace dlfeed::counters

#include "dlfeed/detail/inline.h"
#ifdef DLFEED_HEADER_ONLY
#include "dlfeed/counters/snapshot-inl.h"
#endif
