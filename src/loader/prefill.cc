// SPDX-License-Identifier: Apache-2.0
#include "loader/prefill.h"

#include <algorithm>
#include <new>

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
                               uint64_t samples_per_epoch, const prefetch::PrefetchPolicy& policy,
                               uint64_t memory_budget, uint64_t at_least) {
  if (batch_size == 0 || samples_per_epoch == 0) return 0;
  // A batch of fewer samples than batch_size (a shard smaller than one) takes
  // buffers of its own size: the pool hands out none more than twice as big.
  const auto samples = static_cast<uint32_t>(std::min<uint64_t>(batch_size, samples_per_epoch));
  std::vector<uint64_t> sizes;
  uint64_t batch = 0;
  for (const FieldSpec& s : specs) {
    const uint64_t b = field_batch_bytes(s, samples);
    if (b >= at_least) sizes.push_back(b);
    batch += b;
  }
  if (sizes.empty() || batch == 0) return 0;
  // The batches the look-ahead admits from empty, the first always, and the
  // consumer's two (the one it is handed and the one it still holds: Python's
  // `for b in loader` lets the last go only when the next arrives); within the epoch, and such that a second
  // admission's trim (to memory_budget less two batches) keeps the rest.
  const uint64_t in_epoch = (samples_per_epoch + batch_size - 1) / batch_size;
  uint64_t n = 0;
  while (n < kMaxBatches && policy.admit(prefetch::InFlight{n, n * batch, false, n * batch}, batch)) ++n;
  n = std::min({n + 2, in_epoch, memory_budget / batch > 0 ? memory_budget / batch - 1 : 0, memory_budget / 4 / batch});
  std::vector<ByteBuffer> made;
  uint64_t bytes = 0;
  try {
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
  } catch (const std::bad_alloc&) {
    // Memory the reads will ask for anyway: they say so then, if it is still short.
  }
  for (ByteBuffer& b : made) pool.give(std::move(b));
  return bytes;
}

}  // namespace dlfeed::inline DLFEED_ABI::detail
