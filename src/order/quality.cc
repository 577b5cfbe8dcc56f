// SPDX-License-Identifier: Apache-2.0
// Shuffle quality figures of an order.
#include "dlfeed/order/quality.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_format.h"

namespace dlfeed::inline DLFEED_ABI {

OrderStats score(std::span<const uint64_t> order, const FileLayout& layout, uint64_t batch_size) {
  OrderStats s;
  const uint64_t n = order.size();
  s.length = n;
  s.batch_size = std::max<uint64_t>(batch_size, 1);
  if (n == 0) return s;
  const double total = static_cast<double>(std::max<uint64_t>(layout.num_samples(), 1));

  std::vector<uint64_t> file(n);
  for (uint64_t i = 0; i < n; ++i) file[i] = layout.file_of(order[i]);

  double disp = 0;
  for (uint64_t i = 0; i < n; ++i) {
    disp += std::fabs(static_cast<double>(i) / static_cast<double>(n) - static_cast<double>(order[i]) / total);
  }
  s.mean_displacement = disp / static_cast<double>(n);

  // Spearman: Pearson correlation of position (0..n-1) with the id's rank
  // among the scored ids (ties get their average rank).
  if (n >= 2) {
    std::vector<uint64_t> by_id(n);
    std::iota(by_id.begin(), by_id.end(), uint64_t{0});
    std::sort(by_id.begin(), by_id.end(),
              [&](uint64_t a, uint64_t b) { return order[a] != order[b] ? order[a] < order[b] : a < b; });
    std::vector<double> id_rank(n);
    for (uint64_t i = 0; i < n;) {
      uint64_t j = i;
      while (j + 1 < n && order[by_id[j + 1]] == order[by_id[i]]) ++j;
      const double avg = (static_cast<double>(i) + static_cast<double>(j)) / 2.0;
      for (uint64_t k = i; k <= j; ++k) id_rank[by_id[k]] = avg;
      i = j + 1;
    }
    const double mean = (static_cast<double>(n) - 1) / 2.0;
    double sxy = 0, sxx = 0, syy = 0;
    for (uint64_t i = 0; i < n; ++i) {
      const double dx = static_cast<double>(i) - mean, dy = id_rank[i] - mean;
      sxy += dx * dy;
      sxx += dx * dx;
      syy += dy * dy;
    }
    s.rank_correlation = (sxx > 0 && syy > 0) ? sxy / std::sqrt(sxx * syy) : 0.0;

    uint64_t same = 0;
    for (uint64_t i = 1; i < n; ++i) same += file[i] == file[i - 1] ? 1 : 0;
    s.same_file_fraction = static_cast<double>(same) / static_cast<double>(n - 1);
  } else {
    s.rank_correlation = 1.0;
    s.same_file_fraction = 0.0;
  }

  const uint64_t bs = s.batch_size;
  const uint64_t batches = n / bs == 0 ? 1 : n / bs;
  const uint64_t per = n / bs == 0 ? n : bs;
  double distinct = 0;
  std::vector<uint64_t> tmp;
  for (uint64_t b = 0; b < batches; ++b) {
    tmp.assign(file.begin() + static_cast<ptrdiff_t>(b * per), file.begin() + static_cast<ptrdiff_t>((b + 1) * per));
    std::sort(tmp.begin(), tmp.end());
    distinct += static_cast<double>(std::unique(tmp.begin(), tmp.end()) - tmp.begin());
  }
  s.distinct_files_per_batch = distinct / static_cast<double>(batches);
  return s;
}

std::string format_stats(const OrderStats& s) {
  return absl::StrFormat(
      "length: %d\n"
      "mean_displacement: %.6f\n"
      "rank_correlation: %.6f\n"
      "same_file_fraction: %.6f\n"
      "batch_size: %d\n"
      "distinct_files_per_batch: %.3f\n",
      s.length, s.mean_displacement, s.rank_correlation, s.same_file_fraction, s.batch_size,
      s.distinct_files_per_batch);
}

}  // namespace dlfeed
