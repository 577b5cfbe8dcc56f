// SPDX-License-Identifier: Apache-2.0
#include "read/split_reads.h"

#include <algorithm>
#include <cstring>

#include "base/isolated_for.h"

namespace dlfeed::inline DLFEED_ABI::detail {

SplitSources split_sources(const std::vector<SampleIndex>& indices) {
  SplitSources out(indices.size());
  for (size_t f = 0; f < indices.size(); ++f) {
    for (const auto& src : indices[f].sources) {
      out[f].push_back(dynamic_cast<const detail::SplitRecords*>(src.get()));
    }
  }
  return out;
}

void add_split_reads(batch::Work& w) {
  prefetch::ReadPlan& plan = w.plan;
  if (w.splits.empty()) return;
  // Only the bytes before and after each value are read into the buffer;
  // the value's place in its record's region is never written, and a parse
  // of the record reads nothing there (check_split). So regions may overlap:
  // when every split record of the batch is laid out alike (one file's
  // record 0, or files written alike) with values of one length V, each
  // region starts `stride` bytes (the most bytes before and after a value,
  // rounded up to 64) after the one before, up to (V - (B - b)) / stride + 1
  // regions in a group (B, b: the most and the fewest bytes before a value):
  // every one's bytes before lie ahead of the group's first bytes after, so a
  // region's middle holds other records' bytes, never its own, and no two
  // records' bytes meet. Groups follow one another. Records of one layout
  // but for another feature's length (an int64 label's varint) fit the same
  // way. A batch of 256 147 KiB records then holds about one record plus 128
  // bytes a record, not 38 MB. Otherwise each region is whole.
  const batch::Work::SplitRead& first = w.splits.front();
  bool alike = true;
  uint64_t most_before = 0, fewest_before = first.before, most_after = 0;
  for (const batch::Work::SplitRead& s : w.splits) {
    alike = alike && s.value == first.value;
    most_before = std::max(most_before, s.before);
    fewest_before = std::min(fewest_before, s.before);
    most_after = std::max(most_after, s.after);
  }
  const uint64_t spread = most_before - fewest_before;
  alike = alike && first.value >= spread;
  const uint64_t whole = most_before + first.value + most_after;
  const uint64_t stride = (most_before + most_after + 63) / 64 * 64;
  const uint64_t group = alike && stride > 0 ? (first.value - spread) / stride + 1 : 1;
  uint64_t start = plan.buffer_bytes, in_group = 0;
  for (batch::Work::SplitRead& s : w.splits) {
    if (!alike) {
      s.region = plan.buffer_bytes;
      plan.buffer_bytes += s.before + s.value + s.after;
    } else {
      if (in_group == group) {  // the next group, after this one's last region
        start += (group - 1) * stride + whole;
        in_group = 0;
      }
      s.region = start + in_group * stride;
      plan.buffer_bytes = std::max(plan.buffer_bytes, s.region + s.before + s.value + s.after);
      ++in_group;
    }
    plan.requested_bytes += s.before + s.after;
  }
}

namespace {

// The record of split `s` in the read buffer, its value's place unwritten.
std::span<std::byte> region_of(batch::Work& w, const batch::Work::SplitRead& s) {
  return {w.raw.data() + s.region, s.before + s.value + s.after};
}

// The value's bytes of split `s`: where they were read, in the batch slot.
std::span<const std::byte> value_of(const batch::Work& w, const batch::Work::SplitRead& s, size_t fields) {
  const size_t i = s.slot / fields, f = s.slot % fields;
  return {w.out[f].data() + w.out_offsets[f][i], s.value};
}

void check_one(batch::Work& w, batch::Work::SplitRead& s, const std::vector<SampleIndex>& indices) {
  const size_t F = indices.size();
  const SampleRef& ref = w.refs[s.slot];
  const auto* src = dynamic_cast<const detail::SplitRecords*>(indices[s.slot % F].sources[ref.source].get());
  // The value's place in the region holds whatever the buffer held: a record
  // whose layout is not the predicted one may have its parse read it before
  // the check finds it out, which it always does (check_split).
  const std::span<const std::byte> rec = region_of(w, s);
  const std::span<const std::byte> value = value_of(w, s, F);
  const uint32_t* value_crc = s.value_crc_known ? &s.value_crc : nullptr;
  if (src != nullptr && src->check_split(ref, rec, {s.before, s.value}, value, value_crc)) {
    s.state = 1;
    return;
  }
  // Put together whole: decoded as any record, it gives the same result or
  // the same error as a whole read would.
  s.whole.assign(rec.begin(), rec.end());
  std::memcpy(s.whole.data() + s.before, value.data(), s.value);
  s.state = 2;
}

}  // namespace

void check_splits(batch::Work& w, const std::vector<SampleIndex>& indices, counters::Counters* counters) {
  const size_t n = w.splits.size();
  auto one = [&](size_t k) {
    base::tsan_handshake();
    counters::CurrentScope timed(counters);  // the source times its CRC and parse
    // Latest landed first: values are read in sample order, so the last
    // ones are the likeliest still in the caches.
    check_one(w, w.splits[n - 1 - k], indices);
    base::tsan_handshake();
  };
  base::isolated_for(n, one, /*spread=*/n >= 8);
}

std::span<std::byte> split_bytes(batch::Work& w, size_t k, bool& checked) {
  batch::Work::SplitRead& s = w.splits[w.split_of[k]];
  if (s.state == 1) {
    checked = true;
    return region_of(w, s);
  }
  checked = false;  // decoded as a whole read: checked again, the error said
  // Not checked (check_splits not run): no bytes, which no decode takes for
  // a record, rather than a region whose middle was never written.
  if (s.state == 0) return {};
  return {s.whole.data(), s.whole.size()};
}

}  // namespace dlfeed::detail
