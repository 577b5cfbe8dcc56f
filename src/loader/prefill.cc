// SPDX-License-Identifier: Apache-2.0
#include "loader/prefill.h"

#include <algorithm>

namespace dlfeed::inline DLFEED_ABI::detail {
namespace {
constexpr uint64_t kMaxBatches = 32;
constexpr uint64_t kPage = 4096;

// The bytes of one batch's buffer of a field (0: samples differ or are sized only after decode).
uint64_t field_batch_bytes(const FieldSpec& s, uint32_t batch_size) {
  if (!s.known || s.rank_varies || s.dtype.size == 0) return 0;
  for (const int64_t d : s.shape) {
    if (d < 0) return 0;
  }
  return static_cast<uint64_t>(num_elements(s.shape)) * s.dtype.size * batch_size;
}
}  // namespace

uint64_t prefill_batch_buffers(BufferPool& pool, const std::vector<FieldSpec>& specs, uint32_t batch_size,
                               const prefetch::PrefetchPolicy& policy, uint64_t memory_budget, uint64_t at_least) {
  std::vector<uint64_t> sizes;
  uint64_t batch = 0;
  for (const FieldSpec& s : specs) {
    const uint64_t b = field_batch_bytes(s, batch_size);
    if (b >= at_least) sizes.push_back(b);
    batch += b;
  }
  if (sizes.empty() || batch == 0) return 0;
  // The batches the look-ahead admits from empty, as the budget would (the
  // first always), then the consumer's.
  uint64_t n = 0;
  while (n < kMaxBatches && (n == 0 || (n + 1) * batch <= memory_budget) &&
         policy.admit(prefetch::InFlight{n, n * batch, false, n * batch}, batch)) {
    ++n;
  }
  n = std::max<uint64_t>(n, 1);
  if ((n + 1) * batch <= memory_budget) ++n;
  std::vector<ByteBuffer> made;
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < n; ++i) {
    for (const uint64_t size : sizes) {
      ByteBuffer b = pool.take(size);
      auto* p = reinterpret_cast<volatile unsigned char*>(b.data());
      for (uint64_t at = 0; at < size; at += kPage) p[at] = 0;
      p[size - 1] = 0;
      bytes += size;
      made.push_back(std::move(b));
    }
  }
  for (ByteBuffer& b : made) pool.give(std::move(b));
  return bytes;
}

void open_files_ahead(FileTable& files) {
  // Only when all of them stay open: a larger set's epochs open and close
  // files as its order goes, the first as the later ones.
  if (files.size() > files.max_open() / 2) return;
  for (uint32_t id = 0; id < files.size(); ++id) {
    absl::StatusOr<FileTable::Pin> pin = files.pin(id);
    if (!pin.ok()) return;  // its read says why
  }
}

}  // namespace dlfeed::inline DLFEED_ABI::detail
