// SPDX-License-Identifier: Apache-2.0
#include "io/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DLFEED_STREAM_COPY 1
#endif

namespace dlfeed::inline DLFEED_ABI::detail {

#ifdef DLFEED_STREAM_COPY
namespace {

// 64-byte lines: loaded unaligned, stored aligned and non-temporal. The
// fence orders the streaming stores before whatever hands the batch on.
__attribute__((target("avx2"))) void copy_streaming(std::byte* d, const std::byte* s, size_t n) {
  const size_t head = std::min(n, (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
  }
  _mm_sfence();
  std::memcpy(d + i, s + i, n - i);
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

}  // namespace
#endif

void copy_large(void* dst, const void* src, size_t n) {
#ifdef DLFEED_STREAM_COPY
  if (n >= kStreamCopyAtLeast && has_avx2()) {
    copy_streaming(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

}  // namespace dlfeed::detail
