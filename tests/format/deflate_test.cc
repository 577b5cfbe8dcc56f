// SPDX-License-Identifier: Apache-2.0
// dlfeed's DEFLATE/zlib decoder (dlfeed/format/deflate.h) against zlib:
// streams zlib writes at every level and strategy decode to the same bytes;
// cut, corrupted and crafted streams are refused where zlib refuses them,
// with the reason; the Adler-32 matches zlib's.
#include "dlfeed/format/deflate.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace dlfeed {
namespace {

using Bytes = std::vector<std::byte>;

// zlib's deflate of `in`: raw (window_bits < 0) or zlib-wrapped.
Bytes zlib_compress(const Bytes& in, int level, int strategy, int window_bits, int mem_level = 8) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, level, Z_DEFLATED, window_bits, mem_level, strategy), Z_OK);
  Bytes out(deflateBound(&zs, in.size()) + 16);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// zlib's inflate into `cap` bytes: the output when the stream ends, else nothing.
std::optional<Bytes> zlib_inflate(const Bytes& in, size_t cap, bool raw) {
  z_stream zs{};
  EXPECT_EQ(inflateInit2(&zs, raw ? -MAX_WBITS : MAX_WBITS), Z_OK);
  Bytes out(cap);
  unsigned char dummy = 0;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = cap ? reinterpret_cast<Bytef*>(out.data()) : &dummy;
  zs.avail_out = static_cast<uInt>(cap);
  const int rc = inflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) return std::nullopt;
  return out;
}

// Inputs with the shapes real data has: random, text-like, runs, a float
// array as HDF5's shuffle filter leaves it, short-period repeats.
std::vector<std::pair<std::string, Bytes>> inputs() {
  std::mt19937 rng(7);
  std::vector<std::pair<std::string, Bytes>> v;
  v.emplace_back("empty", Bytes{});
  v.emplace_back("one byte", Bytes{std::byte{42}});
  Bytes random(70000);
  for (auto& b : random) b = std::byte(rng());
  v.emplace_back("random", random);
  std::string text;
  const char* words[] = {"sample ", "batch ", "epoch ", "shuffle ", "read ", "HDF5 ", "the ", "loader "};
  while (text.size() < 100000) text += words[rng() % 8];
  v.emplace_back("text", Bytes(reinterpret_cast<const std::byte*>(text.data()),
                               reinterpret_cast<const std::byte*>(text.data()) + text.size()));
  Bytes runs;
  while (runs.size() < 80000) runs.insert(runs.end(), 1 + rng() % 700, std::byte(rng() % 4));
  v.emplace_back("runs", runs);
  // 16,384 float32 normals rounded to 2 decimals, byte planes apart (HDF5 shuffle).
  std::normal_distribution<float> normal;
  std::vector<float> f(16384);
  for (auto& x : f) x = std::round(normal(rng) * 100) / 100;
  Bytes planes(f.size() * 4);
  for (size_t i = 0; i < f.size(); ++i) {
    unsigned char b[4];
    std::memcpy(b, &f[i], 4);
    for (int k = 0; k < 4; ++k) planes[k * f.size() + i] = std::byte(b[k]);
  }
  v.emplace_back("shuffled floats", planes);
  for (int period : {2, 3, 5, 7, 9, 15, 17, 31, 300}) {
    Bytes rep(20000 + period);
    for (size_t i = 0; i < rep.size(); ++i) rep[i] = i < size_t(period) ? std::byte(rng()) : rep[i - period];
    v.emplace_back("period " + std::to_string(period), rep);
  }
  return v;
}

TEST(Deflate, DecodesWhatZlibWritesAtEveryLevelAndStrategy) {
  int streams = 0;
  for (const auto& [name, data] : inputs()) {
    for (int strategy : {Z_DEFAULT_STRATEGY, Z_FILTERED, Z_HUFFMAN_ONLY, Z_RLE, Z_FIXED}) {
      for (int level : {0, 1, 2, 6, 9}) {
        for (int wbits : {-15, -9, 15, 10}) {
          SCOPED_TRACE(name + " strategy " + std::to_string(strategy) + " level " + std::to_string(level) +
                       " window bits " + std::to_string(wbits));
          const Bytes z = zlib_compress(data, level, strategy, wbits, level == 2 ? 1 : 8);
          Bytes out(data.size() + 300, std::byte{0xee});
          const InflateResult r =
              wbits < 0 ? inflate_deflate(z, std::span(out).first(data.size())) : inflate_zlib(z, out);
          ASSERT_TRUE(r.ok()) << r.what << " code " << int(r.code);
          ASSERT_EQ(r.produced, data.size());
          ASSERT_EQ(r.consumed, z.size());
          ASSERT_TRUE(data.empty() || std::memcmp(out.data(), data.data(), data.size()) == 0);
          ++streams;
        }
      }
    }
  }
  EXPECT_GT(streams, 1000);
}

TEST(Deflate, OutputTooSmallIsTooLongAndBiggerIsFine) {
  const auto all = inputs();
  const Bytes& data = all[3].second;  // text
  const Bytes z = zlib_compress(data, 6, Z_DEFAULT_STRATEGY, 15);
  Bytes out(data.size() + 1000);
  InflateResult r = inflate_zlib(z, std::span(out).first(data.size() - 1));
  EXPECT_EQ(r.code, InflateResult::kTooLong);
  EXPECT_LE(r.produced, data.size() - 1);
  r = inflate_zlib(z, out);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.produced, data.size());
  // Bytes after the stream are left alone, as zlib leaves them.
  Bytes longer = z;
  longer.insert(longer.end(), 9, std::byte{0x55});
  r = inflate_zlib(longer, out);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.consumed, z.size());
}

TEST(Deflate, EveryCutIsTruncated) {
  const auto all = inputs();
  for (int idx : {3, 5, 6}) {  // text, shuffled floats, period 2
    Bytes data = all[idx].second;
    data.resize(std::min<size_t>(data.size(), 3000));
    for (int strategy : {Z_DEFAULT_STRATEGY, Z_FIXED}) {
      for (bool raw : {true, false}) {
        const Bytes z = zlib_compress(data, 6, strategy, raw ? -15 : 15);
        Bytes out(data.size());
        for (size_t cut = 0; cut < z.size(); ++cut) {
          const Bytes part(z.begin(), z.begin() + cut);
          const InflateResult r = raw ? inflate_deflate(part, out) : inflate_zlib(part, out);
          ASSERT_EQ(r.code, InflateResult::kTruncated) << "cut at " << cut << " of " << z.size() << ": " << r.what;
          ASSERT_FALSE(zlib_inflate(part, out.size(), raw).has_value());
        }
      }
    }
  }
}

// Flipped bits and overwritten bytes: where zlib decodes the damaged stream,
// dlfeed decodes it to the same bytes; where zlib refuses it, so does dlfeed.
TEST(Deflate, DamagedStreamsAgreeWithZlib) {
  std::mt19937 rng(11);
  const auto all = inputs();
  int refused = 0, decoded = 0;
  for (int idx : {2, 3, 4, 5, 7}) {
    Bytes data = all[idx].second;
    data.resize(std::min<size_t>(data.size(), 20000));
    for (int strategy : {Z_DEFAULT_STRATEGY, Z_FIXED, Z_HUFFMAN_ONLY}) {
      const Bytes z = zlib_compress(data, 6, strategy, -15);
      for (int trial = 0; trial < 300; ++trial) {
        Bytes bad = z;
        const int edits = 1 + rng() % 3;
        for (int e = 0; e < edits; ++e) {
          const size_t at = rng() % bad.size();
          if (rng() % 2) {
            bad[at] ^= std::byte(1u << (rng() % 8));
          } else {
            bad[at] = std::byte(rng());
          }
        }
        const size_t cap = data.size() + (rng() % 2) * 5000;
        Bytes out(cap);
        const InflateResult r = inflate_deflate(bad, out);
        const auto want = zlib_inflate(bad, cap, true);
        SCOPED_TRACE("input " + std::to_string(idx) + " trial " + std::to_string(trial));
        ASSERT_EQ(r.ok(), want.has_value()) << "dlfeed: code " << int(r.code) << " " << r.what;
        if (r.ok()) {
          ASSERT_EQ(r.produced, want->size());
          ASSERT_TRUE(want->empty() || std::memcmp(out.data(), want->data(), want->size()) == 0);
          ++decoded;
        } else {
          ++refused;
        }
      }
    }
  }
  EXPECT_GT(refused, 100);
  EXPECT_GT(decoded, 10);
}

// Writes bits least significant first, as DEFLATE packs them.
struct BitWriter {
  Bytes bytes;
  unsigned used = 0;
  void put(uint32_t v, unsigned n) {
    for (unsigned i = 0; i < n; ++i) {
      if (used % 8 == 0) bytes.push_back(std::byte{0});
      if ((v >> i) & 1) bytes.back() |= std::byte(1u << (used % 8));
      ++used;
    }
  }
  // A Huffman code's bits go most significant first.
  void code(uint32_t c, unsigned n) {
    for (unsigned i = n; i-- > 0;) put((c >> i) & 1, 1);
  }
};

InflateResult decode(const Bytes& in, size_t cap = 1000) {
  Bytes out(cap);
  return inflate_deflate(in, out);
}

TEST(Deflate, CraftedStreamsSayWhatIsWrong) {
  EXPECT_STREQ(decode(Bytes{std::byte{0x07}}).what, "an invalid block type");
  EXPECT_STREQ(decode(Bytes{std::byte{0x01}, std::byte{5}, std::byte{0}, std::byte{0}, std::byte{0}}).what,
               "a stored block whose lengths do not match");
  {  // fixed block: a match before any output (length 3: code 0000001; distance 1: 00000)
    BitWriter w;
    w.put(1, 1);
    w.put(1, 2);
    w.code(1, 7);
    w.code(0, 5);
    const InflateResult r = decode(w.bytes);
    EXPECT_EQ(r.code, InflateResult::kCorrupt);
    EXPECT_STREQ(r.what, "a distance too far back");
  }
  {  // fixed block: literal 'a' (0x30 + 0x61), then distance code 30
    BitWriter w;
    w.put(1, 1);
    w.put(1, 2);
    w.code(0x30 + 'a', 8);
    w.code(1, 7);
    w.code(30, 5);
    EXPECT_STREQ(decode(w.bytes).what, "an invalid distance code");
  }
  {  // fixed block: literal/length symbol 286 (8-bit code 11000110)
    BitWriter w;
    w.put(1, 1);
    w.put(1, 2);
    w.code(0xc0 + 6, 8);
    EXPECT_STREQ(decode(w.bytes).what, "an invalid literal/length code");
  }
  {  // dynamic block declaring 287 literal/length codes
    BitWriter w;
    w.put(1, 1);
    w.put(2, 2);
    w.put(30, 5);
    w.put(0, 5);
    w.put(0, 4);
    for (int i = 0; i < 8; ++i) w.put(0, 8);
    EXPECT_STREQ(decode(w.bytes).what, "too many length or distance symbols");
  }
  {  // dynamic block whose code-length code is over-subscribed (three codes of 1 bit)
    BitWriter w;
    w.put(1, 1);
    w.put(2, 2);
    w.put(0, 5);
    w.put(0, 5);
    w.put(0, 4);  // 4 code-length code lengths: symbols 16, 17, 18, 0
    for (int i = 0; i < 3; ++i) w.put(1, 3);
    w.put(0, 3);
    for (int i = 0; i < 8; ++i) w.put(0, 8);
    EXPECT_STREQ(decode(w.bytes).what, "an invalid code lengths set");
  }
  {  // zlib header: not deflate; bad check bits; a preset dictionary
    Bytes out(10);
    EXPECT_STREQ(inflate_zlib(Bytes{std::byte{0x77}, std::byte{0x01}}, out).what,
                 "a zlib header whose method is not deflate");
    EXPECT_STREQ(inflate_zlib(Bytes{std::byte{0x78}, std::byte{0x9d}}, out).what,
                 "a zlib header whose check bits do not match");
    EXPECT_STREQ(inflate_zlib(Bytes{std::byte{0x78}, std::byte{0xbb}, std::byte{0}, std::byte{0}}, out).what,
                 "a zlib stream that needs a preset dictionary");
  }
  {  // a good stream whose Adler-32 is off by one bit
    const auto all = inputs();
    Bytes z = zlib_compress(all[3].second, 6, Z_DEFAULT_STRATEGY, 15);
    z.back() ^= std::byte{1};
    Bytes out(all[3].second.size());
    const InflateResult r = inflate_zlib(z, out);
    EXPECT_EQ(r.code, InflateResult::kChecksum);
    EXPECT_EQ(r.produced, out.size());
  }
}

// Decoding a prefix, resuming at a block, starting mid-byte and with a
// history: what the compressed TFRecord reader does from its checkpoints.
TEST(Deflate, PrefixesResumesBitOffsetsAndHistory) {
  const auto all = inputs();
  const Bytes& data = all[3].second;  // text, 100 KB: several blocks at memLevel 1
  const Bytes z = zlib_compress(data, 6, Z_DEFAULT_STRATEGY, -15, 1);
  // The first 40,000 bytes: output full, all of it the stream's.
  Bytes out(data.size());
  InflateResume mark;
  InflateResult r = inflate_deflate_at(z, {}, std::span(out).first(40000), &mark);
  ASSERT_EQ(r.code, InflateResult::kTooLong);
  ASSERT_EQ(r.produced, 40000u);
  ASSERT_EQ(0, std::memcmp(out.data(), data.data(), 40000));
  ASSERT_GT(mark.out, 0u);  // a later block than the first
  ASSERT_LE(mark.out, 40000u);
  // Going on from that block's start with the output so far as history.
  r = inflate_deflate_at(z, mark, out, &mark);
  ASSERT_TRUE(r.ok()) << r.what;
  ASSERT_EQ(r.produced, data.size());
  ASSERT_EQ(r.consumed, z.size());
  ASSERT_EQ(0, std::memcmp(out.data(), data.data(), data.size()));
  // Input cut at 60%: what comes out is a true prefix.
  Bytes cut(z.begin(), z.begin() + z.size() * 6 / 10);
  std::fill(out.begin(), out.end(), std::byte{0});
  r = inflate_deflate_at(cut, {}, out);
  ASSERT_EQ(r.code, InflateResult::kTruncated);
  ASSERT_GT(r.produced, data.size() / 3);
  ASSERT_EQ(0, std::memcmp(out.data(), data.data(), r.produced));
  // The stream k bits into its first byte.
  for (unsigned k = 1; k < 8; ++k) {
    Bytes shifted(z.size() + 1, std::byte{0});
    for (size_t i = 0; i < z.size(); ++i) {
      shifted[i] |= std::byte(uint8_t(unsigned(z[i]) << k));
      shifted[i + 1] |= std::byte(uint8_t(unsigned(z[i]) >> (8 - k)));
    }
    std::fill(out.begin(), out.end(), std::byte{0});
    r = inflate_deflate_at(shifted, InflateResume{k, 0}, out);
    ASSERT_TRUE(r.ok()) << "k " << k << ": " << r.what;
    ASSERT_EQ(0, std::memcmp(out.data(), data.data(), data.size())) << "k " << k;
  }
  // A stream written with a preset dictionary: the dictionary as history.
  const Bytes dict(data.begin(), data.begin() + 32768);
  const Bytes rest(data.begin() + 32768, data.end());
  z_stream zs{};
  ASSERT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  ASSERT_EQ(deflateSetDictionary(&zs, reinterpret_cast<const Bytef*>(dict.data()), uInt(dict.size())), Z_OK);
  Bytes zd(deflateBound(&zs, rest.size()) + 16);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(rest.data()));
  zs.avail_in = uInt(rest.size());
  zs.next_out = reinterpret_cast<Bytef*>(zd.data());
  zs.avail_out = uInt(zd.size());
  ASSERT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  zd.resize(zs.total_out);
  deflateEnd(&zs);
  Bytes both(data.size());
  std::memcpy(both.data(), dict.data(), dict.size());
  r = inflate_deflate_at(zd, InflateResume{0, dict.size()}, both);
  ASSERT_TRUE(r.ok()) << r.what;
  ASSERT_EQ(r.produced, data.size());
  ASSERT_EQ(0, std::memcmp(both.data(), data.data(), data.size()));
  // Without the history the same stream reaches too far back.
  Bytes alone(rest.size());
  EXPECT_STREQ(inflate_deflate(zd, alone).what, "a distance too far back");
}

TEST(Deflate, Adler32MatchesZlib) {
  std::mt19937 rng(3);
  for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(32), size_t(33), size_t(5552), size_t(32768),
                   size_t(32768 + 17), size_t(100000), size_t(3) << 20}) {
    Bytes b(n);
    for (auto& x : b) x = std::byte(rng());
    if (n == 0) {  // zlib's adler32 of a null buffer is its initial value, 1
      EXPECT_EQ(adler32(b, 12345u), 12345u);
      continue;
    }
    for (uint32_t start : {1u, 0xfff0fff0u, 12345u}) {
      EXPECT_EQ(adler32(b, start), uint32_t(::adler32(start, reinterpret_cast<const Bytef*>(b.data()), uInt(n))))
          << n << " bytes from " << start;
    }
    // The largest sums: every byte 0xff.
    Bytes ff(n, std::byte{0xff});
    EXPECT_EQ(adler32(ff, 0xfff0fff0u),
              uint32_t(::adler32(0xfff0fff0u, reinterpret_cast<const Bytef*>(ff.data()), uInt(n))))
        << n << " bytes of 0xff";
  }
}

}  // namespace
}  // namespace dlfeed
