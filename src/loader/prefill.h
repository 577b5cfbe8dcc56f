// SPDX-License-Identifier: Apache-2.0
// Private: the batch buffers the first epoch's read-ahead will take, made
// and touched at create (Loader::create's last step).
#pragma once

#include <cstdint>
#include <vector>

#include "dlfeed/batch/batch.h"
#include "dlfeed/plan/policy.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// Puts in `pool` the field buffers of the batches the read-ahead holds at
/// once in the first epoch, each touched page by page, so that the kernel
/// backs their fresh memory now and the first epoch's reads and copies land
/// in memory as ready as the later epochs'. As many batches as `policy`
/// admits from empty, and the consumer's two (the batch handed over and the
/// one still held), at most the epoch's
/// (`samples_per_epoch` in batches of `batch_size`), so that the admission's
/// trim of the pool (memory_budget less the batches in flight) keeps every
/// one, and at most a quarter of `memory_budget` in all. Only fields whose
/// samples all have one known size, and only buffers of at least `at_least`
/// bytes (smaller ones cost little to back). An allocation that fails ends it
/// (it only saves time). Returns the bytes put in the pool.
uint64_t prefill_batch_buffers(BufferPool& pool, const std::vector<FieldSpec>& specs, uint32_t batch_size,
                               uint64_t samples_per_epoch, const prefetch::PrefetchPolicy& policy,
                               uint64_t memory_budget, uint64_t at_least = 256 * 1024);

}  // namespace dlfeed::inline DLFEED_ABI::detail
