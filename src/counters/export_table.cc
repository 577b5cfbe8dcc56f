// SPDX-License-Identifier: Apache-2.0
// The snapshot as a human table (Snapshot::summary_table).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "internal.h"

namespace dlfeed::inline DLFEED_ABI::counters {

std::string Snapshot::summary_table() const {
  std::string s;
  if (!enabled) return "counters: compiled out (DLFEED_COUNTERS=OFF)\n";
  absl::StrAppend(&s, absl::StrFormat("%-6s %8s %6s %9s %10s %10s %8s %9s %8s %9s %8s %6s\n", "epoch", "wall_s",
                                      "steps", "samples", "samples/s", "read_MiB/s", "stall_s", "compute_s", "io_busy",
                                      "io_hidden", "decode_s", "AU%"));
  auto row = [&](const EpochReport& e) {
    const std::string name = e.epoch < 0 ? "total" : absl::StrCat(e.epoch, e.complete ? "" : "*");
    absl::StrAppend(&s, absl::StrFormat("%-6s %8.3f %6d %9d %10.0f %10.1f %8.3f %9.3f %8.3f %9.3f %8.3f %6.1f\n", name,
                                        e.wall_s, e.steps, e.samples, e.samples_per_s, e.read_mib_per_s, e.stall_s,
                                        e.compute_s, e.io_busy_s, e.io_hidden_s, e.decode_s, e.au_percent));
  };
  if (ranks > 1) {
    absl::StrAppend(&s, absl::StrFormat("(%d ranks: samples, rates and bytes summed; wall_s the slowest rank's; "
                                        "times and AU%% the mean over ranks)\n",
                                        ranks));
  }
  for (const EpochReport& e : epochs) row(e);
  if (!epochs.empty()) row(total);
  if (ranks > 1) {
    absl::StrAppend(&s, absl::StrFormat("AU%% over ranks: mean %.1f, min %.1f, max %.1f; wall_s min %.3f, max %.3f\n",
                                        total.au_percent, total.au_min_percent, total.au_max_percent, total.wall_min_s,
                                        total.wall_s));
    absl::StrAppend(&s, absl::StrFormat("%-6s %8s %6s %9s %10s %10s %8s %9s %8s %9s %8s %6s\n", "rank", "wall_s",
                                        "steps", "samples", "samples/s", "read_MiB/s", "stall_s", "compute_s",
                                        "io_busy", "io_hidden", "decode_s", "AU%"));
    for (size_t r = 0; r < rank_totals.size(); ++r) {
      const EpochReport& e = rank_totals[r];
      absl::StrAppend(&s, absl::StrFormat("%-6d %8.3f %6d %9d %10.0f %10.1f %8.3f %9.3f %8.3f %9.3f %8.3f %6.1f\n", r,
                                          e.wall_s, e.steps, e.samples, e.samples_per_s, e.read_mib_per_s, e.stall_s,
                                          e.compute_s, e.io_busy_s, e.io_hidden_s, e.decode_s, e.au_percent));
    }
  }
  if (total.bytes_read_staged > 0 || total.bytes_staged > 0) {
    for (const EpochReport& e : epochs) {
      const uint64_t src = e.bytes_read > e.bytes_read_staged ? e.bytes_read - e.bytes_read_staged : 0;
      absl::StrAppend(&s, absl::StrFormat("staging, epoch %d: read %.1f MiB from staged copies (%.0f%%), %.1f MiB from "
                                          "the source; %.1f MiB copied to the stage\n",
                                          e.epoch, e.bytes_read_staged / 1048576.0,
                                          e.bytes_read ? 100.0 * e.bytes_read_staged / e.bytes_read : 0.0,
                                          src / 1048576.0, e.bytes_staged / 1048576.0));
    }
  }
  const auto& br = (*this)[Id::kBytesRead];
  const auto& ops = (*this)[Id::kIoOperations];
  const auto& rq = (*this)[Id::kPlannedReads];
  const auto& ex = (*this)[Id::kExtents];
  absl::StrAppend(
      &s, absl::StrFormat("read %.1f MiB in %d planned reads for %d extents (%d coalesced away), done as %d "
                          "I/O operations%s\n",
                          br.value / 1048576.0, rq.value, ex.value, ex.value > rq.value ? ex.value - rq.value : 0,
                          ops.value, epochs.empty() || total.complete ? "" : "; * = epoch not complete"));
  absl::StrAppend(&s, absl::StrFormat("%-14s %9s %9s %9s %9s %9s %9s %9s\n", "latency", "count", "mean_ms", "p50_ms",
                                      "p95_ms", "p99_ms", "max_ms", "total_s"));
  for (const CounterValue& c : counters) {
    if (c.kind != Kind::kDistribution || c.count == 0) continue;
    std::string name(c.name);
    if (name.size() > 3 && name.substr(name.size() - 3) == "_ns") name.resize(name.size() - 3);
    absl::StrAppend(&s, absl::StrFormat("%-14s %9d %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", name, c.count,
                                        c.dist.mean * 1e-6, c.dist.p50 * 1e-6, c.dist.p95 * 1e-6, c.dist.p99 * 1e-6,
                                        c.dist.max * 1e-6, c.value * 1e-9));
  }
  if (trace.enabled || trace.max_events) {
    absl::StrAppend(&s, absl::StrFormat("trace: %d events recorded, %d dropped (cap %d, 1 in %d reads)\n",
                                        trace.recorded, trace.dropped, trace.max_events, trace.io_sample_every));
  }
  return s;
}

}  // namespace dlfeed::counters
