// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/plan/plan.h"

#include <algorithm>
#include <numeric>

namespace dlfeed::inline DLFEED_ABI::prefetch {

ReadPlan plan_reads(std::span<const ExtentRef> extents, const CoalesceOptions& options) {
  ReadPlan plan;
  plan.pieces.resize(extents.size());
  std::vector<uint32_t> order(extents.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const ExtentRef& x = extents[a];
    const ExtentRef& y = extents[b];
    if (x.file != y.file) return x.file < y.file;
    if (x.offset != y.offset) return x.offset < y.offset;
    return x.length > y.length;
  });
  size_t i = 0;
  while (i < order.size()) {
    const ExtentRef& first = extents[order[i]];
    plan.requested_bytes += first.length;
    PlannedRead read{first.file, first.offset, first.length, plan.buffer_bytes};
    uint64_t end = first.offset + first.length;
    size_t j = i + 1;
    while (j < order.size()) {
      const ExtentRef& e = extents[order[j]];
      if (e.file != read.file) break;
      const uint64_t e_end = e.offset + e.length;
      const bool inside = e_end <= end;  // overlaps entirely: always share
      if (!inside) {
        if (!options.enabled) break;
        if (e.offset > end + options.max_gap) break;
        if (e_end - read.offset > options.max_read) break;
      }
      plan.requested_bytes += e.length;
      end = std::max(end, e_end);
      ++j;
    }
    read.length = end - read.offset;
    for (size_t k = i; k < j; ++k) {
      const ExtentRef& e = extents[order[k]];
      plan.pieces[order[k]] = {read.buffer_offset + (e.offset - read.offset), e.length};
    }
    plan.buffer_bytes += read.length;
    if (read.length > 0) plan.reads.push_back(read);
    i = j;
  }
  return plan;
}

}  // namespace dlfeed::prefetch
