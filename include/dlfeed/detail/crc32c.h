// CRC32C (Castagnoli), as TFRecord framing uses it. A hardware path (SSE4.2
// crc32 instruction) is picked at run time; a table-driven one is the fallback.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// Extends `crc` (a finished CRC32C, 0 for none yet) over `data`.
DLFEED_EXPORT uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

/// CRC32C of `data`: crc32c("123456789") == 0xE3069283.
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }
inline uint32_t crc32c(std::span<const std::byte> data) { return crc32c_extend(0, data.data(), data.size()); }

/// The table-driven (slicing-by-8) implementation, always available.
DLFEED_EXPORT uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);
/// True when this CPU has the crc32 instruction (x86-64 SSE4.2).
DLFEED_EXPORT bool crc32c_hardware_available();
/// The hardware implementation; call only when crc32c_hardware_available().
DLFEED_EXPORT uint32_t crc32c_extend_hardware(uint32_t crc, const void* data, size_t n);

}  // namespace dlfeed::detail
