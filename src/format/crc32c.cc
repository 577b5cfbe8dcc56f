// CRC32C: slicing-by-8 tables built at compile time, and the SSE4.2 crc32
// instruction when the CPU has it (checked once, at first use).
#include "dlfeed/detail/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define DLFEED_CRC32C_X86 1
#endif

namespace dlfeed::inline DLFEED_ABI::detail {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

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

constexpr Tables kTables = make_tables();

inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

#ifdef DLFEED_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t l = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    l = _mm_crc32_u8(static_cast<uint32_t>(l), *p++);
    --n;
  }
  while (n >= 32) {  // unrolled: the instruction has 3-cycle latency, 1/cycle throughput
    l = _mm_crc32_u64(l, load_le64(p));
    l = _mm_crc32_u64(l, load_le64(p + 8));
    l = _mm_crc32_u64(l, load_le64(p + 16));
    l = _mm_crc32_u64(l, load_le64(p + 24));
    p += 32;
    n -= 32;
  }
  while (n >= 8) {
    l = _mm_crc32_u64(l, load_le64(p));
    p += 8;
    n -= 8;
  }
  uint32_t c = static_cast<uint32_t>(l);
  while (n-- > 0) c = _mm_crc32_u8(c, *p++);
  return ~c;
}

bool detect_sse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    const uint64_t v = load_le64(p) ^ c;
    c = kTables[7][v & 0xff] ^ kTables[6][(v >> 8) & 0xff] ^ kTables[5][(v >> 16) & 0xff] ^
        kTables[4][(v >> 24) & 0xff] ^ kTables[3][(v >> 32) & 0xff] ^ kTables[2][(v >> 40) & 0xff] ^
        kTables[1][(v >> 48) & 0xff] ^ kTables[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xff];
  return ~c;
}

bool crc32c_hardware_available() {
#ifdef DLFEED_CRC32C_X86
  static const bool available = detect_sse42();
  return available;
#else
  return false;
#endif
}

uint32_t crc32c_extend_hardware(uint32_t crc, const void* data, size_t n) {
#ifdef DLFEED_CRC32C_X86
  return extend_sse42(crc, static_cast<const uint8_t*>(data), n);
#else
  return crc32c_extend_portable(crc, data, n);
#endif
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  if (crc32c_hardware_available()) return crc32c_extend_hardware(crc, data, n);
  return crc32c_extend_portable(crc, data, n);
}

}  // namespace dlfeed::detail
