// SPDX-License-Identifier: Apache-2.0
// The bodies of dlfeed/order/order.h (header tier: see dlfeed/detail/inline.h):
// file layout, the factory-taking order and cursor, resume states. The
// strategy registry is mutable state and stays compiled (src/order/registry.cc).
#pragma once

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/inline.h"
#include "dlfeed/error.h"
#include "dlfeed/order/order.h"
#include "dlfeed/order/random.h"
#include "dlfeed/order/strategies-inl.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI {

// ---------------------------------------------------------------- layout

DLFEED_INLINE uint64_t FileLayout::file_of(uint64_t id) const {
  const auto it = std::upper_bound(file_begin.begin(), file_begin.end(), id);
  return static_cast<uint64_t>(it - file_begin.begin()) - 1;
}

DLFEED_INLINE absl::Status FileLayout::validate() const {
  if (file_begin.empty() || file_begin[0] != 0) {
    return absl::InvalidArgumentError("file layout: file_begin must start with 0");
  }
  for (size_t f = 1; f < file_begin.size(); ++f) {
    if (file_begin[f] < file_begin[f - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("file layout: file_begin decreases at file ", f - 1, " (",
                                                     file_begin[f - 1], " then ", file_begin[f], ")"));
    }
  }
  return absl::OkStatus();
}

DLFEED_INLINE uint64_t FileLayout::fingerprint() const {
  uint64_t h = mix64(file_begin.size());
  for (uint64_t b : file_begin) h = mix64(h ^ b);
  return h;
}

DLFEED_INLINE FileLayout FileLayout::uniform(uint64_t files, uint64_t samples_per_file) {
  FileLayout l;
  l.file_begin.resize(files + 1);
  for (uint64_t f = 0; f <= files; ++f) l.file_begin[f] = f * samples_per_file;
  return l;
}

DLFEED_INLINE FileLayout FileLayout::from_sizes(std::span<const uint64_t> samples_per_file) {
  FileLayout l;
  l.file_begin.reserve(samples_per_file.size() + 1);
  for (uint64_t n : samples_per_file) l.file_begin.push_back(l.file_begin.back() + n);
  return l;
}

DLFEED_INLINE FileLayout FileLayout::of(const SampleIndex& index) {
  FileLayout l;
  l.file_begin = index.file_begin;
  return l;
}

// ---------------------------------------------------------------- orders

DLFEED_INLINE void GlobalOrder::fill(uint64_t pos, std::span<uint64_t> out) const {
  for (size_t k = 0; k < out.size(); ++k) out[k] = at(pos + k);
}

DLFEED_INLINE absl::Status check_order_spec(const FileLayout& layout, const OrderSpec& spec) {
  DLFEED_RETURN_IF_ERROR(layout.validate());
  if (spec.world_size == 0) return absl::InvalidArgumentError("order: world_size must be >= 1");
  if (spec.rank >= spec.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("order: rank ", spec.rank, " is not below world_size ", spec.world_size));
  }
  // An explicit index array read by no built-in strategy but 'explicit' would be passed over in silence.
  if (spec.params.indices != nullptr && spec.strategy != "explicit") {
    for (const auto& name : builtin_strategy_names()) {
      if (name == spec.strategy) {
        return absl::InvalidArgumentError(
            absl::StrCat("order: an explicit index array (indices) is given, but strategy '", spec.strategy,
                         "' does not read one: use strategy 'explicit' for that order, "
                         "or leave indices out"));
      }
    }
  }
  return absl::OkStatus();
}

DLFEED_INLINE absl::StatusOr<std::unique_ptr<GlobalOrder>> make_global_order(const FileLayout& layout,
                                                                             const OrderSpec& spec,
                                                                             const StrategyFactory& factory) {
  DLFEED_RETURN_IF_ERROR(check_order_spec(layout, spec));
  if (!factory) {
    std::string known;
    for (const auto& name : builtin_strategy_names()) absl::StrAppend(&known, known.empty() ? "" : ", ", name);
    return absl::NotFoundError(absl::StrCat("unknown order strategy '", spec.strategy, "' (built in: ", known, ")"));
  }
  DLFEED_ASSIGN_OR_RETURN(auto order, factory(layout, spec));
  if (order == nullptr) return absl::InternalError(absl::StrCat("strategy '", spec.strategy, "' returned null"));
  const auto bounds = order->rank_bounds();
  if (!bounds.empty()) {
    bool ok = bounds.size() == size_t{spec.world_size} + 1 && bounds.front() == 0 && bounds.back() == order->size();
    for (size_t i = 1; ok && i < bounds.size(); ++i) ok = bounds[i] >= bounds[i - 1];
    if (!ok) {
      return absl::InternalError(absl::StrCat("strategy '", spec.strategy, "' returned bad rank bounds"));
    }
  }
  return order;
}

// ---------------------------------------------------------------- state

namespace order_detail {
DLFEED_DETAIL_BEGIN

inline constexpr uint8_t kStateVersion = 1;
// Version 2 appends global_start; states without one stay version 1.
inline constexpr uint8_t kStateVersionGlobalStart = 2;

DLFEED_INLINE void put_varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}

DLFEED_INLINE void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

class Reader {
 public:
  explicit Reader(absl::string_view s) : s_(s) {}
  absl::StatusOr<uint64_t> varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= s_.size()) return error("truncated varint");
      const uint8_t b = static_cast<uint8_t>(s_[p_++]);
      if (shift == 63 && (b & 0x7e) != 0) return error("varint overflows 64 bits");
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    return error("varint longer than 10 bytes");
  }
  absl::StatusOr<uint8_t> byte() {
    if (p_ >= s_.size()) return error("truncated");
    return static_cast<uint8_t>(s_[p_++]);
  }
  absl::StatusOr<uint64_t> u64() {
    if (s_.size() - p_ < 8) return error("truncated u64");
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s_[p_ + i])) << (8 * i);
    p_ += 8;
    return v;
  }
  absl::StatusOr<std::string> bytes(uint64_t n) {
    if (s_.size() - p_ < n) return error("truncated name");
    std::string out(s_.substr(p_, n));
    p_ += n;
    return out;
  }
  bool at_end() const { return p_ == s_.size(); }
  absl::Status error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("order state: at byte ", p_, " of ", s_.size(), ": ", what));
  }

 private:
  absl::string_view s_;
  size_t p_ = 0;
};

DLFEED_DETAIL_END
}  // namespace order_detail

DLFEED_INLINE uint64_t indices_fingerprint(const std::vector<uint64_t>* indices) {
  if (indices == nullptr) return 0;
  uint64_t h = mix64(indices->size() ^ 0x1d1ce5ULL);
  for (uint64_t v : *indices) h = mix64(h ^ v);
  return h == 0 ? 1 : h;
}

DLFEED_INLINE std::string encode_state(const OrderState& st) {
  using namespace order_detail;
  std::string s;
  const bool v2 = st.spec.global_start != 0;
  s.push_back(static_cast<char>(v2 ? kStateVersionGlobalStart : kStateVersion));
  put_varint(s, st.position);
  put_varint(s, st.spec.seed);
  put_varint(s, st.spec.epoch);
  put_varint(s, st.spec.rank);
  put_varint(s, st.spec.world_size);
  s.push_back(static_cast<char>(st.spec.drop_last ? 1 : 0));
  put_varint(s, st.spec.params.buffer_size);
  put_varint(s, st.spec.params.block_size);
  put_varint(s, st.spec.params.window);
  put_u64(s, st.layout_fingerprint);
  put_u64(s, st.indices_fingerprint);
  put_varint(s, st.spec.strategy.size());
  s += st.spec.strategy;
  if (v2) put_varint(s, st.spec.global_start);
  return s;
}

DLFEED_INLINE absl::StatusOr<OrderState> decode_state(absl::string_view bytes) {
  using namespace order_detail;
  Reader r(bytes);
  OrderState st;
  DLFEED_ASSIGN_OR_RETURN(const uint8_t version, r.byte());
  if (version != kStateVersion && version != kStateVersionGlobalStart) {
    return absl::InvalidArgumentError(absl::StrCat("order state: version ", version, ", this build reads versions ",
                                                   kStateVersion, " and ", kStateVersionGlobalStart));
  }
  DLFEED_ASSIGN_OR_RETURN(st.position, r.varint());
  DLFEED_ASSIGN_OR_RETURN(st.spec.seed, r.varint());
  DLFEED_ASSIGN_OR_RETURN(st.spec.epoch, r.varint());
  DLFEED_ASSIGN_OR_RETURN(const uint64_t rank, r.varint());
  DLFEED_ASSIGN_OR_RETURN(const uint64_t world, r.varint());
  if (rank > UINT32_MAX || world > UINT32_MAX) return r.error("rank or world size over 32 bits");
  st.spec.rank = static_cast<uint32_t>(rank);
  st.spec.world_size = static_cast<uint32_t>(world);
  DLFEED_ASSIGN_OR_RETURN(const uint8_t flags, r.byte());
  if (flags > 1) return r.error("unknown flag bits");
  st.spec.drop_last = (flags & 1) != 0;
  DLFEED_ASSIGN_OR_RETURN(st.spec.params.buffer_size, r.varint());
  DLFEED_ASSIGN_OR_RETURN(st.spec.params.block_size, r.varint());
  DLFEED_ASSIGN_OR_RETURN(st.spec.params.window, r.varint());
  DLFEED_ASSIGN_OR_RETURN(st.layout_fingerprint, r.u64());
  DLFEED_ASSIGN_OR_RETURN(st.indices_fingerprint, r.u64());
  DLFEED_ASSIGN_OR_RETURN(const uint64_t name_len, r.varint());
  if (name_len > 1024) return r.error("strategy name longer than 1024 bytes");
  DLFEED_ASSIGN_OR_RETURN(st.spec.strategy, r.bytes(name_len));
  if (version == kStateVersionGlobalStart) {
    DLFEED_ASSIGN_OR_RETURN(st.spec.global_start, r.varint());
    if (st.spec.global_start == 0) return r.error("version 2 with global_start 0 (written as version 1)");
  }
  if (!r.at_end()) return r.error("trailing bytes");
  return st;
}

// ---------------------------------------------------------------- cursor

DLFEED_INLINE absl::StatusOr<OrderCursor> OrderCursor::create(const FileLayout& layout, const OrderSpec& spec,
                                                              const StrategyFactory& factory) {
  DLFEED_ASSIGN_OR_RETURN(std::unique_ptr<GlobalOrder> global, make_global_order(layout, spec, factory));
  OrderCursor c;
  c.spec_ = spec;
  c.layout_fingerprint_ = layout.fingerprint();
  c.global_size_ = global->size();
  c.bounds_ = global->rank_bounds();
  const uint64_t w = spec.world_size;
  if (c.bounds_.empty()) {
    const uint64_t left = c.global_size_ > spec.global_start ? c.global_size_ - spec.global_start : 0;
    c.size_ = spec.drop_last ? left / w : (left + w - 1) / w;
  } else if (spec.global_start != 0 && spec.global_start >= c.global_size_) {
    c.size_ = 0;  // the whole epoch consumed (an elastic restore at its end): nothing left, whatever the partition
  } else {
    if (spec.global_start != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("order: strategy '", spec.strategy,
                       "' partitions samples by rank (its order depends on the world size), "
                       "so it cannot start at global position ",
                       spec.global_start, "; elastic restarts need a strided order"));
    }
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint64_t r = 0; r < w; ++r) {
      const uint64_t n = c.bounds_[r + 1] - c.bounds_[r];
      lo = std::min(lo, n);
      hi = std::max(hi, n);
    }
    c.begin_ = c.bounds_[spec.rank];
    c.part_size_ = c.bounds_[spec.rank + 1] - c.begin_;
    c.size_ = spec.drop_last ? lo : hi;
    if (c.size_ > 0 && lo == 0) {  // refused on every rank alike
      return absl::InvalidArgumentError(
          absl::StrCat("order: strategy '", spec.strategy, "' gives some rank no samples (world_size ", w,
                       ": fewer parts than ranks), so its shard cannot be padded; use fewer ranks or a strided "
                       "strategy (global_shuffle). drop_last would make every rank's epoch as short as the "
                       "shortest: empty"));
    }
  }
  c.global_ = std::move(global);
  return c;
}

DLFEED_INLINE absl::StatusOr<OrderCursor> OrderCursor::from_state(const FileLayout& layout, absl::string_view state,
                                                                  std::shared_ptr<const std::vector<uint64_t>> indices,
                                                                  const StrategyResolver& resolve) {
  DLFEED_ASSIGN_OR_RETURN(OrderState st, decode_state(state));
  if (st.layout_fingerprint != layout.fingerprint()) {
    return absl::FailedPreconditionError(
        "order state: saved for a different file layout (dataset changed since the state was saved)");
  }
  if (st.indices_fingerprint != indices_fingerprint(indices.get())) {
    return absl::FailedPreconditionError(
        "order state: the explicit index array differs from the one the state was saved with");
  }
  st.spec.params.indices = std::move(indices);
  DLFEED_ASSIGN_OR_RETURN(OrderCursor c, create(layout, st.spec, resolve(st.spec.strategy)));
  DLFEED_RETURN_IF_ERROR(c.seek(st.position));
  return c;
}

DLFEED_INLINE uint64_t OrderCursor::global_position(uint64_t i) const {
  if (!bounds_.empty()) return begin_ + (part_size_ == 0 ? 0 : i % part_size_);
  const uint64_t p = spec_.global_start + spec_.rank + i * spec_.world_size;
  return p < global_size_ ? p : p % global_size_;
}

DLFEED_INLINE std::optional<uint64_t> OrderCursor::next() {
  if (pos_ >= size_) return std::nullopt;
  return at(pos_++);
}

DLFEED_INLINE size_t OrderCursor::next(std::span<uint64_t> out) {
  const uint64_t n = std::min<uint64_t>(out.size(), remaining());
  if (n == 0) return 0;
  if (bounds_.empty() && spec_.world_size == 1 && spec_.global_start + pos_ + n <= global_size_) {
    global_->fill(spec_.global_start + pos_, out.first(n));  // a run of the global order
  } else if (!bounds_.empty() && pos_ + n <= part_size_) {
    global_->fill(begin_ + pos_, out.first(n));
  } else {
    for (uint64_t k = 0; k < n; ++k) out[k] = at(pos_ + k);
  }
  pos_ += n;
  return static_cast<size_t>(n);
}

DLFEED_INLINE std::vector<uint64_t> OrderCursor::peek(uint64_t n) const {
  OrderCursor copy = *this;
  std::vector<uint64_t> out(std::min(n, remaining()));
  copy.next(std::span<uint64_t>(out));
  return out;
}

DLFEED_INLINE absl::Status OrderCursor::seek(uint64_t position) {
  if (position > size_) {
    return absl::OutOfRangeError(absl::StrCat("order: position ", position, " is past the rank's ", size_, " ids"));
  }
  pos_ = position;
  return absl::OkStatus();
}

DLFEED_INLINE absl::Status OrderCursor::seek_global(uint64_t consumed) {
  if (!bounds_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "order: strategy '", spec_.strategy, "' partitions samples by rank; seek_global needs a strided order"));
  }
  const uint64_t r = spec_.global_start + spec_.rank, w = spec_.world_size;
  const uint64_t i = consumed <= r ? 0 : (consumed - r + w - 1) / w;
  return seek(std::min(i, size_));
}

DLFEED_INLINE std::string OrderCursor::state() const {
  OrderState st;
  st.spec = spec_;
  st.spec.params.indices = nullptr;
  st.position = pos_;
  st.layout_fingerprint = layout_fingerprint_;
  st.indices_fingerprint = indices_fingerprint(spec_.params.indices.get());
  return encode_state(st);
}

DLFEED_INLINE absl::StatusOr<std::vector<uint64_t>> rank_order(const FileLayout& layout, const OrderSpec& spec,
                                                               const StrategyFactory& factory) {
  DLFEED_ASSIGN_OR_RETURN(OrderCursor c, OrderCursor::create(layout, spec, factory));
  std::vector<uint64_t> out(c.size());
  c.next(std::span<uint64_t>(out));
  return out;
}

}  // namespace dlfeed
