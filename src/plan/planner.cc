// SPDX-License-Identifier: Apache-2.0
#include "plan/planner.h"

#include <algorithm>
#include <span>

#include "counters/record.h"
#include "read/split_reads.h"

namespace dlfeed::inline DLFEED_ABI::plan {

using counters::Component;
using CId = counters::Id;
using detail::now_of;

Planner::Planner(const std::vector<SampleIndex>& indices, const std::vector<std::vector<uint32_t>>& file_ids,
                 PlannerOptions options, counters::Counters* counters, const detail::UnpackedFiles* unpacked,
                 const detail::ResidentFiles* held)
    : indices_(indices), file_ids_(file_ids), options_(options), counters_(counters), unpacked_(unpacked) {
  split_src_ = detail::split_sources(indices_);
  set_held(held);
}

void Planner::set_held(const detail::ResidentFiles* held) {
  strided_on_.store(false, std::memory_order_release);
  strided_.clear();
  if (held == nullptr) return;
  // Strided batches: every file held and not unpacked, every source strided,
  // of one sample spec per field with exactly the layout's bytes.
  std::vector<StridedField> fields(indices_.size());
  for (size_t f = 0; f < indices_.size(); ++f) {
    const SampleIndex& idx = indices_[f];
    if (idx.sources.empty()) return;
    std::optional<std::pair<DType, Shape>> first;  // file 0's, which every file must have
    for (uint32_t file = 0; file < idx.sources.size(); ++file) {
      if (!held->has(file_ids_[f][file]) || (unpacked_ != nullptr && unpacked_->has(f, file))) return;
      const SampleSource& src = *idx.sources[file];
      const std::optional<SampleSource::Strided> lay = src.strided();
      const std::optional<std::pair<DType, Shape>> spec = src.sample_spec();
      if (!lay || !spec) return;
      if (!first) {
        first = spec;
        for (int64_t d : first->second) {
          if (d < 0) return;
        }
      } else if (!(spec->first == first->first) || spec->second != first->second) {
        return;
      }
      const uint64_t bytes = static_cast<uint64_t>(num_elements(first->second)) * first->first.size;
      if (lay->length != bytes || bytes == 0) return;
      fields[f].files.push_back(*lay);
    }
    const auto& begin = idx.file_begin;
    const uint64_t per = begin[1] - begin[0];
    bool even = per > 0;
    for (size_t file = 1; file + 1 < idx.sources.size() && even; ++file) even = begin[file + 1] - begin[file] == per;
    if (even && begin.back() - begin[begin.size() - 2] <= per) fields[f].per_file = per;
  }
  strided_ = std::move(fields);
  strided_on_.store(!strided_.empty(), std::memory_order_release);
}

std::shared_ptr<batch::Work> Planner::next(OrderCursor& cursor, uint64_t epoch, uint64_t& batch_index) {
  if (cursor.done()) return nullptr;
  [[maybe_unused]] const uint64_t t0 = counters_ ? now_of(*counters_) : 0;
  const uint32_t B = options_.batch_size;
  auto w = std::make_shared<batch::Work>();
  w->epoch = epoch;
  w->index = batch_index;
  w->position = cursor.position();
  w->ids.resize(static_cast<size_t>(std::min<uint64_t>(B, cursor.remaining())));  // not B for a few samples
  const size_t n = cursor.next(std::span<uint64_t>(w->ids));
  w->ids.resize(n);
  if (n == 0 || (n < B && options_.drop_last_batch)) return nullptr;
  counters::Span span(counters_, counters::kPlanSpan, t0);
  ++batch_index;
  plan(*w);
  DLFEED_REC({
    if (counters_ != nullptr) {
      counters_->add(CId::kExtents, w->piece_begin.back() + std::count(w->direct.begin(), w->direct.end(), 1));
      counters_->add(CId::kPlannedReads, w->plan.reads.size() + w->direct_reads.size());
    }
  });
  span.args(epoch, w->index, w->plan.reads.size());
  return w;
}

void Planner::choose_direct(const batch::Work& w, std::vector<uint8_t>& raw_ok) {
  const size_t n = w.ids.size(), F = indices_.size();
  raw_ok.assign(n * F, 0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t f = 0; f < F; ++f) {
      const SampleRef& ref = w.refs[i * F + f];
      if (!w.known[f] || ref.extents.size() != 1 || !indices_[f].sources[ref.source]->is_identity(ref)) continue;
      raw_ok[i * F + f] = 1;
    }
  }
  if (!options_.coalesce.enabled) return;
  // Every extent of the batch, sorted per file: a small raw sample with a
  // neighbour within max_gap stays with the coalesced reads (reading them
  // together saves more than a copy), unless the two adjoin in the batch
  // buffer too (then one direct read does both without the copy).
  std::vector<std::pair<uint64_t, uint64_t>>& small = small_scratch_;  // (file << 32 | slot, offset)
  small.clear();
  for (size_t i = 0; i < n; ++i) {
    for (size_t f = 0; f < F; ++f) {
      const SampleRef& ref = w.refs[i * F + f];
      if (unpacked_ != nullptr && unpacked_->has(f, ref.file)) continue;  // not read
      const uint64_t key = (uint64_t{file_ids_[f][ref.file]} << 32) | (i * F + f);
      for (const Extent& e : ref.extents) small.push_back({key, e.offset});
    }
  }
  std::sort(small.begin(), small.end(), [](const auto& a, const auto& b) {
    return (a.first >> 32) != (b.first >> 32) ? a.first < b.first : a.second < b.second;
  });
  auto end_of = [&](size_t k) {
    const uint64_t slot = small[k].first & 0xFFFFFFFFu;
    const SampleRef& ref = w.refs[slot];
    for (const Extent& e : ref.extents) {
      if (e.offset == small[k].second) return e.offset + e.length;
    }
    return small[k].second;
  };
  // Whether slots a and b (raw, one extent each) are neighbours in the batch
  // buffer too: sample b follows sample a in the same field, so one direct
  // read covers both (plan() merges them) and no copy is needed.
  auto batch_neighbours = [&](uint64_t a, uint64_t b) {
    if (!raw_ok[a] || !raw_ok[b] || a % F != b % F) return false;
    const size_t f = a % F;
    return w.out_offsets[f][a / F] + w.refs[a].extents[0].length == w.out_offsets[f][b / F];
  };
  for (size_t k = 0; k + 1 < small.size(); ++k) {
    if ((small[k].first >> 32) != (small[k + 1].first >> 32)) continue;
    const uint64_t end = end_of(k);
    if (small[k + 1].second > end + gap_) continue;
    if (small[k + 1].second == end &&
        batch_neighbours(small[k].first & 0xFFFFFFFFu, small[k + 1].first & 0xFFFFFFFFu)) {
      continue;  // neighbours in file and batch (an order that keeps runs): one direct read
    }
    // Neighbours: neither goes direct unless it is large.
    for (size_t j : {k, k + 1}) {
      const uint64_t slot = small[j].first & 0xFFFFFFFFu;
      const SampleRef& ref = w.refs[slot];
      if (ref.extents[0].length < kDirectMinBytes) raw_ok[slot] = 0;
    }
  }
}

uint64_t Planner::batch_gap(const batch::Work& w) const {
  const uint64_t max_gap = options_.coalesce.max_gap;
  if (!options_.coalesce.adaptive_gap) return max_gap;
  uint64_t bytes = 0, count = 0;
  const size_t F = indices_.size();
  for (size_t k = 0; k < w.refs.size(); ++k) {
    const SampleRef& r = w.refs[k];
    if (unpacked_ != nullptr && unpacked_->has(k % F, r.file))
      continue;  // not read: its whole-array extent is no read's size
    for (const Extent& e : r.extents) {
      bytes += e.length;
      ++count;
    }
  }
  return count == 0 ? max_gap : std::min(max_gap, bytes / count);
}

void Planner::plan_strided(batch::Work& w) {
  const size_t n = w.ids.size(), F = indices_.size();
  w.strided = true;
  w.refs.clear();
  w.piece_begin.assign(1, 0);
  w.plan = prefetch::ReadPlan{};
  w.known.assign(F, 1);
  w.predicted.assign(F, 0);
  w.out_offsets.resize(F);
  w.unknown_bytes.assign(F, 0);
  w.direct.assign(n * F, 1);
  w.direct_reads.clear();
  w.direct_reads.reserve(n * F);
  w.out.resize(F);
  uint64_t out_bytes = 0;
  for (size_t f = 0; f < F; ++f) {
    const StridedField& sf = strided_[f];
    const SampleIndex& idx = indices_[f];
    const std::vector<uint32_t>& ids_of = file_ids_[f];
    const uint64_t len = sf.files.front().length;
    auto& off = w.out_offsets[f];
    off.resize(n + 1);
    for (size_t i = 0; i <= n; ++i) off[i] = i * len;
    out_bytes += n * len;
    auto& dr = w.direct_reads;
    const size_t first = dr.size();
    uint32_t file = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t id = w.ids[i];
      // Consecutive ids mostly share a file (sequential and file orders).
      if (sf.per_file != 0) {
        file = static_cast<uint32_t>(id / sf.per_file);
      } else if (id < idx.file_begin[file] || id >= idx.file_begin[file + 1]) {
        file = idx.file_of(id);
      }
      const SampleSource::Strided& lay = sf.files[file];
      const uint64_t at = lay.offset + (id - idx.file_begin[file]) * lay.stride;
      const uint32_t table_id = ids_of[file];
      if (options_.merge_runs && dr.size() > first && dr.back().file == table_id &&
          dr.back().offset + dr.back().length == at) {
        dr.back().length += len;  // a run of neighbours: one copy
      } else {
        dr.push_back({table_id, at, len, static_cast<uint32_t>(f), i * len});
      }
    }
  }
  extents_.fetch_add(n * F, std::memory_order_relaxed);
  planned_reads_.fetch_add(w.direct_reads.size(), std::memory_order_relaxed);
  w.ticket = std::make_shared<batch::Ticket>();
  w.ticket->bytes = out_bytes;
}

namespace {

// Sets `w` up for planning its ids: every sample's SampleRef per field, and
// each field's output offsets when every dimension of every sample is known.
void ref_samples(const std::vector<SampleIndex>& indices, batch::Work& w) {
  const size_t n = w.ids.size(), F = indices.size();
  w.piece_begin.resize(n * F + 1);
  w.known.assign(F, 1);
  w.predicted.assign(F, 0);
  w.out_offsets.assign(F, {});
  w.unknown_bytes.assign(F, 0);
  w.direct.assign(n * F, 0);
  w.direct_reads.clear();
  w.out.resize(F);
  w.split_of.clear();
  w.splits.clear();
  w.refs.resize(n * F);
  for (size_t i = 0; i < n; ++i) {
    for (size_t f = 0; f < F; ++f) indices[f].ref(w.ids[i], w.refs[i * F + f]);
  }
  for (size_t f = 0; f < F; ++f) {
    for (size_t i = 0; i < n && w.known[f]; ++i) {
      for (int64_t d : w.refs[i * F + f].shape) w.known[f] = w.known[f] && d >= 0;
    }
    if (!w.known[f]) continue;
    auto& off = w.out_offsets[f];
    off.resize(n + 1);
    off[0] = 0;
    for (size_t i = 0; i < n; ++i) off[i + 1] = off[i] + w.refs[i * F + f].nbytes();
  }
}

}  // namespace

void Planner::plan(batch::Work& w) {
  if (copies_only()) {
    plan_strided(w);
    return;
  }
  const size_t n = w.ids.size(), F = indices_.size();
  std::vector<prefetch::ExtentRef>& ext = ext_scratch_;
  ext.clear();
  uint64_t direct_extents = 0;
  ref_samples(indices_, w);
  gap_ = batch_gap(w);
  std::vector<uint8_t>& raw_ok = direct_scratch_;
  choose_direct(w, raw_ok);
  constexpr size_t kNone = ~size_t{0};
  std::vector<size_t>& last_direct = last_direct_scratch_;  // per field: its latest direct read
  last_direct.assign(F, kNone);
  auto not_read = [&](size_t f, const SampleRef& r) { return unpacked_ != nullptr && unpacked_->has(f, r.file); };
  detail::predict_split_layout(w, split_src_, not_read);
  for (size_t i = 0; i < n; ++i) {
    // A record read around its value (split_reads.h): its fields are planned.
    detail::plan_split(w, i, split_src_, file_ids_, split_done_, not_read);
    for (size_t f = 0; f < F; ++f) {
      w.piece_begin[i * F + f] = static_cast<uint32_t>(ext.size());
      if (split_done_[f]) continue;
      const SampleRef& ref = w.refs[i * F + f];
      const uint32_t file = file_ids_[f][ref.file];
      if (raw_ok[i * F + f]) {
        w.direct[i * F + f] = 1;
        const Extent& e = ref.extents[0];
        const uint64_t dest = w.out_offsets[f][i];
        auto& dr = w.direct_reads;
        // Neighbours in the file that are neighbours in the batch (sequential
        // orders) become one run (the engine issues it in max_read pieces);
        // each field's runs grow apart.
        const size_t last = last_direct[f];
        if (options_.coalesce.enabled && last != kNone && dr[last].file == file &&
            dr[last].offset + dr[last].length == e.offset && dr[last].dest + dr[last].length == dest) {
          dr[last].length += e.length;
        } else {
          last_direct[f] = dr.size();
          dr.push_back({file, e.offset, e.length, static_cast<uint32_t>(f), dest});
        }
        ++direct_extents;
        continue;
      }
      if (unpacked_ != nullptr && unpacked_->has(f, ref.file)) continue;  // decoded from the unpacked array
      for (const Extent& e : ref.extents) ext.push_back({file, e.offset, e.length});
      if (!w.laid_out(f)) w.unknown_bytes[f] += ref.read_bytes();
    }
  }
  uint64_t out_bytes = 0;
  for (size_t f = 0; f < F; ++f) out_bytes += w.laid_out(f) ? w.out_offsets[f][n] : w.unknown_bytes[f];
  w.piece_begin[n * F] = static_cast<uint32_t>(ext.size());
  prefetch::CoalesceOptions coalesce = options_.coalesce;
  coalesce.max_gap = gap_;
  w.plan = prefetch::plan_reads(ext, coalesce);
  detail::add_split_reads(w);
  extents_.fetch_add(ext.size() + direct_extents + w.splits.size(), std::memory_order_relaxed);
  planned_reads_.fetch_add(w.plan.reads.size() + w.direct_reads.size(), std::memory_order_relaxed);
  w.ticket = std::make_shared<batch::Ticket>();
  // The regions' unwritten middles count: with transparent huge pages a
  // touched page backs them anyway, and the buffer pool hands them out whole.
  w.ticket->bytes = w.plan.buffer_bytes + out_bytes;
}

}  // namespace dlfeed::plan
