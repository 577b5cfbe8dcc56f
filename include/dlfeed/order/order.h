// SPDX-License-Identifier: Apache-2.0
// The sample order: which sample ids one rank reads in one epoch, as a pure
// function of (file layout, strategy, seed, epoch, rank, world size). Pure, so
// it is known ahead (prefetch looks ahead over it), identical on every rank
// without communication, and resumable from a small state.
//
//   dlfeed::OrderSpec spec;
//   spec.strategy = "global_shuffle";
//   spec.seed = 42; spec.epoch = 3; spec.rank = 1; spec.world_size = 8;
//   auto cursor = dlfeed::OrderCursor::create(dlfeed::FileLayout::of(index), spec);
//   while (auto id = cursor->next()) read(*id);
//
// How it works: a strategy gives the epoch's *global* order (a sequence of
// all sample ids, which for every strategy but local_shuffle does not depend
// on the world size); the cursor cuts it for the rank. The cut is strided:
// rank r reads global positions r, r + W, r + 2W, ... so that at any step the
// W ranks together have consumed a prefix of the global order, which is what
// makes a restart on a different number of ranks exact (seek_global).
// See docs/shuffle.md for the strategies.
//
// Header tier: everything here but the strategy registry (register_strategy,
// strategy_names, and the overloads without a factory, which look the name
// up in it) works from #include alone with dlfeed::headers; there, pass
// builtin_strategy(spec.strategy) (or your own factory) explicitly:
//   auto cursor = dlfeed::OrderCursor::create(layout, spec, dlfeed::builtin_strategy(spec.strategy));
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI {

struct SampleIndex;

/// The file boundaries of a dataset: all the order stage needs to know.
/// File f holds sample ids [file_begin[f], file_begin[f+1]).
struct DLFEED_EXPORT FileLayout {
  std::vector<uint64_t> file_begin{0};

  uint64_t num_samples() const { return file_begin.empty() ? 0 : file_begin.back(); }
  uint64_t num_files() const { return file_begin.empty() ? 0 : file_begin.size() - 1; }
  /// The file holding sample `id` (id < num_samples()); O(log files).
  uint64_t file_of(uint64_t id) const;
  /// OK when file_begin starts at 0 and never decreases.
  absl::Status validate() const;
  /// A hash of the boundaries, stored in resume states to catch a resume
  /// against a different dataset.
  uint64_t fingerprint() const;

  /// `files` files of `samples_per_file` samples each.
  static FileLayout uniform(uint64_t files, uint64_t samples_per_file);
  /// Files of the given sample counts.
  static FileLayout from_sizes(std::span<const uint64_t> samples_per_file);
  /// The boundaries of an index (copies file_begin only).
  static FileLayout of(const SampleIndex& index);
};

/// Parameters of the strategies that have any (others ignore them).
struct DLFEED_EXPORT OrderParams {
  uint64_t buffer_size = 1024;  // buffered_shuffle: shuffle buffer, in samples
  uint64_t block_size = 64;     // block_shuffle: B, samples per contiguous block
  uint64_t window = 16;         // block_shuffle: W, blocks per shuffling window
  /// explicit: the global order itself (any ids < num_samples, repeats allowed).
  std::shared_ptr<const std::vector<uint64_t>> indices;
};

/// Everything that determines a rank's order in one epoch.
struct DLFEED_EXPORT OrderSpec {
  /// One of strategy_names(): sequential, file_shuffle, local_shuffle,
  /// buffered_shuffle, block_shuffle, global_shuffle, global_feistel,
  /// explicit, or a name given to register_strategy().
  std::string strategy = "sequential";
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  /// Shards must have equal length (this is about the ranks' shards, not
  /// batches: LoaderOptions::drop_last_batch drops a rank's short last
  /// batch; Python shard_drop_last=, CLI --drop-last). true: the global order's last
  /// (size % world_size) positions are not read this epoch. false (padding):
  /// the shards are filled up to ceil(size / world_size) with the global
  /// order's first positions again (global position p >= size reads p - size).
  bool drop_last = false;
  /// Global positions before this one were consumed before a restart on
  /// another world size (elastic resume): the cut starts here, so rank r
  /// reads global_start + r, + W, ... and the shards are cut (padded or
  /// dropped as above) from the remaining global_size - global_start
  /// positions. 0 for a whole epoch. Strided strategies only.
  uint64_t global_start = 0;
  OrderParams params;
};

/// One epoch's global order: what a strategy produces.
class DLFEED_EXPORT GlobalOrder {
 public:
  virtual ~GlobalOrder() = default;
  /// Length of the global order (num_samples for every built-in strategy
  /// but explicit).
  virtual uint64_t size() const = 0;
  /// The sample id at global position `pos` (pos < size()). Thread-safe.
  virtual uint64_t at(uint64_t pos) const = 0;
  /// out[k] = at(pos + k). Override where a run is cheaper than lookups.
  virtual void fill(uint64_t pos, std::span<uint64_t> out) const;
  /// Empty (the default): the cursor cuts the order by stride. Otherwise
  /// world_size + 1 bounds: rank r reads the positions [b[r], b[r+1]) (how
  /// local_shuffle keeps each rank on its own files).
  virtual std::vector<uint64_t> rank_bounds() const { return {}; }
};

/// Makes one epoch's global order. Must be a pure function of its arguments
/// (rank is given for information; only partitioned strategies may use
/// world_size).
using StrategyFactory =
    std::function<absl::StatusOr<std::unique_ptr<GlobalOrder>>(const FileLayout& layout, const OrderSpec& spec)>;

/// Finds a strategy's factory by name (empty when unknown).
using StrategyResolver = std::function<StrategyFactory(absl::string_view name)>;

/// The built-in strategy `name` (empty for any other name). Header tier.
DLFEED_EXPORT StrategyFactory builtin_strategy(absl::string_view name);
/// The built-in names, sorted. Header tier.
DLFEED_EXPORT std::vector<std::string> builtin_strategy_names();
/// What decides an order besides rank, world size and epoch, as text:
/// "strategy block_shuffle seed 21 drop_last 0 block_size 4 window 16". It
/// names the parameters the strategy reads (a built-in one's; a registered
/// strategy's: all of them), explicit's index array by `indices_fp`
/// (indices_fingerprint). Ranks of a job compare it; a restore compares the
/// state's with the loader's.
DLFEED_EXPORT std::string describe_order(const OrderSpec& spec, uint64_t indices_fp);
/// OK when `layout` is valid and spec.rank < spec.world_size. Header tier.
DLFEED_EXPORT absl::Status check_order_spec(const FileLayout& layout, const OrderSpec& spec);
/// The global order of spec.epoch made by `factory` (NotFound when it is
/// empty), with the layout, rank and the factory's rank bounds checked. Header tier.
DLFEED_EXPORT absl::StatusOr<std::unique_ptr<GlobalOrder>> make_global_order(const FileLayout& layout,
                                                                             const OrderSpec& spec,
                                                                             const StrategyFactory& factory);

/// Adds a strategy under `name`; AlreadyExists if the name is taken.
DLFEED_EXPORT absl::Status register_strategy(const std::string& name, StrategyFactory factory);
/// The registered names, sorted.
DLFEED_EXPORT std::vector<std::string> strategy_names();
/// The registered factory of `name` (empty when unknown); a StrategyResolver.
DLFEED_EXPORT StrategyFactory registered_strategy(absl::string_view name);
/// The global order of spec.epoch under spec.strategy, from the registry.
DLFEED_EXPORT absl::StatusOr<std::unique_ptr<GlobalOrder>> make_global_order(const FileLayout& layout,
                                                                             const OrderSpec& spec);

/// A resume point: what state() encodes.
struct DLFEED_EXPORT OrderState {
  OrderSpec spec;  // params.indices is not stored (only its fingerprint)
  uint64_t position = 0;
  uint64_t layout_fingerprint = 0;
  uint64_t indices_fingerprint = 0;  // 0 when spec.params.indices is null
};

/// The serialized form (bytes, about 30 + strategy-name bytes):
///   u8 version (1, or 2 when spec.global_start != 0)
///   varint position, seed, epoch, rank, world_size   (unsigned LEB128)
///   u8 flags (bit 0: drop_last)
///   varint buffer_size, block_size, window
///   u64 layout_fingerprint, u64 indices_fingerprint (little-endian)
///   varint name length, then the strategy name
///   version 2 only: varint global_start
DLFEED_EXPORT std::string encode_state(const OrderState& state);
DLFEED_EXPORT absl::StatusOr<OrderState> decode_state(absl::string_view bytes);
/// Fingerprint of an explicit index array (0 for null).
DLFEED_EXPORT uint64_t indices_fingerprint(const std::vector<uint64_t>* indices);

/// One rank's ids in one epoch, with a position. Copies share the global
/// order and move independently (a prefetcher can look ahead on a copy).
class DLFEED_EXPORT OrderCursor {
 public:
  /// The cursor of spec.strategy from the registry (libdlfeed).
  static absl::StatusOr<OrderCursor> create(const FileLayout& layout, const OrderSpec& spec);
  /// The cursor of the order `factory` makes (header tier).
  static absl::StatusOr<OrderCursor> create(const FileLayout& layout, const OrderSpec& spec,
                                            const StrategyFactory& factory);
  /// Restores a cursor from state(): the same remaining sequence. `indices`
  /// must be the same array when the strategy is explicit. (libdlfeed)
  static absl::StatusOr<OrderCursor> from_state(const FileLayout& layout, absl::string_view state,
                                                std::shared_ptr<const std::vector<uint64_t>> indices = nullptr);
  /// The same with the state's strategy name resolved by `resolve`, e.g.
  /// dlfeed::builtin_strategy (header tier).
  static absl::StatusOr<OrderCursor> from_state(const FileLayout& layout, absl::string_view state,
                                                std::shared_ptr<const std::vector<uint64_t>> indices,
                                                const StrategyResolver& resolve);

  const OrderSpec& spec() const { return spec_; }
  /// Number of ids this rank reads this epoch (equal on all ranks).
  uint64_t size() const { return size_; }
  uint64_t position() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  bool done() const { return pos_ >= size_; }

  /// The rank's i-th id (i < size()), regardless of the position.
  uint64_t at(uint64_t i) const { return global_->at(global_position(i)); }
  /// The position in the global order (modulo its size) of the rank's i-th id.
  uint64_t global_position(uint64_t i) const;

  /// The next id, or nullopt at the end of the epoch.
  std::optional<uint64_t> next();
  /// Fills `out` with the next ids; returns how many (less at the end).
  size_t next(std::span<uint64_t> out);
  /// The next min(n, remaining()) ids without moving.
  std::vector<uint64_t> peek(uint64_t n) const;
  /// Moves to rank position `position` (<= size()).
  absl::Status seek(uint64_t position);
  /// Moves to the first id whose global position is >= `consumed`: after W
  /// ranks each read k ids, the job has consumed global positions [0, k*W);
  /// a restarted job with any world size resumes with seek_global(k*W).
  /// Strided strategies only. The new world's shards may then differ in
  /// length by one; OrderSpec::global_start = k*W instead gives equal shards
  /// of the remainder (what Loader::restore does on a new world size).
  absl::Status seek_global(uint64_t consumed);
  /// The global positions the whole job has consumed when every rank is at
  /// rank position `position`: global_start + position * world_size (strided
  /// strategies; may exceed the global size by the padding).
  uint64_t consumed_global(uint64_t position) const { return spec_.global_start + position * spec_.world_size; }

  /// The resume state at the current position (see encode_state()).
  std::string state() const;
  const GlobalOrder& global_order() const { return *global_; }

 private:
  OrderCursor() = default;
  OrderSpec spec_;
  uint64_t layout_fingerprint_ = 0;
  std::shared_ptr<const GlobalOrder> global_;
  uint64_t global_size_ = 0;
  std::vector<uint64_t> bounds_;  // non-empty for partitioned orders
  uint64_t begin_ = 0;            // partitioned: this rank's first global position
  uint64_t part_size_ = 0;        // partitioned: this rank's own part size
  uint64_t size_ = 0;
  uint64_t pos_ = 0;
};

/// All ids of spec.rank in spec.epoch (strategy from the registry).
DLFEED_EXPORT absl::StatusOr<std::vector<uint64_t>> rank_order(const FileLayout& layout, const OrderSpec& spec);
/// All ids of spec.rank in spec.epoch, of the order `factory` makes (header tier).
DLFEED_EXPORT absl::StatusOr<std::vector<uint64_t>> rank_order(const FileLayout& layout, const OrderSpec& spec,
                                                               const StrategyFactory& factory);

}  // namespace dlfeed

#include "dlfeed/detail/inline.h"
#ifdef DLFEED_HEADER_ONLY
#include "dlfeed/order/order-inl.h"
#endif
