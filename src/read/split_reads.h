// SPDX-License-Identifier: Apache-2.0
// Private: records read around their value (src/format/split_record.h) in
// the pipeline. The planner reads a TFRecord Example's sample bytes straight
// into the batch and the bytes around them into the read buffer; the decoder
// checks each such record from its pieces before any field of it decodes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "batch/work.h"
#include "dlfeed/batch/batch.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/plan/plan.h"
#include "dlfeed/sample.h"
#include "format/split_record.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// Values smaller than this are read with their record: two more reads
/// would cost more than the copy they save.
inline constexpr uint64_t kSplitMinBytes = 64 * 1024;

/// Per field, per source of its index: the source as detail::SplitRecords,
/// or null.
using SplitSources = std::vector<std::vector<const detail::SplitRecords*>>;
SplitSources split_sources(const std::vector<SampleIndex>& indices);

/// The planner's part for sample i of `w` (refs, known and out_offsets
/// set): when one of its fields reads a record around its value, that
/// record's SplitRead and the value's direct read into the slot are added,
/// and every field of sample i that decodes from the record is named in
/// w.split_of and `done`: those need nothing more planned.
/// `file_ids[f][file]`: the file's FileTable id; `skip(f, ref)`: a sample
/// not read (unpacked).
template <typename Skip>
void plan_split(batch::Work& w, size_t i, const SplitSources& sources,
                const std::vector<std::vector<uint32_t>>& file_ids, std::vector<uint8_t>& done, Skip&& skip);

/// Before plan_split: a field of unknown sizes (a TFRecord bytes feature
/// without a shape) whose every sample in `w` is a record predicted to hold
/// its value at record 0's place, all of one length of at least
/// kSplitMinBytes, is laid out as if its sizes were known (w.predicted,
/// w.out_offsets), so that its values are read into place as a known
/// field's are. `skip(f, ref)`: a sample not read (unpacked).
template <typename Skip>
void predict_split_layout(batch::Work& w, const SplitSources& sources, Skip&& skip);

/// After prefetch::plan_reads: each split record's region in the read
/// buffer (regions of records laid out alike overlap: only the bytes around
/// each value are written, never a region's middle). Its bytes are one
/// scattered read (Lookahead::issue_reads), for which the value's DirectRead
/// (split set) stands.
void add_split_reads(batch::Work& w);

/// Checks every split record of `w` (its reads landed): each passes
/// check_split, or is put back together whole for a plain decode.
/// `counters` (may be null) times the CRCs and parses.
void check_splits(batch::Work& w, const std::vector<SampleIndex>& indices, counters::Counters* counters);

/// True when slot k (sample i * fields + f) decodes from a split record.
inline bool is_split(const batch::Work& w, size_t k) {
  return !w.split_of.empty() && w.split_of[k] != batch::Work::kNoSplit;
}
/// True when slot k's value was read into its batch slot and checked there.
inline bool split_in_place(const batch::Work& w, size_t k) {
  return is_split(w, k) && w.splits[w.split_of[k]].slot == k && w.splits[w.split_of[k]].state == 1;
}

/// The bytes slot k decodes from: the record's region of the read buffer,
/// its value's place unwritten (the record passed its check, so no Example
/// parse reads there), or the whole record (it did not). `checked`: its
/// CRCs need no check.
std::span<std::byte> split_bytes(batch::Work& w, size_t k, bool& checked);

// ---- the bodies (templates for the planner's skip test) ----

template <typename Skip>
void predict_split_layout(batch::Work& w, const SplitSources& sources, Skip&& skip) {
  const size_t F = sources.size(), n = w.ids.size();
  for (size_t f = 0; f < F; ++f) {
    if (w.known[f] || n == 0) continue;
    uint64_t length = 0;
    bool all = true;
    for (size_t i = 0; i < n && all; ++i) {
      const SampleRef& ref = w.refs[i * F + f];
      const detail::SplitRecords* src = sources[f][ref.source];
      std::optional<detail::ValueSpan> span;
      if (src != nullptr && ref.extents.size() == 1 && !skip(f, ref)) span = src->value_span(ref);
      if (i == 0 && span) length = span->length;
      all = span && span->length == length && length >= kSplitMinBytes;
    }
    if (!all) continue;
    w.predicted[f] = 1;
    auto& off = w.out_offsets[f];
    off.resize(n + 1);
    for (size_t i = 0; i <= n; ++i) off[i] = i * length;
  }
}

template <typename Skip>
void plan_split(batch::Work& w, size_t i, const SplitSources& sources,
                const std::vector<std::vector<uint32_t>>& file_ids, std::vector<uint8_t>& done, Skip&& skip) {
  const size_t F = sources.size();
  done.assign(F, 0);
  size_t fs = F;
  std::optional<detail::ValueSpan> span;
  for (size_t f = 0; f < F && fs == F; ++f) {
    const SampleRef& ref = w.refs[i * F + f];
    const detail::SplitRecords* src = sources[f][ref.source];
    if (src == nullptr || !w.laid_out(f) || ref.extents.size() != 1 || skip(f, ref)) continue;
    span = src->value_span(ref);
    const uint64_t slot_bytes = w.out_offsets[f][i + 1] - w.out_offsets[f][i];
    if (span && span->length == slot_bytes && span->length >= kSplitMinBytes) fs = f;
  }
  if (fs == F) return;
  if (w.split_of.empty()) w.split_of.assign(w.ids.size() * F, batch::Work::kNoSplit);
  const SampleRef& ref = w.refs[i * F + fs];
  const Extent e = ref.extents[0];
  const uint32_t file = file_ids[fs][ref.file];
  const uint32_t s = static_cast<uint32_t>(w.splits.size());
  batch::Work::SplitRead& sr = w.splits.emplace_back();
  sr.slot = static_cast<uint32_t>(i * F + fs);
  sr.file = file;
  sr.offset = e.offset;
  sr.before = span->offset;
  sr.value = span->length;
  sr.after = e.length - span->offset - span->length;
  sr.want_crc = sources[fs][ref.source]->verifies_crc();
  w.direct_reads.push_back({file, e.offset + sr.before, sr.value, static_cast<uint32_t>(fs), w.out_offsets[fs][i], s});
  w.direct[i * F + fs] = 1;
  for (size_t f = 0; f < F; ++f) {
    const SampleRef& other = w.refs[i * F + f];
    const detail::SplitRecords* src = sources[f][other.source];
    const bool same =
        f == fs || (src != nullptr && other.extents.size() == 1 && other.extents[0] == e &&
                    file_ids[f][other.file] == file && !skip(f, other) && src->parses_around_values(other));
    if (!same) continue;
    w.split_of[i * F + f] = s;
    done[f] = 1;
    if (!w.laid_out(f)) w.unknown_bytes[f] += sr.before + sr.after;  // a size hint
  }
}

}  // namespace dlfeed::detail
