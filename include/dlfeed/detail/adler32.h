// SPDX-License-Identifier: Apache-2.0
// Adler-32 (RFC 1950), the checksum of zlib streams. Header-only. With AVX2
// (checked once per process) 32 bytes a step: sums of bytes by SAD, the
// weighted sums by multiply-add, in 32-bit lanes reduced modulo 65521 every
// 32 KiB; elsewhere the plain loop, reduced every 5552 bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DLFEED_ADLER32_AVX2 1
#endif

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::detail {

namespace adler32_impl {

#if defined(DLFEED_ADLER32_AVX2)
inline bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

// 32 bytes a step: a += the bytes, b += 32 * a-before-the-step + the bytes
// weighted 32..1. Lanes stay in 32 bits for up to 1024 steps; the sums are
// taken modulo 65521 after each block of that many.
__attribute__((target("avx2"))) inline uint32_t adler32_avx2(uint32_t adler, const uint8_t* p, size_t n) {
  constexpr uint32_t kMod = 65521;
  uint64_t a = adler & 0xffff, b = adler >> 16;
  const __m256i weights = _mm256_setr_epi8(32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14,
                                           13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i zero = _mm256_setzero_si256();
  while (n >= 32) {
    const size_t steps = std::min<size_t>(n / 32, 1024);
    __m256i sum_a = zero, prefix = zero, sum_w = zero;
    for (size_t s = 0; s < steps; ++s) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      p += 32;
      prefix = _mm256_add_epi32(prefix, sum_a);
      sum_a = _mm256_add_epi32(sum_a, _mm256_sad_epu8(x, zero));
      sum_w = _mm256_add_epi32(sum_w, _mm256_madd_epi16(_mm256_maddubs_epi16(x, weights), ones));
    }
    alignas(32) uint32_t la[8], lp[8], lw[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(la), sum_a);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lp), prefix);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lw), sum_w);
    uint64_t ta = 0, tp = 0, tw = 0;
    for (int i = 0; i < 8; ++i) {
      ta += la[i];
      tp += lp[i];
      tw += lw[i];
    }
    b = (b + 32 * steps * a + 32 * tp + tw) % kMod;
    a = (a + ta) % kMod;
    n -= steps * 32;
  }
  for (; n > 0; --n) {
    a += *p++;
    b += a;
  }
  return uint32_t((b % kMod) << 16 | (a % kMod));
}
#endif

inline uint32_t adler32_portable(uint32_t adler, const uint8_t* p, size_t n) {
  constexpr uint32_t kMod = 65521;
  uint32_t a = adler & 0xffff, b = adler >> 16;
  while (n > 0) {
    size_t k = std::min<size_t>(n, 5552);  // the most bytes before b can pass 2^32
    n -= k;
    for (; k > 0; --k) {
      a += *p++;
      b += a;
    }
    a %= kMod;
    b %= kMod;
  }
  return b << 16 | a;
}

}  // namespace adler32_impl

/// Adler-32 of `n` bytes at `data`, continuing from `adler` (1 for a new stream).
inline uint32_t adler32_extend(uint32_t adler, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(DLFEED_ADLER32_AVX2)
  if (adler32_impl::have_avx2()) return adler32_impl::adler32_avx2(adler, p, n);
#endif
  return adler32_impl::adler32_portable(adler, p, n);
}

}  // namespace dlfeed::detail
