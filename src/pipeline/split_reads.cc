// SPDX-License-Identifier: Apache-2.0
#include "pipeline/split_reads.h"

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <cstring>

#include "pipeline/pipeline.h"

namespace dlfeed::inline DLFEED_ABI::pipeline {

SplitSources split_sources(const std::vector<SampleIndex>& indices) {
  SplitSources out(indices.size());
  for (size_t f = 0; f < indices.size(); ++f) {
    for (const auto& src : indices[f].sources) {
      out[f].push_back(dynamic_cast<const detail::SplitRecords*>(src.get()));
    }
  }
  return out;
}

namespace {

// The record of split `s` with its value's bytes left out, in `out` (sized
// to the whole record): the bytes before and after the value from the read
// buffer, each at its place.
template <typename Buffer>
std::span<std::byte> skeleton_of(const Work& w, const Work::SplitRead& s, Buffer& out) {
  const uint64_t n = s.before + s.value + s.after;
  if (out.size() < n) out.resize(n);
  const prefetch::PieceView& a = w.plan.pieces[s.piece];
  const prefetch::PieceView& b = w.plan.pieces[s.piece + 1];
  std::memcpy(out.data(), w.raw.data() + a.buffer_offset, s.before);
  std::memcpy(out.data() + s.before + s.value, w.raw.data() + b.buffer_offset, s.after);
  return {out.data(), n};
}

// The value's bytes of split `s`: where they were read, in the batch slot.
std::span<const std::byte> value_of(const Work& w, const Work::SplitRead& s, size_t fields) {
  const size_t i = s.slot / fields, f = s.slot % fields;
  return {w.out[f].data() + w.out_offsets[f][i], s.value};
}

void check_one(Work& w, Work::SplitRead& s, const std::vector<SampleIndex>& indices) {
  const size_t F = indices.size();
  const SampleRef& ref = w.refs[s.slot];
  const auto* src = dynamic_cast<const detail::SplitRecords*>(indices[s.slot % F].sources[ref.source].get());
  // A vector: the hole's bytes stay initialized (a record that does not pass
  // may have its parse read them before it is found out).
  thread_local std::vector<std::byte> skeleton;
  const std::span<const std::byte> rec = skeleton_of(w, s, skeleton);
  const std::span<const std::byte> value = value_of(w, s, F);
  if (src != nullptr && src->check_split(ref, rec, {s.before, s.value}, value)) {
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

void check_splits(Work& w, const std::vector<SampleIndex>& indices, counters::Counters* counters) {
  const size_t n = w.splits.size();
  auto one = [&](size_t k) {
    tsan_handshake();
    counters::CurrentScope timed(counters);  // the source times its CRC and parse
    check_one(w, w.splits[k], indices);
    tsan_handshake();
  };
  if (n < 8) {
    for (size_t k = 0; k < n; ++k) one(k);
    return;
  }
  tsan_handshake();
  // Isolated, as the decoder's loops: no other pipeline task on this stack.
  tbb::this_task_arena::isolate([&] { tbb::parallel_for(size_t(0), n, one); });
  tsan_handshake();
}

std::span<std::byte> split_bytes(Work& w, size_t k, ByteBuffer& tmp, bool& checked) {
  Work::SplitRead& s = w.splits[w.split_of[k]];
  if (s.state == 2) {
    checked = false;  // decoded as a whole read: checked again, the error said
    return {s.whole.data(), s.whole.size()};
  }
  checked = true;
  return skeleton_of(w, s, tmp);
}

}  // namespace dlfeed::pipeline
