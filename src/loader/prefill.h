// SPDX-License-Identifier: Apache-2.0
// Private: the batch buffers the first epoch's read-ahead will take, made
// and touched at create (Loader::create's last step).
#pragma once

#include <cstdint>
#include <vector>

#include "dlfeed/batch/batch.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/plan/policy.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// Puts in `pool` the field buffers of as many full batches as the
/// read-ahead holds at once (as `policy` admits them from empty, within
/// `memory_budget`, plus the one the consumer has), each touched page by
/// page: the kernel backs their fresh memory now, so the first epoch's reads
/// and copies land in memory as ready as the later epochs'. Only fields whose
/// samples all have one known size, and only when a batch's buffer of them is
/// at least `at_least` bytes (smaller ones cost little to back). Returns the
/// bytes put in the pool.
uint64_t prefill_batch_buffers(BufferPool& pool, const std::vector<FieldSpec>& specs, uint32_t batch_size,
                               const prefetch::PrefetchPolicy& policy, uint64_t memory_budget,
                               uint64_t at_least = 256 * 1024);

/// Opens the table's files now (each pinned once and let go) when they are
/// at most half of what it keeps open, so the first epoch's reads find
/// descriptors as the later epochs' do. A file that fails to open is left to
/// its first read, which reports it.
void open_files_ahead(FileTable& files);

}  // namespace dlfeed::inline DLFEED_ABI::detail
