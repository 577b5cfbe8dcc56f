// SPDX-License-Identifier: Apache-2.0
// The snapshot as JSON, schema "dlfeed.counters/1" (docs/counters.md).
#include "absl/strings/str_cat.h"
#include "dlfeed/detail/json.h"
#include "internal.h"

namespace dlfeed::inline DLFEED_ABI::counters {

namespace {

std::string num(double v) { return dlfeed::detail::json_number(v); }

// "hist":[[low,count],...]: the non-empty buckets by their lower bound.
std::string hist_json(const Histogram& h) {
  std::string s = ",\"hist\":[";
  for (size_t i = 0; i < h.size(); ++i)
    absl::StrAppend(&s, i ? "," : "", "[", bucket_low(h[i].first), ",", h[i].second, "]");
  s += "]";
  return s;
}

std::string dist_json(const Distribution& d) {
  return absl::StrCat("{\"count\":", d.count, ",\"sum\":", d.sum, ",\"mean\":", num(d.mean), ",\"p50\":", num(d.p50),
                      ",\"p95\":", num(d.p95), ",\"p99\":", num(d.p99), ",\"max\":", d.max, hist_json(d.hist), "}");
}

std::string epoch_json(const EpochReport& e) {
  std::string s = absl::StrCat(
      "{\"epoch\":", e.epoch, ",\"complete\":", e.complete ? "true" : "false", ",\"wall_s\":", num(e.wall_s),
      ",\"steps\":", e.steps, ",\"batches\":", e.batches, ",\"samples\":", e.samples, ",\"bytes_read\":", e.bytes_read,
      ",\"bytes_delivered\":", e.bytes_delivered, ",\"extents\":", e.extents, ",\"planned_reads\":", e.planned_reads,
      ",\"coalesced_extents\":", e.extents > e.planned_reads ? e.extents - e.planned_reads : 0,
      ",\"io_operations\":", e.io_operations);
  absl::StrAppend(
      &s, ",\"plan_s\":", num(e.plan_s), ",\"io_busy_s\":", num(e.io_busy_s), ",\"decode_s\":", num(e.decode_s),
      ",\"collate_s\":", num(e.collate_s), ",\"stall_s\":", num(e.stall_s), ",\"compute_s\":", num(e.compute_s),
      ",\"io_hidden_s\":", num(e.io_hidden_s), ",\"io_exposed_s\":", num(e.io_exposed_s),
      ",\"first_step_s\":", num(e.first_step_s), ",\"au_percent\":", num(e.au_percent),
      ",\"compute_share_percent\":", num(e.compute_share_percent), ",\"samples_per_s\":", num(e.samples_per_s),
      ",\"read_mib_per_s\":", num(e.read_mib_per_s), ",\"delivered_mib_per_s\":", num(e.delivered_mib_per_s),
      ",\"bytes_read_staged\":", e.bytes_read_staged, ",\"bytes_staged\":", e.bytes_staged, ",\"ranks\":", e.ranks,
      ",\"wall_min_s\":", num(e.wall_min_s), ",\"au_min_percent\":", num(e.au_min_percent),
      ",\"au_max_percent\":", num(e.au_max_percent), ",\"latency\":{");
  bool first = true;
  for (size_t i = 0; i < kNumIds; ++i) {
    const CounterInfo& ci = info(static_cast<Id>(i));
    if (ci.kind != Kind::kDistribution) continue;
    absl::StrAppend(&s, first ? "" : ",", "\"", ci.name, "\":", dist_json(e.dist[i]));
    first = false;
  }
  s += "}}";
  return s;
}

}  // namespace

std::string Snapshot::to_json() const {
  std::string s = absl::StrCat("{\"schema\":\"dlfeed.counters/1\",\"enabled\":", enabled ? "true" : "false",
                               ",\"uptime_s\":", num(uptime_s), ",\"counters\":{");
  for (size_t i = 0; i < counters.size(); ++i) {
    const CounterValue& c = counters[i];
    absl::StrAppend(&s, i ? "," : "", "\"", c.name, "\":{\"unit\":\"", unit_name(c.unit), "\",\"kind\":\"",
                    kind_name(c.kind), "\",\"value\":", c.value, ",\"count\":", c.count);
    if (c.kind == Kind::kDistribution) {
      absl::StrAppend(&s, ",\"mean\":", num(c.dist.mean), ",\"p50\":", num(c.dist.p50), ",\"p95\":", num(c.dist.p95),
                      ",\"p99\":", num(c.dist.p99), ",\"max\":", c.dist.max, hist_json(c.dist.hist));
    }
    s += "}";
  }
  s += "},\"epochs\":[";
  for (size_t i = 0; i < epochs.size(); ++i) absl::StrAppend(&s, i ? "," : "", epoch_json(epochs[i]));
  absl::StrAppend(&s, "],\"total\":", epoch_json(total), ",\"trace\":{\"enabled\":", trace.enabled ? "true" : "false",
                  ",\"max_events\":", trace.max_events, ",\"recorded\":", trace.recorded,
                  ",\"dropped\":", trace.dropped, ",\"io_sample_every\":", trace.io_sample_every, "},\"ranks\":", ranks,
                  ",\"per_rank\":[");
  for (size_t r = 0; r < rank_totals.size(); ++r) {
    absl::StrAppend(&s, r ? "," : "", "{\"rank\":", r, ",\"total\":", epoch_json(rank_totals[r]), "}");
  }
  s += "]}";
  return s;
}

}  // namespace dlfeed::counters
