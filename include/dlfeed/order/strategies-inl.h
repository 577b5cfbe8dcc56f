// SPDX-License-Identifier: Apache-2.0
// The built-in order strategies. Each is a factory of one epoch's global
// order; every random draw comes from SplitMix64 keyed by
// derive_key(seed, epoch, <stream tag of the strategy>), see random.h.
// Header tier (dlfeed/detail/inline.h): pure functions, no registry; the
// registry (src/order/registry.cc) starts from builtin_strategy().
#pragma once

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/inline.h"
#include "dlfeed/error.h"
#include "dlfeed/order/order.h"
#include "dlfeed/order/random.h"

namespace dlfeed::inline DLFEED_ABI {
namespace order_detail {
DLFEED_DETAIL_BEGIN

// Stream tags: one per independent draw, so strategies never share a stream.
inline constexpr uint64_t kFilePermTag = 0x66696c655f706572ULL;   // "file_per"
inline constexpr uint64_t kLocalTag = 0x6c6f63616c5f7368ULL;      // "local_sh" (+ rank)
inline constexpr uint64_t kBufferTag = 0x6275666665725f73ULL;     // "buffer_s"
inline constexpr uint64_t kBlockPermTag = 0x626c6f636b5f7065ULL;  // "block_pe"
inline constexpr uint64_t kWindowTag = 0x77696e646f775f73ULL;     // "window_s"
inline constexpr uint64_t kGlobalTag = 0x676c6f62616c5f73ULL;     // "global_s"
inline constexpr uint64_t kFeistelTag = 0x6665697374656c5fULL;    // "feistel_"

using OrderOr = absl::StatusOr<std::unique_ptr<GlobalOrder>>;

/// A global order held as an explicit array.
class MaterializedOrder : public GlobalOrder {
 public:
  explicit MaterializedOrder(std::vector<uint64_t> ids, std::vector<uint64_t> bounds = {})
      : ids_(std::move(ids)), bounds_(std::move(bounds)) {}
  uint64_t size() const override { return ids_.size(); }
  uint64_t at(uint64_t pos) const override { return ids_[pos]; }
  void fill(uint64_t pos, std::span<uint64_t> out) const override {
    std::copy_n(ids_.begin() + static_cast<ptrdiff_t>(pos), out.size(), out.begin());
  }
  std::vector<uint64_t> rank_bounds() const override { return bounds_; }

 private:
  std::vector<uint64_t> ids_;
  std::vector<uint64_t> bounds_;
};

// ---- sequential: file order, sample order.
class SequentialOrder : public GlobalOrder {
 public:
  explicit SequentialOrder(uint64_t n) : n_(n) {}
  uint64_t size() const override { return n_; }
  uint64_t at(uint64_t pos) const override { return pos; }
  void fill(uint64_t pos, std::span<uint64_t> out) const override { std::iota(out.begin(), out.end(), pos); }

 private:
  uint64_t n_;
};

/// The files of `layout` in Fisher-Yates order under `key`.
DLFEED_INLINE std::vector<uint64_t> permuted_files(const FileLayout& layout, uint64_t key) {
  std::vector<uint64_t> files(layout.num_files());
  std::iota(files.begin(), files.end(), uint64_t{0});
  SplitMix64 rng(key);
  fisher_yates(std::span<uint64_t>(files), rng);
  return files;
}

// ---- file_shuffle: files permuted per epoch, samples in order within a file.
// O(files) memory: at() finds the file by binary search over the permuted
// files' start positions.
class FileShuffleOrder : public GlobalOrder {
 public:
  FileShuffleOrder(const FileLayout& layout, uint64_t key)
      : file_begin_(layout.file_begin), perm_(permuted_files(layout, key)) {
    start_.reserve(perm_.size() + 1);
    start_.push_back(0);
    for (uint64_t f : perm_) start_.push_back(start_.back() + (file_begin_[f + 1] - file_begin_[f]));
  }
  uint64_t size() const override { return start_.back(); }
  uint64_t at(uint64_t pos) const override {
    const size_t k = static_cast<size_t>(std::upper_bound(start_.begin(), start_.end(), pos) - start_.begin()) - 1;
    return file_begin_[perm_[k]] + (pos - start_[k]);
  }
  void fill(uint64_t pos, std::span<uint64_t> out) const override {
    if (out.empty()) return;
    size_t k = static_cast<size_t>(std::upper_bound(start_.begin(), start_.end(), pos) - start_.begin()) - 1;
    size_t i = 0;
    while (i < out.size()) {
      const uint64_t off = pos + i - start_[k];
      const uint64_t n = std::min<uint64_t>(start_[k + 1] - start_[k] - off, out.size() - i);
      std::iota(out.begin() + static_cast<ptrdiff_t>(i), out.begin() + static_cast<ptrdiff_t>(i + n),
                file_begin_[perm_[k]] + off);
      i += n;
      ++k;
    }
  }
  /// Calls f(id) for every id of the order, in order.
  template <typename F>
  void for_each(F&& f) const {
    for (uint64_t file : perm_) {
      for (uint64_t id = file_begin_[file]; id < file_begin_[file + 1]; ++id) f(id);
    }
  }

 private:
  std::vector<uint64_t> file_begin_;
  std::vector<uint64_t> perm_;   // permuted file numbers
  std::vector<uint64_t> start_;  // start_[k]: global position of perm_[k]'s first sample
};

DLFEED_INLINE OrderOr make_sequential(const FileLayout& layout, const OrderSpec&) {
  return std::make_unique<SequentialOrder>(layout.num_samples());
}

DLFEED_INLINE OrderOr make_file_shuffle(const FileLayout& layout, const OrderSpec& spec) {
  return std::make_unique<FileShuffleOrder>(layout, derive_key(spec.seed, spec.epoch, kFilePermTag));
}

// ---- local_shuffle: file f belongs to rank f % world_size; each rank's part
// is all samples of its files, Fisher-Yates shuffled under a per-rank key.
DLFEED_INLINE OrderOr make_local_shuffle(const FileLayout& layout, const OrderSpec& spec) {
  const uint64_t w = spec.world_size;
  std::vector<uint64_t> ids;
  ids.reserve(layout.num_samples());
  std::vector<uint64_t> bounds{0};
  for (uint64_t r = 0; r < w; ++r) {
    const size_t begin = ids.size();
    for (uint64_t f = r; f < layout.num_files(); f += w) {
      for (uint64_t id = layout.file_begin[f]; id < layout.file_begin[f + 1]; ++id) ids.push_back(id);
    }
    SplitMix64 rng(derive_key(spec.seed, spec.epoch, kLocalTag + r));
    fisher_yates(std::span<uint64_t>(ids).subspan(begin), rng);
    bounds.push_back(ids.size());
  }
  return std::make_unique<MaterializedOrder>(std::move(ids), std::move(bounds));
}

// ---- buffered_shuffle: tf.data's shuffle buffer over the file_shuffle
// stream. The buffer is filled with the first buffer_size ids; then each
// output is buffer[j], j uniform, replaced by the next stream id; once the
// stream is exhausted, buffer[j] is replaced by the buffer's last id.
DLFEED_INLINE OrderOr make_buffered_shuffle(const FileLayout& layout, const OrderSpec& spec) {
  const uint64_t cap = spec.params.buffer_size;
  if (cap == 0) return absl::InvalidArgumentError("buffered_shuffle: buffer_size must be >= 1");
  FileShuffleOrder input(layout, derive_key(spec.seed, spec.epoch, kFilePermTag));
  SplitMix64 rng(derive_key(spec.seed, spec.epoch, kBufferTag));
  std::vector<uint64_t> out;
  out.reserve(layout.num_samples());
  std::vector<uint64_t> buf;
  buf.reserve(std::min(cap, layout.num_samples()));
  input.for_each([&](uint64_t id) {
    if (buf.size() < cap) {
      buf.push_back(id);
      return;
    }
    const uint64_t j = rng.bounded(buf.size());
    out.push_back(buf[j]);
    buf[j] = id;
  });
  while (!buf.empty()) {
    const uint64_t j = rng.bounded(buf.size());
    out.push_back(buf[j]);
    buf[j] = buf.back();
    buf.pop_back();
  }
  return std::make_unique<MaterializedOrder>(std::move(out));
}

// ---- block_shuffle: blocks [kB, (k+1)B) of the id space are permuted
// (Fisher-Yates), then the ids of each run of `window` consecutive blocks of
// that permuted stream are Fisher-Yates shuffled among themselves.
DLFEED_INLINE OrderOr make_block_shuffle(const FileLayout& layout, const OrderSpec& spec) {
  const uint64_t b = spec.params.block_size, w = spec.params.window;
  if (b == 0 || w == 0) return absl::InvalidArgumentError("block_shuffle: block_size and window must be >= 1");
  const uint64_t n = layout.num_samples();
  const uint64_t nb = n / b + (n % b != 0 ? 1 : 0);
  std::vector<uint64_t> blocks(nb);
  std::iota(blocks.begin(), blocks.end(), uint64_t{0});
  SplitMix64 block_rng(derive_key(spec.seed, spec.epoch, kBlockPermTag));
  fisher_yates(std::span<uint64_t>(blocks), block_rng);
  SplitMix64 window_rng(derive_key(spec.seed, spec.epoch, kWindowTag));
  std::vector<uint64_t> out;
  out.reserve(n);
  for (uint64_t k = 0; k < nb; k += w) {
    const size_t begin = out.size();
    for (uint64_t j = k; j < std::min(k + w, nb); ++j) {
      const uint64_t lo = blocks[j] * b;  // < n, so no overflow
      for (uint64_t id = lo; id < lo + std::min(b, n - lo); ++id) out.push_back(id);
    }
    fisher_yates(std::span<uint64_t>(out).subspan(begin), window_rng);
  }
  return std::make_unique<MaterializedOrder>(std::move(out));
}

// ---- global_shuffle: Fisher-Yates over all ids.
DLFEED_INLINE OrderOr make_global_shuffle(const FileLayout& layout, const OrderSpec& spec) {
  std::vector<uint64_t> ids(layout.num_samples());
  std::iota(ids.begin(), ids.end(), uint64_t{0});
  SplitMix64 rng(derive_key(spec.seed, spec.epoch, kGlobalTag));
  fisher_yates(std::span<uint64_t>(ids), rng);
  return std::make_unique<MaterializedOrder>(std::move(ids));
}

// ---- global_feistel: position p holds FeistelPermutation(n, key)(p); O(1) memory.
class FeistelOrder : public GlobalOrder {
 public:
  FeistelOrder(uint64_t n, uint64_t key) : perm_(n, key) {}
  uint64_t size() const override { return perm_.size(); }
  uint64_t at(uint64_t pos) const override { return perm_(pos); }

 private:
  FeistelPermutation perm_;
};

DLFEED_INLINE OrderOr make_global_feistel(const FileLayout& layout, const OrderSpec& spec) {
  return std::make_unique<FeistelOrder>(layout.num_samples(), derive_key(spec.seed, spec.epoch, kFeistelTag));
}

// ---- explicit: the caller's array, the same every epoch.
class ExplicitOrder : public GlobalOrder {
 public:
  explicit ExplicitOrder(std::shared_ptr<const std::vector<uint64_t>> ids) : ids_(std::move(ids)) {}
  uint64_t size() const override { return ids_->size(); }
  uint64_t at(uint64_t pos) const override { return (*ids_)[pos]; }
  void fill(uint64_t pos, std::span<uint64_t> out) const override {
    std::copy_n(ids_->begin() + static_cast<ptrdiff_t>(pos), out.size(), out.begin());
  }

 private:
  std::shared_ptr<const std::vector<uint64_t>> ids_;
};

DLFEED_INLINE OrderOr make_explicit(const FileLayout& layout, const OrderSpec& spec) {
  if (spec.params.indices == nullptr) {
    return absl::InvalidArgumentError("explicit order: OrderParams::indices is not set");
  }
  const auto& ids = *spec.params.indices;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= layout.num_samples()) {
      return absl::OutOfRangeError(absl::StrCat("explicit order: indices[", i, "] = ", ids[i], " is not below the ",
                                                layout.num_samples(), " samples"));
    }
  }
  return std::make_unique<ExplicitOrder>(spec.params.indices);
}

DLFEED_DETAIL_END
}  // namespace order_detail

DLFEED_INLINE StrategyFactory builtin_strategy(absl::string_view name) {
  using namespace order_detail;
  if (name == "sequential") return make_sequential;
  if (name == "file_shuffle") return make_file_shuffle;
  if (name == "local_shuffle") return make_local_shuffle;
  if (name == "buffered_shuffle") return make_buffered_shuffle;
  if (name == "block_shuffle") return make_block_shuffle;
  if (name == "global_shuffle") return make_global_shuffle;
  if (name == "global_feistel") return make_global_feistel;
  if (name == "explicit") return make_explicit;
  return {};
}

DLFEED_INLINE std::vector<std::string> builtin_strategy_names() {
  return {"block_shuffle",  "buffered_shuffle", "explicit",      "file_shuffle",
          "global_feistel", "global_shuffle",   "local_shuffle", "sequential"};
}

DLFEED_INLINE std::string describe_order(const OrderSpec& spec, uint64_t indices_fp) {
  const bool builtin = static_cast<bool>(builtin_strategy(spec.strategy));
  std::string out =
      absl::StrCat("strategy ", spec.strategy, " seed ", spec.seed, " drop_last ", spec.drop_last ? 1 : 0);
  if (!builtin || spec.strategy == "buffered_shuffle") absl::StrAppend(&out, " buffer_size ", spec.params.buffer_size);
  if (!builtin || spec.strategy == "block_shuffle") {
    absl::StrAppend(&out, " block_size ", spec.params.block_size, " window ", spec.params.window);
  }
  if (!builtin || spec.strategy == "explicit") {
    absl::StrAppend(&out, " indices ", indices_fp == 0 ? "none" : absl::StrCat("fingerprint ", absl::Hex(indices_fp)));
  }
  return out;
}

}  // namespace dlfeed
