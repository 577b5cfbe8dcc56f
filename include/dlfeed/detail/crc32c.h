// SPDX-License-Identifier: Apache-2.0
// CRC32C (Castagnoli), as TFRecord framing uses it. Header-only. With SSE4.2
// and PCLMUL (checked at run time, per call: a read of the CPU model libgcc
// filled in), three independent crc32 chains run over three thirds of each
// block, which keeps the instruction's pipeline full (latency 3, one per
// cycle), and are combined with one carry-less multiply per chain. Where the
// CPU also has AVX-512 and VPCLMULQDQ (checked once per process), buffers of
// 1 KiB and more are folded 256 bytes at a time by carry-less multiplies
// instead, four 64-byte lanes at once, and the last 64 bytes finished with
// crc32: twice the rate of the three chains, in the caches and out of them.
// On AMD, from 4 KiB, three crc32 chains run beside the folds, over their own
// regions at the end of the buffer, since the folds leave the crc32 unit
// idle: ~1.4x the folds alone on Zen 5 (extend_fused; slower on an Intel Xeon).
// Elsewhere a slicing-by-8 table loop. The tables and constants are
// constexpr; the only state is the cached CPU check.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define DLFEED_CRC32C_X86 1
#if (defined(__clang__) && __clang_major__ >= 8) || (!defined(__clang__) && __GNUC__ >= 9)
#define DLFEED_CRC32C_VPCLMUL 1  // the compiler knows AVX-512 and VPCLMULQDQ
#endif
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

#endif

/// What the hardware loop runs over 1 KiB and more: crc32 chains only
/// (extend_3way), AVX-512 folds (extend_wide), or folds with chains beside
/// them (extend_fused, from kFusedAtLeast).
enum class Path : uint8_t { kChains, kFolds, kFused };

/// T[k] = x^(8 * 2^k) modulo P: a shift by 2^k bytes.
inline constexpr size_t kShiftBits = 60;  // shifts below 2^60 bytes
using ShiftTable = std::array<uint32_t, kShiftBits>;
constexpr ShiftTable make_shift_table(int offset) {
  ShiftTable t{};
  for (size_t k = 0; k < kShiftBits; ++k) {
    const int64_t n = (int64_t{8} << k) + offset;
    t[k] = n < 0 ? 0 : x_pow_mod(static_cast<uint64_t>(n));
  }
  return t;
}

#ifdef DLFEED_CRC32C_X86
/// `crc` times x^(8 * nbytes) modulo P: 0-7 bytes by crc32 over zero bytes
/// (which multiplies by x^8 each), each higher bit of `nbytes` by a
/// carry-less multiply by x^(8 * 2^k - 33) that crc32 reduces (see
/// extend_3way).
__attribute__((target("sse4.2,pclmul"))) inline uint32_t shift_hardware(uint32_t crc, uint64_t nbytes) {
  static constexpr ShiftTable kTable = make_shift_table(-33);
  for (uint64_t i = 0; i < (nbytes & 7); ++i) crc = _mm_crc32_u8(crc, 0);
  for (size_t k = 3; k < kShiftBits && (nbytes >> k) != 0; ++k) {
    if (((nbytes >> k) & 1) == 0) continue;
    const __m128i product = _mm_clmulepi64_si128(_mm_cvtsi32_si128(static_cast<int>(crc)),
                                                 _mm_cvtsi32_si128(static_cast<int>(kTable[k])), 0x00);
    crc = static_cast<uint32_t>(_mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(product))));
  }
  return crc;
}

#ifdef DLFEED_CRC32C_VPCLMUL
#define DLFEED_CRC32C_WIDE_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,vpclmulqdq,sse4.2,pclmul")))

/// True when the CPU and the OS give AVX-512 (F, BW, VL) and VPCLMULQDQ.
inline bool wide_available() {
  static const bool available = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & (1u << 27)) == 0) return false;  // OSXSAVE
    uint32_t xcr0_lo = 0, xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0xE6u) != 0xE6u) return false;  // the OS saves SSE, AVX and the AVX-512 state
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    const unsigned need_b = (1u << 16) | (1u << 30) | (1u << 31);  // AVX512F, AVX512BW, AVX512VL
    return (b & need_b) == need_b && (c & (1u << 10)) != 0;        // VPCLMULQDQ
  }();
  return available;
}

/// The path this CPU runs fastest: folds with chains beside them on AMD
/// (Zen 5: ~1.4x the folds alone, 147 KiB in the caches), the folds alone
/// elsewhere (an Intel Xeon of a lent H100 node: the chains cost 0.87-0.94x,
/// whatever bytes a chain per step; its folds are not short of multiplies).
/// Out of the caches the chains' three more streams cost instead (Zen 5,
/// 147 KiB each from a 256 MiB buffer: ~0.75x), but dlfeed takes a read's CRC
/// as it completes, with its bytes just copied into the caches.
inline Path best_wide_path() {
  static const Path path = [] {
    if (!wide_available()) return Path::kChains;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &c, &d) == 0) return Path::kFolds;
    const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
    return amd ? Path::kFused : Path::kFolds;
  }();
  return path;
}

/// Each 128-bit lane of `acc` (16 message bytes: H the first 8, L the next,
/// reflected) moved `k`'s distance ahead, plus `data`: H * k.lo ^ L * k.hi ^
/// data, which is congruent to the lane times x^(8 * distance) modulo P
/// (fold_constants) and of degree below 128.
DLFEED_CRC32C_WIDE_TARGET __attribute__((always_inline)) inline __m512i fold_lanes(__m512i acc, __m512i k,
                                                                                   __m512i data) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(acc, k, 0x00), _mm512_clmulepi64_epi128(acc, k, 0x11), data,
                                   0x96);  // a ^ b ^ c
}

/// The constants that move a 16-byte lane `kBytes` ahead, in every lane. A
/// carry-less product of a reflected 64-bit and a reflected 32-bit value,
/// read as a reflected 128-bit value, is their product times x^33; H stands
/// for H * x^64. So H takes x^(8 * kBytes + 64 - 33), L x^(8 * kBytes - 33).
template <uint64_t kBytes>
DLFEED_CRC32C_WIDE_TARGET inline __m512i fold_constants() {
  constexpr auto hi = static_cast<int64_t>(x_pow_mod(8 * kBytes + 31));
  constexpr auto lo = static_cast<int64_t>(x_pow_mod(8 * kBytes - 33));
  return _mm512_set_epi64(lo, hi, lo, hi, lo, hi, lo, hi);
}

/// Four 64-byte accumulators over consecutive 256-byte blocks: the folds of
/// extend_wide and extend_fused.
struct Lanes {
  __m512i a0, a1, a2, a3;
};

/// The 256 bytes at `p`, the CRC state `l` xored into the first 4, as crc32 does.
DLFEED_CRC32C_WIDE_TARGET __attribute__((always_inline)) inline Lanes start_lanes(uint64_t l, const uint8_t* p) {
  const __m512i state = _mm512_castsi128_si512(_mm_cvtsi32_si128(static_cast<int>(static_cast<uint32_t>(l))));
  return {_mm512_xor_si512(_mm512_loadu_si512(p), state), _mm512_loadu_si512(p + 64), _mm512_loadu_si512(p + 128),
          _mm512_loadu_si512(p + 192)};
}

/// Each lane moved 256 bytes ahead, plus the next 256 bytes, at `p`.
DLFEED_CRC32C_WIDE_TARGET __attribute__((always_inline)) inline void fold_256(Lanes& a, __m512i k256,
                                                                              const uint8_t* p) {
  a.a0 = fold_lanes(a.a0, k256, _mm512_loadu_si512(p));
  a.a1 = fold_lanes(a.a1, k256, _mm512_loadu_si512(p + 64));
  a.a2 = fold_lanes(a.a2, k256, _mm512_loadu_si512(p + 128));
  a.a3 = fold_lanes(a.a3, k256, _mm512_loadu_si512(p + 192));
}

/// The lanes folded into one, then each 64-byte block of [p, end) (a
/// multiple of 64) into it; crc32 over that last accumulator from 0 gives
/// the state after all the bytes folded (everything is congruent modulo P).
DLFEED_CRC32C_WIDE_TARGET inline uint64_t finish_lanes(const Lanes& a, const uint8_t* p, const uint8_t* end) {
  const __m512i k64 = fold_constants<64>();
  __m512i last = fold_lanes(fold_lanes(fold_lanes(a.a0, k64, a.a1), k64, a.a2), k64, a.a3);
  for (; p < end; p += 64) last = fold_lanes(last, k64, _mm512_loadu_si512(p));
  alignas(64) uint8_t bytes[64];
  _mm512_store_si512(bytes, last);
  uint64_t out = 0;
  for (size_t i = 0; i < 64; i += 8) out = _mm_crc32_u64(out, load_le64(bytes + i));
  return out;
}

/// Folds [p, p + n) for n >= 256 into the CRC state `l` (crc32's running
/// value): leaves fewer than 64 bytes for the caller. Four 64-byte
/// accumulators fold 256 bytes ahead per step, then into one, which folds 64
/// bytes ahead to the end (finish_lanes).
DLFEED_CRC32C_WIDE_TARGET inline uint64_t extend_wide(uint64_t l, const uint8_t*& p, size_t& n) {
  const __m512i k256 = fold_constants<256>();
  Lanes a = start_lanes(l, p);
  p += 256;
  n -= 256;
  for (; n >= 256; p += 256, n -= 256) fold_256(a, k256, p);
  const uint8_t* end = p + n / 64 * 64;
  const uint64_t out = finish_lanes(a, p, end);
  n -= static_cast<size_t>(end - p);
  p = end;
  return out;
}

/// `state` (32 bits) times k's low 32 bits, x^(8n - 33): state moved n bytes.
DLFEED_CRC32C_WIDE_TARGET inline uint64_t times_reduced(uint64_t state, __m128i k) {
  const __m128i product = _mm_clmulepi64_si128(_mm_cvtsi64_si128(static_cast<int64_t>(state)), k, 0x00);
  return _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(product)));
}

/// Bytes each crc32 chain of extend_fused moves per step, and a step's bytes.
inline constexpr size_t kChainStep = 40;
inline constexpr size_t kFusedStep = 256 + 3 * kChainStep;
/// Below this, extend_wide alone: the combine costs ~100 ns.
inline constexpr size_t kFusedAtLeast = 4096;

/// extend_wide's folds and extend_3way's crc32 chains at once. The carry-less
/// multiplies are what holds the fold back (the crc32 unit sits idle), so
/// [p, p + n) is cut into a folded region and, after it, three chain regions
/// of kChainStep * m bytes each (m = n / kFusedStep, at least 2): each of m
/// steps folds 256 bytes and moves each chain kChainStep bytes, then the
/// folded region's last whole 64-byte blocks (under kFusedStep bytes) are
/// folded on their own. Each region's state is then moved past the regions
/// after it by one constant, x^(8 * chain region) (Horner), as extend_3way
/// combines its chains. Leaves fewer than 64 bytes. On AMD Zen 5, 147 KiB in
/// the caches: ~1.4x extend_wide's rate with 40 bytes a chain per step,
/// ~1.35x with 32 and 48, ~1.2x with 64 (more starve the folds of issue slots).
DLFEED_CRC32C_WIDE_TARGET inline uint64_t extend_fused(uint64_t l, const uint8_t*& p, size_t& n) {
  const size_t m = n / kFusedStep;
  const size_t chain = kChainStep * m;
  const size_t folded_bytes = (n - 3 * chain) / 64 * 64;
  const __m512i k256 = fold_constants<256>();
  const uint8_t* v = p;
  const uint8_t* s = p + folded_bytes;  // chain j reads s + j * chain
  Lanes a = start_lanes(l, v);
  uint64_t c0 = 0, c1 = 0, c2 = 0;
  for (size_t i = 0;;) {
    for (size_t j = 0; j < kChainStep; j += 8) {
      c0 = _mm_crc32_u64(c0, load_le64(s + j));
      c1 = _mm_crc32_u64(c1, load_le64(s + chain + j));
      c2 = _mm_crc32_u64(c2, load_le64(s + 2 * chain + j));
    }
    s += kChainStep;
    v += 256;
    if (++i == m) break;
    fold_256(a, k256, v);
  }
  const uint64_t folded = finish_lanes(a, v, p + folded_bytes);
  // x^(8 * chain - 33): x^7 moved chain - 5 bytes (see extend_3way).
  const __m128i k = _mm_cvtsi32_si128(static_cast<int>(shift_hardware(1u << 24, chain - 5)));
  p += folded_bytes + 3 * chain;
  n -= folded_bytes + 3 * chain;
  return times_reduced(times_reduced(times_reduced(folded, k) ^ c0, k) ^ c1, k) ^ c2;
}
#undef DLFEED_CRC32C_WIDE_TARGET
#endif

/// The hardware loop: `crc` a finished CRC32C. `path`: kFolds and kFused
/// only when wide_available().
__attribute__((target("sse4.2,pclmul"))) inline uint32_t extend_sse42(uint32_t crc, const uint8_t* p, size_t n,
                                                                      Path path) {
  uint64_t l = ~crc;
#ifdef DLFEED_CRC32C_VPCLMUL
  if (path == Path::kFused && n >= kFusedAtLeast) l = extend_fused(l, p, n);
  if (path != Path::kChains && n >= 1024) l = extend_wide(l, p, n);
#else
  (void)path;
#endif
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

/// True when the hardware implementation also folds with AVX-512 and
/// VPCLMULQDQ (buffers of 1 KiB and more).
inline bool crc32c_wide_available() {
#ifdef DLFEED_CRC32C_VPCLMUL
  return crc32c_hardware_available() && crc32c_impl::wide_available();
#else
  return false;
#endif
}

/// The hardware implementation; call only when crc32c_hardware_available().
inline uint32_t crc32c_extend_hardware(uint32_t crc, const void* data, size_t n) {
#ifdef DLFEED_CRC32C_VPCLMUL
  // The caller checked crc32c_hardware_available(): only the wide check is left.
  return crc32c_impl::extend_sse42(crc, static_cast<const uint8_t*>(data), n, crc32c_impl::best_wide_path());
#elif defined(DLFEED_CRC32C_X86)
  return crc32c_impl::extend_sse42(crc, static_cast<const uint8_t*>(data), n, crc32c_impl::Path::kChains);
#else
  return crc32c_extend_portable(crc, data, n);
#endif
}

/// The hardware implementation by one path, whatever this CPU runs best, for
/// tests and benchmarks: kChains (no AVX-512) needs crc32c_hardware_available(),
/// kFolds and kFused crc32c_wide_available(). Portable without the crc32
/// instruction.
inline uint32_t crc32c_extend_by(crc32c_impl::Path path, uint32_t crc, const void* data, size_t n) {
#ifdef DLFEED_CRC32C_X86
  return crc32c_impl::extend_sse42(crc, static_cast<const uint8_t*>(data), n, path);
#else
  (void)path;
  return crc32c_extend_portable(crc, data, n);
#endif
}

/// The hardware implementation without the AVX-512 fold (three crc32 chains
/// only), for tests and benchmarks; call only when crc32c_hardware_available().
inline uint32_t crc32c_extend_chains(uint32_t crc, const void* data, size_t n) {
#ifdef DLFEED_CRC32C_X86
  return crc32c_impl::extend_sse42(crc, static_cast<const uint8_t*>(data), n, crc32c_impl::Path::kChains);
#else
  return crc32c_extend_portable(crc, data, n);
#endif
}

/// Extends `crc` (a finished CRC32C, 0 for none yet) over `data`.
inline uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  if (crc32c_hardware_available()) return crc32c_extend_hardware(crc, data, n);
  return crc32c_extend_portable(crc, data, n);
}

/// `crc` (any CRC32C value) times x^(8 * nbytes) modulo the polynomial: what
/// crc32c_combine moves the first part's CRC by (tens of nanoseconds).
/// Portable: one table multiply per set bit of `nbytes`.
inline uint32_t crc32c_shift_portable(uint32_t crc, uint64_t nbytes) {
  static constexpr crc32c_impl::ShiftTable kTable = crc32c_impl::make_shift_table(0);
  for (size_t k = 0; k < crc32c_impl::kShiftBits && (nbytes >> k) != 0; ++k) {
    if ((nbytes >> k) & 1) crc = crc32c_impl::mul_mod(crc, kTable[k]);
  }
  return crc;
}
inline uint32_t crc32c_shift(uint32_t crc, uint64_t nbytes) {
#ifdef DLFEED_CRC32C_X86
  if (crc32c_hardware_available()) return crc32c_impl::shift_hardware(crc, nbytes);
#endif
  return crc32c_shift_portable(crc, nbytes);
}

/// The CRC32C of A followed by B, from crc32c(A), crc32c(B) and B's length:
/// crc(A B) = crc(A) * x^(8 |B|) + crc(B) (the initial and final inversions
/// cancel), so a part's CRC taken elsewhere (where its bytes were in the
/// caches) joins the others' without reading its bytes again.
inline uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return crc32c_shift(crc_a, length_b) ^ crc_b;
}

/// CRC32C of `data`: crc32c("123456789") == 0xE3069283.
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }
inline uint32_t crc32c(std::span<const std::byte> data) { return crc32c_extend(0, data.data(), data.size()); }

}  // namespace dlfeed::detail
