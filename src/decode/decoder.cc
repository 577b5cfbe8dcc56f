// SPDX-License-Identifier: Apache-2.0
#include "decode/decoder.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/isolated_for.h"
#include "counters/record.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "format/checked_bytes.h"
#include "read/split_reads.h"

namespace dlfeed::inline DLFEED_ABI::decode {

Decoder::Decoder(const std::vector<SampleIndex>& indices, const std::vector<std::string>& field_names,
                 std::shared_ptr<BufferPool> pool, counters::Counters* counters, const detail::UnpackedFiles* unpacked)
    : indices_(indices), field_names_(field_names), pool_(std::move(pool)), counters_(counters), unpacked_(unpacked) {}

absl::StatusOr<DecodedSample> Decoder::decode_one(batch::Work& w, size_t i, size_t f, ByteBuffer& tmp,
                                                  std::vector<std::byte>& scratch) const {
  const SampleRef& ref = w.refs[i * indices_.size() + f];
  if (unpacked_ != nullptr && unpacked_->has(f, ref.file)) return unpacked_->decode(f, ref, scratch);
  // A record read around its value: checked by check_splits (or whole).
  bool checked = false;
  const bool split = detail::is_split(w, i * indices_.size() + f);
  const std::span<std::byte> raw =
      split ? detail::split_bytes(w, i * indices_.size() + f, checked) : raw_of(w, i, f, tmp);
  // The same bytes of the read buffer as an earlier field of this sample,
  // decoded (and so checked) already: its source need not check them again.
  for (size_t g = 0; g < f && !checked && !split && raw.data() != tmp.data(); ++g) {
    const SampleRef& other = w.refs[i * indices_.size() + g];
    if (other.source != ref.source || other.file != ref.file) continue;
    if (unpacked_ != nullptr && unpacked_->has(g, other.file)) continue;
    const std::span<std::byte> earlier = view_of(w, i, g);
    checked = earlier.data() == raw.data() && earlier.size() == raw.size();
  }
  if (!checked) return indices_[f].sources[ref.source]->decode(ref, raw, scratch);
  detail::checked_bytes = {raw.data(), raw.size()};
  auto out = indices_[f].sources[ref.source]->decode(ref, raw, scratch);
  detail::checked_bytes = {};
  return out;
}

std::span<std::byte> Decoder::view_of(batch::Work& w, size_t i, size_t f) const {
  const size_t F = indices_.size();
  const uint32_t b = w.piece_begin[i * F + f], e = w.piece_begin[i * F + f + 1];
  if (e == b) return {};
  uint64_t end = w.plan.pieces[b].buffer_offset + w.plan.pieces[b].length;
  uint32_t k = b + 1;
  for (; k < e && w.plan.pieces[k].buffer_offset == end; ++k) end += w.plan.pieces[k].length;
  if (k != e) return {};
  const uint64_t begin = w.plan.pieces[b].buffer_offset;
  return {w.raw.data() + begin, end - begin};
}

std::span<std::byte> Decoder::raw_of(batch::Work& w, size_t i, size_t f, ByteBuffer& tmp) const {
  const size_t F = indices_.size();
  const uint32_t b = w.piece_begin[i * F + f], e = w.piece_begin[i * F + f + 1];
  if (e == b) return {};
  // One piece, or pieces that lie end to end in the read buffer (a long read
  // split in pieces): a view, no copy.
  if (const std::span<std::byte> view = view_of(w, i, f); view.data() != nullptr) return view;
  uint64_t total = 0;
  for (uint32_t k = b; k < e; ++k) total += w.plan.pieces[k].length;
  tmp.resize(total);
  uint64_t pos = 0;
  for (uint32_t k = b; k < e; ++k) {
    const auto& p = w.plan.pieces[k];
    std::memcpy(tmp.data() + pos, w.raw.data() + p.buffer_offset, p.length);
    pos += p.length;
  }
  return {tmp.data(), tmp.size()};
}

void Decoder::decode(batch::Work& w) const {
  absl::Status st = w.wait_reads();
  if (!st.ok()) {
    w.error = st;
    return;
  }
  if (counters_ != nullptr) detail::name_thread_once(*counters_, "dlfeed worker");
  counters::Span span(counters_, counters::kDecodeSpan);
  span.args(w.epoch, w.index, w.ids.size());
  if (!w.splits.empty()) {
    detail::check_splits(w, indices_, counters_);
    uint64_t whole = 0;
    for (const batch::Work::SplitRead& s : w.splits) whole += s.state == 2;
    split_records_.fetch_add(w.splits.size(), std::memory_order_relaxed);
    if (whole) split_whole_.fetch_add(whole, std::memory_order_relaxed);
  }
  decode_reads(w);
}

namespace {

// Field f of a strided batch: read straight into place, all of one shape,
// nothing to decode.
void take_strided(batch::Work& w, size_t f, const SampleIndex& idx, BatchField& out, ByteBuffer& store) {
  const size_t n = w.ids.size();
  out.offsets = std::move(w.out_offsets[f]);
  store = std::move(w.out[f]);
  auto spec = idx.sources.front()->sample_spec();
  out.sample_shapes.assign(n, spec->second);
  out.dtype = spec->first;
  out.bytes = std::span<const std::byte>(store.data(), out.offsets[n]);
  out.shape.assign(1, static_cast<int64_t>(n));
  out.shape.insert(out.shape.end(), spec->second.begin(), spec->second.end());
}

// A decoded field's bytes, and its shape when every sample has the same.
void set_bytes_and_shape(BatchField& out, const ByteBuffer& store, size_t n) {
  out.bytes = std::span<const std::byte>(store.data(), out.offsets[n]);
  bool uniform = n > 0;
  for (size_t i = 1; i < n && uniform; ++i) uniform = out.sample_shapes[i] == out.sample_shapes[0];
  if (uniform) {
    out.shape.push_back(static_cast<int64_t>(n));
    for (int64_t d : out.sample_shapes[0]) out.shape.push_back(d);
  }
}

// The values of predicted field f (w.laid_out) checked in place
// (check_split): each becomes decoded[i], a view of its slot in `store`,
// with in_place[i] = 1. Of the field's dtype, as decode() would give it: its
// index's shape where that is whole (a source with a shape, beside others
// without), else 1-D.
void adopt_in_place(const batch::Work& w, size_t f, size_t F, const ByteBuffer& store, uint64_t guess,
                    std::vector<absl::StatusOr<DecodedSample>>& decoded, std::vector<uint8_t>& in_place) {
  for (size_t i = 0; i < decoded.size(); ++i) {
    const size_t k = i * F + f;
    if (!detail::split_in_place(w, k)) continue;
    const SampleRef& ref = w.refs[k];
    DecodedSample d;
    d.bytes = std::span<const std::byte>(store.data() + i * guess, guess);
    d.dtype = ref.dtype;
    const bool whole =
        !ref.shape.empty() && std::all_of(ref.shape.begin(), ref.shape.end(), [](int64_t x) { return x >= 0; });
    d.shape = whole ? ref.shape : Shape{static_cast<int64_t>(guess / std::max<uint64_t>(1, ref.dtype.size))};
    decoded[i] = std::move(d);
    in_place[i] = 1;
  }
}

// Sizes differ: every value copied into a new buffer at `offsets` (a value
// in place is copied from the old buffer, given back after).
void lay_out_again(BufferPool& pool, const std::vector<absl::StatusOr<DecodedSample>>& decoded,
                   const std::vector<uint64_t>& offsets, ByteBuffer& store) {
  ByteBuffer again = pool.take(offsets[decoded.size()]);
  for (size_t i = 0; i < decoded.size(); ++i) {
    const std::span<const std::byte> b = decoded[i]->bytes;
    if (!b.empty()) std::memcpy(again.data() + offsets[i], b.data(), b.size());
  }
  pool.give(std::move(store));
  store = std::move(again);
}

}  // namespace

void Decoder::decode_reads(batch::Work& w) const {
  const size_t n = w.ids.size(), F = indices_.size();
  auto batch = std::make_shared<Batch>();
  batch->epoch = w.epoch;
  batch->index = w.index;
  batch->position = w.position;
  batch->sample_ids = w.ids;
  batch->fields.resize(F);
  batch->storage.resize(F);
  for (size_t f = 0; f < F && w.error.ok(); ++f) {
    BatchField& out = batch->fields[f];
    out.name = field_names_[f];
    // Sizes known before decode (every dimension of every sample): decode in
    // parallel straight into place. Otherwise in order, appending.
    const bool known = w.known[f];
    out.offsets.resize(n + 1);
    out.sample_shapes.resize(n);
    ByteBuffer& store = batch->storage[f];
    if (w.strided) {
      take_strided(w, f, indices_[f], out, store);
      continue;
    }
    if (known) {
      decode_known(w, f, out, store);
    } else {
      decode_unknown(w, f, out, store);
    }
    if (!w.error.ok()) break;
    set_bytes_and_shape(out, store, n);
  }
  pool_->give(std::move(w.raw));
  if (!w.error.ok()) {
    for (auto& s : batch->storage) pool_->give(std::move(s));
    return;
  }
  w.batch = std::move(batch);
}

void Decoder::decode_known(batch::Work& w, size_t f, BatchField& out, ByteBuffer& store) const {
  const size_t n = w.ids.size(), F = indices_.size();
  const SampleIndex& idx = indices_[f];
  out.offsets = std::move(w.out_offsets[f]);
  store = std::move(w.out[f]);
  std::vector<absl::Status> errs(n);
  auto one = [&](size_t i) {
    base::tsan_handshake();
    struct End {
      ~End() { base::tsan_handshake(); }
    } end;
    const SampleRef& ref = w.refs[i * F + f];
    counters::CurrentScope timed(counters_);  // format code times CRC/inflate/parse
    if (w.direct[i * F + f] && (!detail::is_split(w, i * F + f) || detail::split_in_place(w, i * F + f))) {
      out.sample_shapes[i] = ref.shape;
      return;
    }
    thread_local ByteBuffer tmp;
    thread_local std::vector<std::byte> scratch;
    auto d = decode_one(w, i, f, tmp, scratch);
    if (!d.ok()) {
      errs[i] = d.status();
      return;
    }
    const uint64_t want = out.offsets[i + 1] - out.offsets[i];
    if (d->bytes.size() != want) {
      errs[i] = format_error(idx.files[ref.file], ref.extents.empty() ? 0 : ref.extents[0].offset,
                             absl::StrCat(want, " decoded bytes for sample ", ref.item), absl::StrCat(d->bytes.size()));
      return;
    }
    if (want) std::memcpy(store.data() + out.offsets[i], d->bytes.data(), want);
    out.sample_shapes[i] = d->shape;
  };
  size_t to_decode = 0;
  for (size_t i = 0; i < n; ++i) to_decode += w.direct[i * F + f] == 0;
  base::isolated_for(n, one, /*spread=*/to_decode >= 8);
  for (size_t i = 0; i < n; ++i) {
    if (!errs[i].ok()) {
      w.error = errs[i];
      break;
    }
  }
  out.dtype = n ? w.refs[f].dtype : DType{};
}

void Decoder::decode_unknown(batch::Work& w, size_t f, BatchField& out, ByteBuffer& store) const {
  // Sizes known only after decode (e.g. TFRecord features without a shape).
  // A field laid out by prediction (w.predicted: every sample a split
  // record's value of one length) has its buffer, and the values that passed
  // their check are in place already: nothing of them is copied. Otherwise
  // sample 0 is decoded first and its size taken as every sample's guess.
  // The others are decoded in parallel, each copied into place at once
  // while its bytes are in the CPU's caches when its size matches. When one
  // does not, the sizes are added up in order and every sample copied again
  // into a new buffer from its decoded bytes (each sample keeps buffers of its
  // own for that; a value in place is copied from the old buffer, given back
  // after). The first error in sample order is the batch's.
  const size_t n = w.ids.size(), F = indices_.size();
  if (n == 0) return;
  std::vector<absl::StatusOr<DecodedSample>> decoded(n, absl::UnknownError("not decoded"));
  std::vector<ByteBuffer> tmps(n);
  std::vector<std::vector<std::byte>> scratches(n);
  std::vector<uint8_t> in_place(n, 0);
  uint64_t guess = 0;
  if (w.laid_out(f)) {
    store = std::move(w.out[f]);
    guess = w.out_offsets[f][1];
    adopt_in_place(w, f, F, store, guess, decoded, in_place);
  } else {
    {
      counters::CurrentScope timed(counters_);
      decoded[0] = decode_one(w, 0, f, tmps[0], scratches[0]);
    }
    if (!decoded[0].ok()) {
      w.error = decoded[0].status();
      return;
    }
    guess = decoded[0]->bytes.size();
    store = pool_->take(guess * n);
    in_place[0] = 2;  // decoded; copied below with the others
  }
  std::atomic<bool> misfit{false};
  auto one = [&](size_t i) {
    base::tsan_handshake();
    if (in_place[i] == 0) {
      counters::CurrentScope timed(counters_);  // format code times CRC/inflate/parse
      decoded[i] = decode_one(w, i, f, tmps[i], scratches[i]);
    }
    if (in_place[i] == 1) {
      // Already where it belongs.
    } else if (decoded[i].ok() && decoded[i]->bytes.size() == guess) {
      if (guess) std::memcpy(store.data() + guess * i, decoded[i]->bytes.data(), guess);
    } else {
      misfit.store(true, std::memory_order_relaxed);
    }
    base::tsan_handshake();
  };
  size_t to_decode = 0;
  for (uint8_t p : in_place) to_decode += p != 1;
  base::isolated_for(n, one, /*spread=*/to_decode >= 8);
  out.offsets[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!decoded[i].ok()) {
      w.error = decoded[i].status();
      return;
    }
    out.offsets[i + 1] = out.offsets[i] + decoded[i]->bytes.size();
    out.sample_shapes[i] = decoded[i]->shape;
  }
  out.dtype = decoded[0]->dtype;
  if (misfit.load(std::memory_order_relaxed)) lay_out_again(*pool_, decoded, out.offsets, store);
}

}  // namespace dlfeed::decode
