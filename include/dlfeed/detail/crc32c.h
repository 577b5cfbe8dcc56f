// SPDX-License-Identifier: Apache-2.0
// CRC32C (Castagnoli), as TFRecord framing uses it. Header-only. With SSE4.2
// and PCLMUL (checked at run time, per call: a read of the CPU model libgcc
// filled in), three independent crc32 chains run over three thirds of each
// block, which keeps the instruction's pipeline full (latency 3, one per
// cycle), and are combined with one carry-less multiply per chain; elsewhere
// a slicing-by-8 table loop. No mutable state: the tables and constants are
// constexpr.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DLFEED_CRC32C_X86 1
#endif

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::detail {

namespace crc32c_impl {

inline constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
  return t;
}

/// a * b modulo the polynomial, both reflected (bit 31 is x^0).
constexpr uint32_t mul_mod(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return product;
}

/// x^n modulo the polynomial, reflected.
constexpr uint32_t x_pow_mod(uint64_t n) {
  uint32_t result = 1u << 31, square = 1u << 30;  // x^0, x^1
  for (; n != 0; n >>= 1) {
    if (n & 1) result = mul_mod(result, square);
    square = mul_mod(square, square);
  }
  return result;
}

inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

#ifdef DLFEED_CRC32C_X86
// The crc32 instruction maps a 64-bit value Q (reflected) to Q * x^32 mod P,
// and a carry-less product of two reflected 32-bit values is their product
// times x (reflected in 64 bits). So crc32(0, clmul(v, x^(8n - 33))) is
// v * x^(8n): v moved past n zero bytes.
template <size_t kBlock>
__attribute__((target("sse4.2,pclmul"))) inline uint64_t extend_3way(uint64_t crc, const uint8_t*& p, size_t& n) {
  static_assert(kBlock % 8 == 0);
  constexpr uint32_t kShift1 = x_pow_mod(8 * kBlock - 33), kShift2 = x_pow_mod(16 * kBlock - 33);
  const __m128i k = _mm_set_epi64x(kShift1, kShift2);
  while (n >= 3 * kBlock) {
    uint64_t a = crc, b = 0, c = 0;
    for (size_t i = 0; i < kBlock; i += 8) {
      a = _mm_crc32_u64(a, load_le64(p + i));
      b = _mm_crc32_u64(b, load_le64(p + kBlock + i));
      c = _mm_crc32_u64(c, load_le64(p + 2 * kBlock + i));
    }
    // a past 2 blocks of zeros, b past one, then c.
    const __m128i v = _mm_set_epi64x(static_cast<int64_t>(b), static_cast<int64_t>(a));
    const __m128i pa = _mm_clmulepi64_si128(v, k, 0x00);  // a * kShift2
    const __m128i pb = _mm_clmulepi64_si128(v, k, 0x11);  // b * kShift1
    const uint64_t shifted = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_xor_si128(pa, pb)));
    crc = _mm_crc32_u64(0, shifted) ^ c;
    p += 3 * kBlock;
    n -= 3 * kBlock;
  }
  return crc;
}

/// The hardware loop: `crc` a finished CRC32C.
__attribute__((target("sse4.2,pclmul"))) inline uint32_t extend_sse42(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t l = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    l = _mm_crc32_u8(static_cast<uint32_t>(l), *p++);
    --n;
  }
  l = extend_3way<8192>(l, p, n);  // 24 KiB blocks: the combine is ~1% of one
  l = extend_3way<256>(l, p, n);   // the rest in 768-byte blocks
  while (n >= 8) {
    l = _mm_crc32_u64(l, load_le64(p));
    p += 8;
    n -= 8;
  }
  uint32_t c = static_cast<uint32_t>(l);
  while (n-- > 0) c = _mm_crc32_u8(c, *p++);
  return ~c;
}
#endif

}  // namespace crc32c_impl

/// The table-driven (slicing-by-8) implementation, always available.
inline uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  static constexpr crc32c_impl::Tables kTables = crc32c_impl::make_tables();
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    const uint64_t v = crc32c_impl::load_le64(p) ^ c;
    c = kTables[7][v & 0xff] ^ kTables[6][(v >> 8) & 0xff] ^ kTables[5][(v >> 16) & 0xff] ^
        kTables[4][(v >> 24) & 0xff] ^ kTables[3][(v >> 32) & 0xff] ^ kTables[2][(v >> 40) & 0xff] ^
        kTables[1][(v >> 48) & 0xff] ^ kTables[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xff];
  return ~c;
}

/// True when this CPU has the crc32 instruction (SSE4.2) and carry-less
/// multiply (PCLMUL), which the hardware implementation uses.
inline bool crc32c_hardware_available() {
#ifdef DLFEED_CRC32C_X86
  __builtin_cpu_init();  // idempotent; libgcc's constructor may not have run yet (static initializers)
  return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul");
#else
  return false;
#endif
}

/// The hardware implementation; call only when crc32c_hardware_available().
inline uint32_t crc32c_extend_hardware(uint32_t crc, const void* data, size_t n) {
#ifdef DLFEED_CRC32C_X86
  return crc32c_impl::extend_sse42(crc, static_cast<const uint8_t*>(data), n);
#else
  return crc32c_extend_portable(crc, data, n);
#endif
}

/// Extends `crc` (a finished CRC32C, 0 for none yet) over `data`.
inline uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  if (crc32c_hardware_available()) return crc32c_extend_hardware(crc, data, n);
  return crc32c_extend_portable(crc, data, n);
}

/// CRC32C of `data`: crc32c("123456789") == 0xE3069283.
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }
inline uint32_t crc32c(std::span<const std::byte> data) { return crc32c_extend(0, data.data(), data.size()); }

}  // namespace dlfeed::detail
