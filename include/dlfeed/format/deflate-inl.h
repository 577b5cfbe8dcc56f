// SPDX-License-Identifier: Apache-2.0
// The DEFLATE and zlib decoder of dlfeed/format/deflate.h (header tier: see
// dlfeed/detail/inline.h). Written from RFC 1950 and RFC 1951.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <memory>

#include "dlfeed/detail/adler32.h"
#include "dlfeed/detail/inline.h"
#include "dlfeed/format/deflate.h"

namespace dlfeed::inline DLFEED_ABI {
namespace deflate_detail {
DLFEED_DETAIL_BEGIN

// A lookup table entry (uint32_t):
//   bits 0-7   bits of input the entry stands for (a code's length; for a
//              pointer to a second-level table, the first level's bits)
//   bits 8-11  extra bits that follow the code (length, distance), or the
//              second-level table's index bits; for a literal, bit 8 is
//              kTwoLiterals (see pair_literals)
//   bits 12-15 kind flags (none set: a length or a distance)
//   bits 16-31 the value: a literal byte (two: the second in bits 24-31), a
//              length or distance base, or the second-level table's offset
inline constexpr uint32_t kLiteral = 0x1000;
inline constexpr uint32_t kSubtable = 0x2000;
inline constexpr uint32_t kEndOfBlock = 0x4000;
inline constexpr uint32_t kInvalid = 0x8000;

inline constexpr unsigned kLitlenBits = 11;  // first-level index bits
inline constexpr unsigned kDistBits = 8;
inline constexpr unsigned kPrecodeBits = 7;  // code-length codes are at most 7 bits: one level
inline constexpr unsigned kMaxCodeBits = 15;
inline constexpr unsigned kNumLitlen = 288;
inline constexpr unsigned kNumDist = 32;
inline constexpr unsigned kNumPrecode = 19;
// Each code longer than the first level gets at most one second-level table
// of at most 2^(15 - first level bits) entries.
inline constexpr unsigned kLitlenTableSize = (1u << kLitlenBits) + kNumLitlen * (1u << (kMaxCodeBits - kLitlenBits));
inline constexpr unsigned kDistTableSize = (1u << kDistBits) + kNumDist * (1u << (kMaxCodeBits - kDistBits));

inline constexpr uint16_t kLengthBase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                             31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
inline constexpr uint8_t kLengthExtra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                             2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
inline constexpr uint16_t kDistBase[30] = {1,    2,    3,    4,    5,    7,    9,    13,    17,    25,
                                           33,   49,   65,   97,   129,  193,  257,  385,   513,   769,
                                           1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
inline constexpr uint8_t kDistExtra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                           6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
inline constexpr uint8_t kPrecodeOrder[kNumPrecode] = {16, 17, 18, 0, 8,  7, 9,  6, 10, 5,
                                                       11, 4,  12, 3, 13, 2, 14, 1, 15};

inline uint32_t litlen_entry(unsigned sym) {
  if (sym < 256) return kLiteral | sym << 16;
  if (sym == 256) return kEndOfBlock;
  if (sym < 286) return uint32_t(kLengthBase[sym - 257]) << 16 | uint32_t(kLengthExtra[sym - 257]) << 8;
  return kInvalid;  // 286 and 287 take part in the code but are never valid
}
inline uint32_t dist_entry(unsigned sym) {
  if (sym < 30) return uint32_t(kDistBase[sym]) << 16 | uint32_t(kDistExtra[sym]) << 8;
  return kInvalid;
}
inline uint32_t precode_entry(unsigned sym) { return sym << 16; }

// The low `len` bits of `code`, most significant first (a Huffman code as
// DEFLATE packs it, least significant bit first).
inline unsigned reverse_bits(unsigned code, unsigned len) {
  code = ((code & 0x5555) << 1) | ((code >> 1) & 0x5555);
  code = ((code & 0x3333) << 2) | ((code >> 2) & 0x3333);
  code = ((code & 0x0f0f) << 4) | ((code >> 4) & 0x0f0f);
  code = ((code & 0x00ff) << 8) | ((code >> 8) & 0x00ff);
  return code >> (16 - len);
}

// Builds the lookup table of the canonical Huffman code with code lengths
// `lens[0..n)` (0: the symbol is not coded), `first_bits` index bits at the
// first level. Fails for an over-subscribed code, and for an incomplete one
// unless `allow_incomplete` and it has at most one code, of length 1 (zlib's
// rule); the entries of no code are kInvalid.
template <typename EntryFn>
bool build_table(const uint8_t* lens, unsigned n, unsigned first_bits, unsigned capacity, EntryFn entry,
                 uint32_t* table, bool allow_incomplete = true) {
  unsigned count[kMaxCodeBits + 1] = {};
  for (unsigned s = 0; s < n; ++s) ++count[lens[s]];
  count[0] = 0;
  unsigned max_len = 0;
  int left = 1;
  for (unsigned l = 1; l <= kMaxCodeBits; ++l) {
    left = 2 * left - int(count[l]);
    if (left < 0) return false;  // over-subscribed
    if (count[l] != 0) max_len = l;
  }
  const unsigned first_size = 1u << first_bits;
  if (left > 0) {
    if (max_len > 1 || !allow_incomplete) return false;  // incomplete
    for (unsigned i = 0; i < first_size; ++i) table[i] = kInvalid | 1;
  }
  // Symbols in canonical order (by length, then symbol), with their codes.
  unsigned offs[kMaxCodeBits + 2] = {};
  for (unsigned l = 1; l <= kMaxCodeBits; ++l) offs[l + 1] = offs[l] + count[l];
  uint16_t sorted[kNumLitlen];
  for (unsigned s = 0; s < n; ++s) {
    if (lens[s] != 0) sorted[offs[lens[s]]++] = uint16_t(s);
  }
  unsigned total = 0;
  for (unsigned l = 1; l <= kMaxCodeBits; ++l) total += count[l];
  unsigned used = 0, code = 0, prev_len = 0;
  unsigned sub_prefix = ~0u, sub_offset = first_size, sub_bits = 0;
  std::array<uint16_t, kNumLitlen> rev{};
  for (unsigned i = 0; i < total; ++i) {
    const unsigned len = lens[sorted[i]];
    code <<= (len - prev_len);
    prev_len = len;
    rev[i] = uint16_t(reverse_bits(code, len));
    ++code;
  }
  for (unsigned i = 0; i < total; ++i) {
    const unsigned sym = sorted[i];
    const unsigned len = lens[sym];
    const unsigned r = rev[i];
    const uint32_t e = entry(sym);
    if (len <= first_bits) {
      for (unsigned k = r; k < first_size; k += 1u << len) table[k] = e | len;
      continue;
    }
    const unsigned prefix = r & (first_size - 1);
    if (prefix != sub_prefix) {
      // A new second-level table: as many index bits as the longest code
      // with this prefix needs (they follow this one in canonical order).
      unsigned longest = len;
      for (unsigned j = i + 1; j < total && (rev[j] & (first_size - 1)) == prefix; ++j) longest = lens[sorted[j]];
      sub_offset += used;
      sub_bits = longest - first_bits;
      used = 1u << sub_bits;
      if (sub_offset + used > capacity) return false;
      sub_prefix = prefix;
      table[prefix] = kSubtable | uint32_t(sub_offset) << 16 | sub_bits << 8 | first_bits;
    }
    for (unsigned k = r >> first_bits; k < (1u << sub_bits); k += 1u << (len - first_bits)) {
      table[sub_offset + k] = e | (len - first_bits);
    }
  }
  return true;
}

// Where a first-level literal's code leaves room in the index for a second
// literal's whole code, the entry stands for both (kTwoLiterals; the second
// in value bits 24-31): literal runs decode two at a time. Walked downwards,
// since the second lookup's index (i >> length) is below i and must still
// hold its one-literal entry.
inline constexpr uint32_t kTwoLiterals = 0x100;
inline void pair_literals(uint32_t* table) {
  for (unsigned i = 1u << kLitlenBits; i-- > 0;) {
    const uint32_t e = table[i];
    const unsigned len1 = e & 0xff;  // at most 15 (any kind of entry)
    const uint32_t e2 = table[i >> len1];
    const bool pair = (e & e2 & kLiteral) && !(e2 & kTwoLiterals) && (e2 & 0xff) + len1 <= kLitlenBits;
    const uint32_t both = kLiteral | kTwoLiterals | (e & 0xff0000) | (e2 & 0xff0000) << 8 | (len1 + (e2 & 0xff));
    table[i] = pair ? both : e;  // no branch: whether a pair fits is close to random
  }
}

struct FixedTables {
  uint32_t litlen[1u << kLitlenBits];
  uint32_t dist[1u << kDistBits];
  FixedTables() {
    uint8_t lens[kNumLitlen];
    for (unsigned s = 0; s < kNumLitlen; ++s) lens[s] = s < 144 ? 8 : s < 256 ? 9 : s < 280 ? 7 : 8;
    build_table(lens, kNumLitlen, kLitlenBits, 1u << kLitlenBits, litlen_entry, litlen);
    pair_literals(litlen);
    uint8_t dlens[kNumDist];
    std::memset(dlens, 5, sizeof dlens);
    build_table(dlens, kNumDist, kDistBits, 1u << kDistBits, dist_entry, dist);
  }
};

inline const FixedTables& fixed_tables() {
  static const FixedTables t;
  return t;
}

inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// The decoder of one call. Bits are taken from the low end of `bitbuf`;
// `in` is the next byte not yet in it, whose bit 0 would go at `bitsleft`.
// Past the input's end, zero bytes are put in and counted in `overread`: the
// stream is truncated if any of them is consumed.
//
// The hot loop runs on a local copy of this state (Stream::huffman_block):
// held in the decoder, every byte stored through `out` (which may alias
// anything) would make the compiler reload the bit buffer from memory.
struct Stream {
  const uint8_t* in;
  const uint8_t* in_begin;
  const uint8_t* in_end;
  uint8_t* out_begin;
  uint8_t* out;
  uint8_t* out_end;
  uint64_t bitbuf = 0;
  unsigned bitsleft = 0;
  unsigned overread = 0;

  // At least 56 valid bits (some maybe phantom).
  __attribute__((always_inline)) void refill_fast() {
    bitbuf |= load_le64(in) << bitsleft;
    in += (63 - bitsleft) >> 3;
    bitsleft |= 56;
  }
  __attribute__((always_inline)) void refill_slow() {
    while (bitsleft <= 56) {
      uint64_t b = 0;
      if (in < in_end) {
        b = *in++;
      } else {
        ++overread;
      }
      bitbuf |= b << bitsleft;
      bitsleft += 8;
    }
  }
  __attribute__((always_inline)) void refill() {
    if (in_end - in >= 8) {
      refill_fast();
    } else {
      refill_slow();
    }
  }
  bool phantom_consumed() const { return uint64_t(overread) * 8 > bitsleft; }
  __attribute__((always_inline)) uint32_t take(unsigned n) {
    const uint32_t v = uint32_t(bitbuf & ((uint64_t(1) << n) - 1));
    bitbuf >>= n;
    bitsleft -= n;
    return v;
  }
  __attribute__((always_inline)) void drop(unsigned n) {
    bitbuf >>= n;
    bitsleft -= n;
  }
  // One symbol of `table` (its first level `first_bits` wide), its code's
  // bits consumed; the caller made sure of 15 bits.
  __attribute__((always_inline)) uint32_t decode(const uint32_t* table, unsigned first_bits) {
    uint32_t e = table[bitbuf & ((1u << first_bits) - 1)];
    if (e & kSubtable) [[unlikely]] {
      drop(e & 0xff);
      e = table[(e >> 16) + (bitbuf & ((1u << ((e >> 8) & 0xf)) - 1))];
    }
    drop(e & 0xff);
    return e;
  }
  // A first-level literal entry: one or two bytes out (two always stored).
  __attribute__((always_inline)) void emit_literals(uint32_t e) {
    uint16_t v = uint16_t(e >> 16);  // the first literal in the low byte
    if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap16(v);
    std::memcpy(out, &v, 2);
    out += 1 + ((e & kTwoLiterals) >> 8);
    drop(e & 0xff);
  }
  // Input bits used so far, counted from in_begin.
  uint64_t consumed_bits() const { return (uint64_t(in - in_begin) + overread) * 8 - bitsleft; }
  uint64_t consumed() const {
    const uint64_t buffered = bitsleft >> 3;
    const uint64_t real = buffered > overread ? buffered - overread : 0;
    return uint64_t(in - in_begin) - real;
  }
  __attribute__((always_inline)) InflateResult fail(InflateResult::Code code, const char* why) const {
    InflateResult r;
    // Whatever went wrong after bits past the input's end were used: the
    // input was cut short, and those bits were not the stream's.
    r.code = phantom_consumed() ? InflateResult::kTruncated : code;
    r.produced = uint64_t(out - out_begin);
    r.consumed = std::min<uint64_t>(consumed(), uint64_t(in_end - in_begin));
    r.what = r.code == InflateResult::kTruncated ? "" : why;
    return r;
  }

  InflateResult stored_block();
  // Decodes one Huffman block with the tables `litlen`/`dist`; kOk at its end of block.
  InflateResult huffman_block(const uint32_t* litlen, const uint32_t* dist);
  __attribute__((always_inline)) InflateResult huffman_loop(const uint32_t* litlen, const uint32_t* dist);
  __attribute__((always_inline)) bool careful_step(const uint32_t* litlen, const uint32_t* dist, InflateResult* r);
  static bool stop(InflateResult* r, const InflateResult& result) {
    *r = result;
    return false;
  }
};

struct Decoder : Stream {
  const char* what = "";
  InflateResume* block_mark = nullptr;  // where the last block begun starts
  const uint32_t* litlen = nullptr;
  const uint32_t* dist = nullptr;
  uint32_t litlen_table[kLitlenTableSize];
  uint32_t dist_table[kDistTableSize];

  bool read_dynamic_tables();
  InflateResult run();
};

inline bool Decoder::read_dynamic_tables() {
  refill();
  const unsigned nlit = take(5) + 257;
  const unsigned ndist = take(5) + 1;
  const unsigned nprecode = take(4) + 4;
  if (nlit > 286 || ndist > 30) {
    what = "too many length or distance symbols";
    return false;
  }
  uint8_t pre_lens[kNumPrecode] = {};
  refill();  // 19 x 3 bits = 57: two refills
  for (unsigned i = 0; i < nprecode; ++i) {
    if (i == 10) refill();
    pre_lens[kPrecodeOrder[i]] = uint8_t(take(3));
  }
  uint32_t precode[1u << kPrecodeBits];
  bool any = false;
  for (uint8_t l : pre_lens) any |= l != 0;
  if (!any || !build_table(pre_lens, kNumPrecode, kPrecodeBits, 1u << kPrecodeBits, precode_entry, precode, false)) {
    what = "an invalid code lengths set";
    return false;
  }
  uint8_t lens[kNumLitlen + kNumDist] = {};
  for (unsigned i = 0; i < nlit + ndist;) {
    refill();
    if (phantom_consumed()) return false;
    // The code-length code is complete (built with allow_incomplete false):
    // every entry is a symbol.
    const uint32_t e = precode[bitbuf & ((1u << kPrecodeBits) - 1)];
    drop(e & 0xff);
    const unsigned sym = e >> 16;
    if (sym < 16) {
      lens[i++] = uint8_t(sym);
      continue;
    }
    unsigned rep;
    uint8_t val = 0;
    if (sym == 16) {
      if (i == 0) {
        what = "an invalid bit length repeat";
        return false;
      }
      val = lens[i - 1];
      rep = 3 + take(2);
    } else if (sym == 17) {
      rep = 3 + take(3);
    } else {
      rep = 11 + take(7);
    }
    if (rep > nlit + ndist - i) {
      what = "an invalid bit length repeat";
      return false;
    }
    std::memset(lens + i, val, rep);
    i += rep;
  }
  if (phantom_consumed()) return false;
  if (lens[256] == 0) {
    what = "a literal/length code without an end-of-block code";
    return false;
  }
  if (!build_table(lens, nlit, kLitlenBits, kLitlenTableSize, litlen_entry, litlen_table)) {
    what = "an invalid literal/lengths set";
    return false;
  }
  pair_literals(litlen_table);
  if (!build_table(lens + nlit, ndist, kDistBits, kDistTableSize, dist_entry, dist_table)) {
    what = "an invalid distances set";
    return false;
  }
  litlen = litlen_table;
  dist = dist_table;
  return true;
}

inline InflateResult Stream::stored_block() {
  drop(bitsleft & 7);  // to a byte boundary
  const unsigned buffered = bitsleft >> 3;
  if (overread > buffered) return fail(InflateResult::kTruncated, "");
  in -= buffered - overread;
  bitbuf = 0;
  bitsleft = 0;
  overread = 0;
  if (in_end - in < 4) return fail(InflateResult::kTruncated, "");
  const unsigned len = unsigned(in[0]) | unsigned(in[1]) << 8;
  const unsigned nlen = unsigned(in[2]) | unsigned(in[3]) << 8;
  if (len != (~nlen & 0xffff)) return fail(InflateResult::kCorrupt, "a stored block whose lengths do not match");
  in += 4;
  const size_t have = size_t(in_end - in);
  const size_t room = size_t(out_end - out);
  const size_t n = std::min<size_t>({len, have, room});
  if (n > 0) std::memcpy(out, in, n);  // `out` may be null when there is no room
  out += n;
  in += n;
  if (n < len) return fail(room < len ? InflateResult::kTooLong : InflateResult::kTruncated, "");
  return InflateResult{};
}

// Copies a match of `len` bytes from `dist` back; the caller checked both and
// left at least len + 16 bytes of room.
__attribute__((always_inline)) inline uint8_t* copy_match_fast(uint8_t* out, unsigned dist, unsigned len) {
  const uint8_t* src = out - dist;
  uint8_t* const end = out + len;
  if (dist >= 16) {
    do {
      std::memcpy(out, src, 16);
      out += 16;
      src += 16;
    } while (out < end);
  } else if (dist >= 8) {
    do {
      std::memcpy(out, src, 8);
      out += 8;
      src += 8;
    } while (out < end);
  } else if (dist == 1) {
    const uint64_t v = uint64_t(*src) * 0x0101010101010101ull;
    do {
      std::memcpy(out, &v, 8);
      out += 8;
    } while (out < end);
  } else {
    do {
      *out++ = *src++;
    } while (out < end);
  }
  return end;
}

inline InflateResult Stream::huffman_block(const uint32_t* litlen, const uint32_t* dist) {
  Stream local = *this;
  const InflateResult r = local.huffman_loop(litlen, dist);
  *this = local;
  return r;
}

inline InflateResult Stream::huffman_loop(const uint32_t* litlen, const uint32_t* dist) {
  // Room for four lookups of two literals and a longest match, with the
  // two-byte literal store's and the match copy's overshoot.
  constexpr ptrdiff_t kOutMargin = 8 + 258 + 16;
  const uint64_t mask = (1u << kLitlenBits) - 1;
  for (;;) {
    if (in_end - in >= 16 && out_end - out >= kOutMargin) [[likely]] {
      refill_fast();  // 56 bits: four first-level literal entries (44), or a code, its extra bits and a distance (48)
      uint32_t e = litlen[bitbuf & mask];
      if (e & kLiteral) {
        emit_literals(e);
        e = litlen[bitbuf & mask];
        if (e & kLiteral) {
          emit_literals(e);
          e = litlen[bitbuf & mask];
          if (e & kLiteral) {
            emit_literals(e);
            e = litlen[bitbuf & mask];
            if (e & kLiteral) {
              emit_literals(e);
              continue;
            }
          }
        }
        refill_fast();
      }
      if (e & kSubtable) {
        drop(e & 0xff);
        e = litlen[(e >> 16) + (bitbuf & ((1u << ((e >> 8) & 0xf)) - 1))];
        if (e & kLiteral) {
          drop(e & 0xff);
          *out++ = uint8_t(e >> 16);
          continue;
        }
      }
      drop(e & 0xff);
      if (e & (kEndOfBlock | kInvalid)) [[unlikely]] {
        if (e & kInvalid) return fail(InflateResult::kCorrupt, "an invalid literal/length code");
        return InflateResult{};
      }
      const unsigned len = (e >> 16) + take((e >> 8) & 0xf);
      const uint32_t d = decode(dist, kDistBits);
      if (d & kInvalid) [[unlikely]] {
        return fail(InflateResult::kCorrupt, "an invalid distance code");
      }
      const unsigned distance = (d >> 16) + take((d >> 8) & 0xf);
      if (distance > size_t(out - out_begin)) [[unlikely]] {
        return fail(InflateResult::kCorrupt, "a distance too far back");
      }
      out = copy_match_fast(out, distance, len);
      continue;
    }
    InflateResult r;
    if (!careful_step(litlen, dist, &r)) return r;
  }
}

// One symbol near either end of the buffers, every bound checked: true to
// go on, else false with the block's result in *r.
inline bool Stream::careful_step(const uint32_t* litlen, const uint32_t* dist, InflateResult* r) {
  refill();
  if (phantom_consumed()) return stop(r, fail(InflateResult::kTruncated, ""));
  const uint32_t e = decode(litlen, kLitlenBits);
  if (e & kLiteral) {
    // Nothing from bits past the input's end is written: every byte
    // produced, even by a truncated stream, is the stream's.
    if (phantom_consumed()) return stop(r, fail(InflateResult::kTruncated, ""));
    if (out == out_end) return stop(r, fail(InflateResult::kTooLong, ""));
    *out++ = uint8_t(e >> 16);
    if (e & kTwoLiterals) {
      if (out == out_end) return stop(r, fail(InflateResult::kTooLong, ""));
      *out++ = uint8_t(e >> 24);
    }
    return true;
  }
  if (e & kInvalid) return stop(r, fail(InflateResult::kCorrupt, "an invalid literal/length code"));
  if (e & kEndOfBlock) {
    if (phantom_consumed()) return stop(r, fail(InflateResult::kTruncated, ""));
    return stop(r, InflateResult{});
  }
  refill();
  const unsigned len = (e >> 16) + take((e >> 8) & 0xf);
  const uint32_t d = decode(dist, kDistBits);
  if (d & kInvalid) return stop(r, fail(InflateResult::kCorrupt, "an invalid distance code"));
  const unsigned distance = (d >> 16) + take((d >> 8) & 0xf);
  if (phantom_consumed()) return stop(r, fail(InflateResult::kTruncated, ""));
  if (distance > size_t(out - out_begin)) return stop(r, fail(InflateResult::kCorrupt, "a distance too far back"));
  // A match longer than the room left fills it (a caller decoding a
  // prefix of the stream gets every byte of it) and stops.
  const size_t n = std::min<size_t>(len, size_t(out_end - out));
  const uint8_t* src = out - distance;
  for (size_t k = 0; k < n; ++k) out[k] = src[k];
  out += n;
  if (n < len) return stop(r, fail(InflateResult::kTooLong, ""));
  return true;
}

inline InflateResult Decoder::run() {
  for (;;) {
    if (block_mark != nullptr) {
      block_mark->in_bit = consumed_bits();
      block_mark->out = uint64_t(out - out_begin);
    }
    refill();
    const unsigned final_block = take(1);
    const unsigned type = take(2);
    if (phantom_consumed()) return fail(InflateResult::kTruncated, "");
    InflateResult r;
    if (type == 0) {
      r = stored_block();
    } else if (type == 1) {
      litlen = fixed_tables().litlen;
      dist = fixed_tables().dist;
      r = huffman_block(litlen, dist);
    } else if (type == 2) {
      if (!read_dynamic_tables()) {
        return fail(*what != '\0' ? InflateResult::kCorrupt : InflateResult::kTruncated, what);
      }
      r = huffman_block(litlen, dist);
    } else {
      return fail(InflateResult::kCorrupt, "an invalid block type");
    }
    if (!r.ok()) return r;
    if (final_block) {
      r.produced = uint64_t(out - out_begin);
      r.consumed = consumed();
      return r;
    }
  }
}

DLFEED_DETAIL_END

}  // namespace deflate_detail

DLFEED_INLINE uint32_t adler32(std::span<const std::byte> bytes, uint32_t adler) {
  return detail::adler32_extend(adler, bytes.data(), bytes.size());
}

DLFEED_INLINE InflateResult inflate_deflate_at(std::span<const std::byte> in, InflateResume start,
                                               std::span<std::byte> out, InflateResume* last_block) {
  // Heap, not stack: the tables are 43 KB, and decode threads' stacks may be
  // small. Default-initialized: the tables are written before they are read.
  std::unique_ptr<deflate_detail::Decoder> d(new deflate_detail::Decoder);
  d->in_begin = reinterpret_cast<const uint8_t*>(in.data());
  d->in_end = d->in_begin + in.size();
  d->out_begin = reinterpret_cast<uint8_t*>(out.data());
  d->out_end = d->out_begin + out.size();
  d->block_mark = last_block;
  if (start.out > out.size() || start.in_bit > uint64_t(in.size()) * 8) {
    InflateResult r;
    r.code = InflateResult::kCorrupt;
    r.what = "a start outside the input or the output";
    return r;
  }
  d->out = d->out_begin + start.out;
  d->in = d->in_begin + start.in_bit / 8;
  if (start.in_bit % 8 != 0) {
    d->refill();
    d->drop(unsigned(start.in_bit % 8));
  }
  return d->run();
}

DLFEED_INLINE InflateResult inflate_deflate(std::span<const std::byte> in, std::span<std::byte> out) {
  return inflate_deflate_at(in, InflateResume{}, out, nullptr);
}

DLFEED_INLINE InflateResult inflate_zlib(std::span<const std::byte> in, std::span<std::byte> out) {
  InflateResult r;
  if (in.size() < 2) {
    r.code = InflateResult::kTruncated;
    return r;
  }
  const unsigned cmf = unsigned(in[0]), flg = unsigned(in[1]);
  r.code = InflateResult::kCorrupt;
  if ((cmf & 0xf) != 8) {
    r.what = "a zlib header whose method is not deflate";
  } else if ((cmf >> 4) > 7) {
    r.what = "a zlib header with an invalid window size";
  } else if ((cmf << 8 | flg) % 31 != 0) {
    r.what = "a zlib header whose check bits do not match";
  } else if (flg & 0x20) {
    r.what = "a zlib stream that needs a preset dictionary";
  } else {
    r = inflate_deflate(in.subspan(2), out);
    r.consumed += 2;
    if (!r.ok()) return r;
    if (in.size() - r.consumed < 4) {
      r.code = InflateResult::kTruncated;
      return r;
    }
    const auto* t = reinterpret_cast<const uint8_t*>(in.data()) + r.consumed;
    const uint32_t want = uint32_t(t[0]) << 24 | uint32_t(t[1]) << 16 | uint32_t(t[2]) << 8 | t[3];
    if (adler32(out.first(r.produced)) != want) {
      r.code = InflateResult::kChecksum;
      r.what = "an Adler-32 that does not match the data";
      return r;
    }
    r.consumed += 4;
  }
  return r;
}

}  // namespace dlfeed
