// SPDX-License-Identifier: Apache-2.0
// Shuffle quality of an order, measured: how far it is from the file order
// (randomness) and how much it stays within files (read locality).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "dlfeed/detail/export.h"
#include "dlfeed/order/order.h"

namespace dlfeed::inline DLFEED_ABI {

struct DLFEED_EXPORT OrderStats {
  uint64_t length = 0;      // ids scored
  uint64_t batch_size = 0;  // for distinct_files_per_batch
  /// Mean over positions i of |i / length - id / num_samples|: 0 for the file
  /// order (also for a strided shard of it), about 1/3 for a uniform shuffle.
  double mean_displacement = 0;
  /// Spearman rank correlation between position and id (ties averaged):
  /// 1 for the file order, about 0 for a uniform shuffle.
  double rank_correlation = 0;
  /// Fraction of consecutive pairs read from the same file: near 1 is good
  /// locality, num-files^-1 (roughly) is a uniform shuffle.
  double same_file_fraction = 0;
  /// Mean number of distinct files in the consecutive batches of batch_size
  /// (a final partial batch counts when it is the only one).
  double distinct_files_per_batch = 0;
};

/// Scores `order` (sample ids of `layout`, e.g. one rank's epoch) with
/// batches of `batch_size` (>= 1).
DLFEED_EXPORT OrderStats score(std::span<const uint64_t> order, const FileLayout& layout, uint64_t batch_size);

/// "key: value" lines, one per figure.
DLFEED_EXPORT std::string format_stats(const OrderStats& stats);

}  // namespace dlfeed
