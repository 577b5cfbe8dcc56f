// SPDX-License-Identifier: Apache-2.0
// Private: anonymous memory in 2 MiB huge pages where the kernel gives them
// (transparent huge pages "always" or "madvise"). A fresh 4 KiB page costs
// a fault of its own when first written (this VM backs one in ~2.5 µs: 0.18
// s for 300 MB); a huge page one fault per 512 of them.
#pragma once

#include <cstddef>

namespace dlfeed::inline DLFEED_ABI::detail {

/// Bytes a mapping of `bytes` takes: whole huge pages.
size_t huge_length(size_t bytes);
/// A huge-page aligned mapping of huge_length(bytes), advised MADV_HUGEPAGE
/// (throws std::bad_alloc when the system has none). With huge pages, or
/// `populate` false, it is not populated: whoever first writes it takes its
/// faults. Else every page is populated now.
void* map_huge(size_t bytes, bool populate);
/// Unmaps what map_huge(bytes, ...) returned.
void unmap_huge(void* p, size_t bytes) noexcept;

}  // namespace dlfeed::detail
