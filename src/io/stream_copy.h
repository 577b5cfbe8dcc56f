// SPDX-License-Identifier: Apache-2.0
// Private: copies of large samples from held files into batch buffers.
#pragma once

#include <cstddef>

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// Copies at least this many bytes with streaming (non-temporal) stores.
inline constexpr size_t kStreamCopyAtLeast = 256 * 1024;

/// memcpy(dst, src, n), with stores that bypass the CPU's caches where the
/// CPU has AVX2 and n >= kStreamCopyAtLeast. A batch of large samples does
/// not fit the caches anyway; a plain copy first reads each destination line
/// it is about to overwrite, a third of the memory traffic. 1 MiB and 4 MiB
/// samples gathered into 16 MiB batches copy 1.3-1.4x faster this way
/// (docs/performance.md); 64 KiB pieces gain nothing, so smaller copies stay
/// memcpy. The regions must not overlap.
void copy_large(void* dst, const void* src, size_t n);

}  // namespace dlfeed::detail
