// SPDX-License-Identifier: Apache-2.0
// The bodies of dlfeed/counters/snapshot.h (header tier: see
// dlfeed/detail/inline.h): what each counter is, the histograms, the
// snapshot's exact binary form (serialize/deserialize) and the merge of one
// snapshot per rank into the job's (merge_ranks). No MPI here: dlfeed::mpi
// moves the bytes, this file gives them meaning.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "dlfeed/counters/snapshot.h"
#include "dlfeed/detail/inline.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI::counters {

// What each counter is (constant tables: one copy however the header is used)

DLFEED_INLINE const CounterInfo& info(Id id) {
  static constexpr CounterInfo kInfo[kNumIds] = {
      {"open_ns", Unit::kNanoseconds, Kind::kDistribution, "index one field's files at Loader::create"},
      {"plan_ns", Unit::kNanoseconds, Kind::kDistribution, "plan a batch: ids, extents, coalescing"},
      {"admit_wait_ns", Unit::kNanoseconds, Kind::kDistribution,
       "planner blocked by the prefetch policy or the memory budget"},
      {"io_latency_ns", Unit::kNanoseconds, Kind::kDistribution, "one read request, submitted to completion reaped"},
      {"decode_ns", Unit::kNanoseconds, Kind::kDistribution, "decode a batch: CRC, inflate, parse, copy into place"},
      {"collate_ns", Unit::kNanoseconds, Kind::kDistribution, "hand a decoded batch to the consumer"},
      {"stall_ns", Unit::kNanoseconds, Kind::kDistribution, "consumer blocked in next() waiting for a batch"},
      {"compute_ns", Unit::kNanoseconds, Kind::kDistribution, "user compute regions (ScopedTimer)"},
      {"step_ns", Unit::kNanoseconds, Kind::kDistribution, "one training step, boundary to boundary"},
      {"bytes_read", Unit::kBytes, Kind::kSum, "bytes read from files"},
      {"io_operations", Unit::kCount, Kind::kSum,
       "I/O operations completed: reads the backend did (pieces of planned reads)"},
      {"extents", Unit::kCount, Kind::kSum, "extents asked for (before coalescing)"},
      {"read_errors", Unit::kCount, Kind::kSum, "read requests that failed"},
      {"batches", Unit::kCount, Kind::kSum, "batches delivered to the consumer"},
      {"samples", Unit::kCount, Kind::kSum, "samples delivered to the consumer"},
      {"bytes_delivered", Unit::kBytes, Kind::kSum, "decoded bytes delivered to the consumer"},
      {"io_hidden_ns", Unit::kNanoseconds, Kind::kSum, "I/O busy while a compute region ran"},
      {"io_exposed_ns", Unit::kNanoseconds, Kind::kSum, "I/O busy while the consumer stalled"},
      {"decode_crc_ns", Unit::kNanoseconds, Kind::kDistribution, "verify a TFRecord record's CRC32C (per sample)"},
      {"decode_inflate_ns", Unit::kNanoseconds, Kind::kDistribution,
       "inflate a deflated NPZ member or HDF5 chunk (per call)"},
      {"decode_parse_ns", Unit::kNanoseconds, Kind::kDistribution,
       "parse a tf.train.Example for the sample's feature (per sample)"},
      {"bytes_read_staged", Unit::kBytes, Kind::kSum, "bytes of reads from staged copies (the rest: from the source)"},
      {"stage_copied_bytes", Unit::kBytes, Kind::kSum, "bytes copied into the staging folder"},
      {"barrier_ns", Unit::kNanoseconds, Kind::kDistribution,
       "waiting for the other ranks at the end of a step (emulated all-reduce)"},
      {"h2d_ns", Unit::kNanoseconds, Kind::kDistribution,
       "copy a batch to the GPU, start to end as the device timed it (Python device=)"},
      {"h2d_bytes", Unit::kBytes, Kind::kSum, "bytes copied to the GPU (Python device=)"},
      {"planned_reads", Unit::kCount, Kind::kSum, "reads planned for the batches (after coalescing, before pieces)"},
  };
  return kInfo[static_cast<size_t>(id)];
}
DLFEED_INLINE const char* component_name(Component c) {
  static constexpr const char* kNames[kNumComponents] = {"plan", "io", "decode", "collate", "stall", "compute"};
  return kNames[static_cast<size_t>(c)];
}
DLFEED_INLINE const char* unit_name(Unit u) {
  switch (u) {
    case Unit::kNanoseconds: return "ns";
    case Unit::kBytes: return "bytes";
    case Unit::kCount: return "count";
    case Unit::kPercent: return "percent";
    case Unit::kPerSecond: return "1/s";
    case Unit::kBytesPerSecond: return "bytes/s";
  }
  return "?";
}
DLFEED_INLINE const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kSum: return "sum";
    case Kind::kDistribution: return "distribution";
    case Kind::kRate: return "rate";
  }
  return "?";
}

// Histograms

DLFEED_INLINE size_t bucket_of(uint64_t v) { return detail::bucket_index(v); }
DLFEED_INLINE uint64_t bucket_low(size_t b) {
  if (b < 8) return b;
  const unsigned k = static_cast<unsigned>(b / 8 + 2);
  return (8 + b % 8) << (k - 3);
}
DLFEED_INLINE uint64_t bucket_high(size_t b) {
  if (b < 8) return b + 1;
  if (b + 1 >= kHistBuckets) return UINT64_MAX;
  return bucket_low(b + 1);
}

DLFEED_INLINE Distribution summarize_dense(const uint64_t* hist, uint64_t count, uint64_t sum, uint64_t max_known) {
  Distribution d;
  d.count = count;
  d.sum = sum;
  if (count == 0) return d;
  d.mean = static_cast<double>(sum) / static_cast<double>(count);
  uint64_t total = 0;
  size_t top = 0;
  for (size_t b = 0; b < kHistBuckets; ++b) {
    if (hist[b]) {
      total += hist[b];
      top = b;
      d.hist.emplace_back(static_cast<uint16_t>(b), hist[b]);
    }
  }
  uint64_t mx = bucket_high(top) - 1;
  if (max_known) mx = std::min(mx, max_known);
  d.max = mx;
  if (total == 0) return d;
  auto q = [&](double p) -> double {
    const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(p * static_cast<double>(total))));
    uint64_t seen = 0;
    for (size_t b = 0; b < kHistBuckets; ++b) {
      seen += hist[b];
      if (seen >= rank) {
        if (b < 8) return static_cast<double>(b);
        const double mid = (static_cast<double>(bucket_low(b)) + static_cast<double>(bucket_high(b))) / 2;
        return std::min(mid, static_cast<double>(mx));
      }
    }
    return static_cast<double>(mx);
  };
  d.p50 = q(0.50);
  d.p95 = q(0.95);
  d.p99 = q(0.99);
  return d;
}

DLFEED_INLINE Distribution summarize(const Histogram& hist, uint64_t count, uint64_t sum, uint64_t max_known) {
  if (count == 0) return summarize_dense(nullptr, 0, sum, max_known);
  std::vector<uint64_t> dense(kHistBuckets, 0);
  for (const auto& [b, n] : hist) {
    if (b < kHistBuckets) dense[b] += n;
  }
  return summarize_dense(dense.data(), count, sum, max_known);
}

// Snapshots across processes

namespace snapshot_detail {
DLFEED_DETAIL_BEGIN

inline constexpr char kMagic[4] = {'d', 'l', 'f', 'S'};
inline constexpr uint8_t kVersion = 1;

class Writer {
 public:
  void u8(uint8_t v) { s_.push_back(static_cast<char>(v)); }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      s_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    s_.push_back(static_cast<char>(v));
  }
  void f64(double d) {
    uint64_t v = std::bit_cast<uint64_t>(d);
    for (int i = 0; i < 8; ++i) s_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void dist(const Distribution& d) {
    varint(d.count);
    varint(d.sum);
    varint(d.max);
    f64(d.mean);
    f64(d.p50);
    f64(d.p95);
    f64(d.p99);
    varint(d.hist.size());
    for (const auto& [b, n] : d.hist) {
      varint(b);
      varint(n);
    }
  }
  void report(const EpochReport& e) {
    varint(static_cast<uint64_t>(e.epoch + 1));  // -1 (the total) is 0
    u8(e.complete ? 1 : 0);
    for (double d : {e.wall_s, e.wall_min_s}) f64(d);
    for (uint64_t v : {e.steps, e.batches, e.samples, e.bytes_read, e.bytes_delivered, e.io_operations, e.extents,
                       e.planned_reads, e.bytes_read_staged, e.bytes_staged}) {
      varint(v);
    }
    for (double d : {e.plan_s, e.io_busy_s, e.decode_s, e.collate_s, e.stall_s, e.compute_s, e.io_hidden_s,
                     e.io_exposed_s, e.first_step_s, e.au_percent, e.compute_share_percent, e.samples_per_s,
                     e.read_mib_per_s, e.delivered_mib_per_s, e.au_min_percent, e.au_max_percent}) {
      f64(d);
    }
    varint(e.ranks);
    for (const Distribution& d : e.dist) dist(d);
  }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

class Reader {
 public:
  explicit Reader(absl::string_view s) : s_(s) {}
  absl::Status error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("counters snapshot: at byte ", p_, " of ", s_.size(), ": ", what));
  }
  absl::StatusOr<uint8_t> u8() {
    if (p_ >= s_.size()) return error("truncated (expected a byte)");
    return static_cast<uint8_t>(s_[p_++]);
  }
  absl::StatusOr<uint64_t> varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= s_.size()) return error("truncated varint");
      const uint8_t b = static_cast<uint8_t>(s_[p_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    return error("varint longer than 10 bytes");
  }
  absl::StatusOr<double> f64() {
    if (s_.size() - p_ < 8) return error("truncated double");
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s_[p_ + i])) << (8 * i);
    p_ += 8;
    return std::bit_cast<double>(v);
  }
  absl::Status dist(Distribution& d) {
    DLFEED_ASSIGN_OR_RETURN(d.count, varint());
    DLFEED_ASSIGN_OR_RETURN(d.sum, varint());
    DLFEED_ASSIGN_OR_RETURN(d.max, varint());
    DLFEED_ASSIGN_OR_RETURN(d.mean, f64());
    DLFEED_ASSIGN_OR_RETURN(d.p50, f64());
    DLFEED_ASSIGN_OR_RETURN(d.p95, f64());
    DLFEED_ASSIGN_OR_RETURN(d.p99, f64());
    uint64_t n = 0;
    DLFEED_ASSIGN_OR_RETURN(n, varint());
    if (n > kHistBuckets) return error(absl::StrCat(n, " histogram buckets, at most ", kHistBuckets, " expected"));
    d.hist.clear();
    d.hist.reserve(n);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t b = 0, c = 0;
      DLFEED_ASSIGN_OR_RETURN(b, varint());
      DLFEED_ASSIGN_OR_RETURN(c, varint());
      if (b >= kHistBuckets || (!d.hist.empty() && b <= d.hist.back().first)) {
        return error(absl::StrCat("histogram bucket ", b, ": expected ascending buckets below ", kHistBuckets));
      }
      d.hist.emplace_back(static_cast<uint16_t>(b), c);
    }
    return absl::OkStatus();
  }
  absl::Status report(EpochReport& e) {
    uint64_t ep = 0;
    DLFEED_ASSIGN_OR_RETURN(ep, varint());
    e.epoch = static_cast<int64_t>(ep) - 1;
    uint8_t c = 0;
    DLFEED_ASSIGN_OR_RETURN(c, u8());
    e.complete = c != 0;
    for (double* d : {&e.wall_s, &e.wall_min_s}) {
      DLFEED_ASSIGN_OR_RETURN(*d, f64());
    }
    for (uint64_t* v : {&e.steps, &e.batches, &e.samples, &e.bytes_read, &e.bytes_delivered, &e.io_operations,
                        &e.extents, &e.planned_reads, &e.bytes_read_staged, &e.bytes_staged}) {
      DLFEED_ASSIGN_OR_RETURN(*v, varint());
    }
    for (double* d : {&e.plan_s, &e.io_busy_s, &e.decode_s, &e.collate_s, &e.stall_s, &e.compute_s, &e.io_hidden_s,
                      &e.io_exposed_s, &e.first_step_s, &e.au_percent, &e.compute_share_percent, &e.samples_per_s,
                      &e.read_mib_per_s, &e.delivered_mib_per_s, &e.au_min_percent, &e.au_max_percent}) {
      DLFEED_ASSIGN_OR_RETURN(*d, f64());
    }
    uint64_t ranks = 0;
    DLFEED_ASSIGN_OR_RETURN(ranks, varint());
    if (ranks == 0 || ranks > std::numeric_limits<uint32_t>::max()) return error("rank count out of range");
    e.ranks = static_cast<uint32_t>(ranks);
    for (Distribution& d : e.dist) DLFEED_RETURN_IF_ERROR(dist(d));
    return absl::OkStatus();
  }
  bool at_end() const { return p_ == s_.size(); }

 private:
  absl::string_view s_;
  size_t p_ = 0;
};

// Distributions: counts, sums and histograms add; max is the largest.
DLFEED_INLINE Distribution merge_dists(const std::vector<const Distribution*>& ds) {
  uint64_t count = 0, sum = 0, mx = 0;
  std::vector<uint64_t> dense(kHistBuckets, 0);
  for (const Distribution* d : ds) {
    count += d->count;
    sum += d->sum;
    mx = std::max(mx, d->max);
    for (const auto& [b, n] : d->hist) dense[b] += n;
  }
  Histogram h;
  for (size_t b = 0; b < kHistBuckets; ++b) {
    if (dense[b]) h.emplace_back(static_cast<uint16_t>(b), dense[b]);
  }
  return summarize(h, count, sum, mx);
}

DLFEED_INLINE EpochReport merge_reports(const std::vector<const EpochReport*>& rs) {
  EpochReport m;
  const double n = static_cast<double>(rs.size());
  m.epoch = rs[0]->epoch;
  m.complete = true;
  m.ranks = static_cast<uint32_t>(rs.size());
  m.wall_min_s = std::numeric_limits<double>::infinity();
  m.au_min_percent = std::numeric_limits<double>::infinity();
  m.au_max_percent = 0;
  for (const EpochReport* r : rs) {
    m.complete = m.complete && r->complete;
    m.wall_s = std::max(m.wall_s, r->wall_s);
    m.wall_min_s = std::min(m.wall_min_s, r->wall_s);
    m.steps = std::max(m.steps, r->steps);
    m.batches += r->batches;
    m.samples += r->samples;
    m.bytes_read += r->bytes_read;
    m.bytes_delivered += r->bytes_delivered;
    m.io_operations += r->io_operations;
    m.extents += r->extents;
    m.planned_reads += r->planned_reads;
    m.bytes_read_staged += r->bytes_read_staged;
    m.bytes_staged += r->bytes_staged;
    m.plan_s += r->plan_s / n;
    m.io_busy_s += r->io_busy_s / n;
    m.decode_s += r->decode_s / n;
    m.collate_s += r->collate_s / n;
    m.stall_s += r->stall_s / n;
    m.compute_s += r->compute_s / n;
    m.io_hidden_s += r->io_hidden_s / n;
    m.io_exposed_s += r->io_exposed_s / n;
    m.first_step_s += r->first_step_s / n;
    m.au_percent += r->au_percent / n;
    m.au_min_percent = std::min(m.au_min_percent, r->au_percent);
    m.au_max_percent = std::max(m.au_max_percent, r->au_percent);
    m.compute_share_percent += r->compute_share_percent / n;
    m.samples_per_s += r->samples_per_s;
    m.read_mib_per_s += r->read_mib_per_s;
    m.delivered_mib_per_s += r->delivered_mib_per_s;
  }
  for (size_t i = 0; i < kNumIds; ++i) {
    std::vector<const Distribution*> ds;
    ds.reserve(rs.size());
    for (const EpochReport* r : rs) ds.push_back(&r->dist[i]);
    m.dist[i] = merge_dists(ds);
  }
  return m;
}

DLFEED_DETAIL_END
}  // namespace snapshot_detail

DLFEED_INLINE std::string Snapshot::serialize() const {
  snapshot_detail::Writer w;
  for (char c : snapshot_detail::kMagic) w.u8(static_cast<uint8_t>(c));
  w.u8(snapshot_detail::kVersion);
  w.u8(enabled ? 1 : 0);
  w.f64(uptime_s);
  w.varint(ranks);
  w.varint(counters.size());
  for (const CounterValue& c : counters) {
    w.varint(c.value);
    w.varint(c.count);
    w.dist(c.dist);
  }
  w.varint(epochs.size());
  for (const EpochReport& e : epochs) w.report(e);
  w.report(total);
  w.u8(trace.enabled ? 1 : 0);
  w.varint(trace.max_events);
  w.varint(trace.recorded);
  w.varint(trace.dropped);
  w.varint(trace.io_sample_every);
  w.varint(rank_totals.size());
  for (const EpochReport& e : rank_totals) w.report(e);
  return w.take();
}

DLFEED_INLINE absl::StatusOr<Snapshot> Snapshot::deserialize(absl::string_view bytes) {
  snapshot_detail::Reader r(bytes);
  for (char c : snapshot_detail::kMagic) {
    uint8_t b = 0;
    DLFEED_ASSIGN_OR_RETURN(b, r.u8());
    if (b != static_cast<uint8_t>(c)) return r.error("not a dlfeed counters snapshot (expected magic 'dlfS')");
  }
  uint8_t version = 0;
  DLFEED_ASSIGN_OR_RETURN(version, r.u8());
  if (version != snapshot_detail::kVersion)
    return r.error(absl::StrCat("version ", version, ", this build reads version ", snapshot_detail::kVersion));
  Snapshot s;
  uint8_t en = 0;
  DLFEED_ASSIGN_OR_RETURN(en, r.u8());
  s.enabled = en != 0;
  DLFEED_ASSIGN_OR_RETURN(s.uptime_s, r.f64());
  uint64_t ranks = 0;
  DLFEED_ASSIGN_OR_RETURN(ranks, r.varint());
  if (ranks == 0 || ranks > std::numeric_limits<uint32_t>::max()) return r.error("rank count out of range");
  s.ranks = static_cast<uint32_t>(ranks);
  uint64_t n = 0;
  DLFEED_ASSIGN_OR_RETURN(n, r.varint());
  if (n != kNumIds) {
    return r.error(absl::StrCat(n, " counters, this build has ", kNumIds, " (snapshots from another dlfeed version)"));
  }
  s.counters.resize(kNumIds);
  for (size_t i = 0; i < kNumIds; ++i) {
    CounterValue& c = s.counters[i];
    c.id = static_cast<Id>(i);
    c.name = info(c.id).name;
    c.unit = info(c.id).unit;
    c.kind = info(c.id).kind;
    DLFEED_ASSIGN_OR_RETURN(c.value, r.varint());
    DLFEED_ASSIGN_OR_RETURN(c.count, r.varint());
    DLFEED_RETURN_IF_ERROR(r.dist(c.dist));
  }
  DLFEED_ASSIGN_OR_RETURN(n, r.varint());
  if (n > (1u << 24)) return r.error(absl::StrCat(n, " epochs"));
  s.epochs.resize(n);
  for (EpochReport& e : s.epochs) DLFEED_RETURN_IF_ERROR(r.report(e));
  DLFEED_RETURN_IF_ERROR(r.report(s.total));
  DLFEED_ASSIGN_OR_RETURN(en, r.u8());
  s.trace.enabled = en != 0;
  DLFEED_ASSIGN_OR_RETURN(s.trace.max_events, r.varint());
  DLFEED_ASSIGN_OR_RETURN(s.trace.recorded, r.varint());
  DLFEED_ASSIGN_OR_RETURN(s.trace.dropped, r.varint());
  uint64_t every = 0;
  DLFEED_ASSIGN_OR_RETURN(every, r.varint());
  s.trace.io_sample_every = static_cast<uint32_t>(every);
  DLFEED_ASSIGN_OR_RETURN(n, r.varint());
  if (n > std::numeric_limits<uint32_t>::max()) return r.error("too many rank totals");
  s.rank_totals.resize(n);
  for (EpochReport& e : s.rank_totals) DLFEED_RETURN_IF_ERROR(r.report(e));
  if (!r.at_end()) return r.error("trailing bytes");
  return s;
}

DLFEED_INLINE absl::StatusOr<Snapshot> merge_ranks(const std::vector<Snapshot>& ranks) {
  if (ranks.empty()) return absl::InvalidArgumentError("merge_ranks: no snapshots");
  for (size_t r = 0; r < ranks.size(); ++r) {
    const Snapshot& s = ranks[r];
    if (s.ranks != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("merge_ranks: snapshot ", r, " is already a merge of ", s.ranks, " ranks; give one per rank"));
    }
    if (s.counters.size() != kNumIds) {
      return absl::InvalidArgumentError(
          absl::StrCat("merge_ranks: snapshot ", r, " has ", s.counters.size(), " counters, expected ", kNumIds));
    }
    if (s.epochs.size() != ranks[0].epochs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("merge_ranks: rank ", r, " ran ", s.epochs.size(),
                                                     " epochs but rank 0 ran ", ranks[0].epochs.size()));
    }
    for (size_t e = 0; e < s.epochs.size(); ++e) {
      if (s.epochs[e].epoch != ranks[0].epochs[e].epoch) {
        return absl::InvalidArgumentError(absl::StrCat("merge_ranks: rank ", r, "'s epoch #", e, " is epoch ",
                                                       s.epochs[e].epoch, " but rank 0's is epoch ",
                                                       ranks[0].epochs[e].epoch));
      }
    }
  }
  Snapshot m;
  m.ranks = static_cast<uint32_t>(ranks.size());
  m.enabled = true;
  m.counters.resize(kNumIds);
  for (size_t i = 0; i < kNumIds; ++i) {
    CounterValue& c = m.counters[i];
    c = ranks[0].counters[i];
    c.value = 0;
    c.count = 0;
    std::vector<const Distribution*> ds;
    for (const Snapshot& s : ranks) {
      c.value += s.counters[i].value;
      c.count += s.counters[i].count;
      ds.push_back(&s.counters[i].dist);
    }
    c.dist = c.kind == Kind::kDistribution ? snapshot_detail::merge_dists(ds) : Distribution{};
  }
  for (size_t e = 0; e < ranks[0].epochs.size(); ++e) {
    std::vector<const EpochReport*> rs;
    rs.reserve(ranks.size());
    for (const Snapshot& s : ranks) rs.push_back(&s.epochs[e]);
    m.epochs.push_back(snapshot_detail::merge_reports(rs));
  }
  std::vector<const EpochReport*> totals;
  for (const Snapshot& s : ranks) {
    m.enabled = m.enabled && s.enabled;
    m.uptime_s = std::max(m.uptime_s, s.uptime_s);
    m.trace.enabled = m.trace.enabled || s.trace.enabled;
    m.trace.max_events += s.trace.max_events;
    m.trace.recorded += s.trace.recorded;
    m.trace.dropped += s.trace.dropped;
    totals.push_back(&s.total);
    m.rank_totals.push_back(s.total);
  }
  m.trace.io_sample_every = ranks[0].trace.io_sample_every;
  m.total = snapshot_detail::merge_reports(totals);
  return m;
}

}  // namespace dlfeed::counters
