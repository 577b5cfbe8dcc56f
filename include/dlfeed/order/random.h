// SPDX-License-Identifier: Apache-2.0
// The randomness behind every order: a specified generator, bounded draws and
// permutations that give the same result on every platform, compiler and
// standard library (no std:: distribution is used anywhere in the order
// stage, since std::uniform_int_distribution differs between libraries).
//
//  * mix64(x): the SplitMix64 output function applied to x + 0x9e3779b97f4a7c15.
//  * derive_key(seed, epoch, stream) = mix64(mix64(mix64(seed) ^ epoch) ^ stream).
//  * SplitMix64: state += 0x9e3779b97f4a7c15; output = finalizer(state).
//  * bounded(n): Lemire's multiply-shift with rejection: the high 64 bits of
//    x * n for a 64-bit draw x, redrawing while the low 64 bits are below
//    (2^64 - n) mod n. Exactly uniform on [0, n).
//  * fisher_yates(v, rng): for i = n-1 down to 1: j = bounded(i + 1); swap(v[i], v[j]).
//  * FeistelPermutation: a keyed bijection of [0, n) in O(1) memory (below).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <tuple>
#include <utility>

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI {

inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

/// SplitMix64's output function applied to x + golden gamma (a bijection of
/// 64-bit integers with good avalanche).
constexpr uint64_t mix64(uint64_t x) {
  uint64_t z = x + kGoldenGamma;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// The key of one random stream of one epoch: a hash of (seed, epoch, stream).
/// Strategies use distinct stream tags for their independent draws.
constexpr uint64_t derive_key(uint64_t seed, uint64_t epoch, uint64_t stream) {
  return mix64(mix64(mix64(seed) ^ epoch) ^ stream);
}

/// High and low 64 bits of a * b, computed exactly on any platform.
constexpr std::pair<uint64_t, uint64_t> mul_128(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
  const unsigned __int128 m = static_cast<unsigned __int128>(a) * b;
  return {static_cast<uint64_t>(m >> 64), static_cast<uint64_t>(m)};
#else
  const uint64_t a_lo = a & 0xffffffffULL, a_hi = a >> 32, b_lo = b & 0xffffffffULL, b_hi = b >> 32;
  const uint64_t ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo, hh = a_hi * b_hi;
  const uint64_t mid = (ll >> 32) + (lh & 0xffffffffULL) + (hl & 0xffffffffULL);
  return {hh + (lh >> 32) + (hl >> 32) + (mid >> 32), (mid << 32) | (ll & 0xffffffffULL)};
#endif
}

/// SplitMix64 (Steele, Lea, Flood 2014): 64-bit state, one add per draw.
class DLFEED_EXPORT SplitMix64 {
 public:
  constexpr explicit SplitMix64(uint64_t seed) : state_(seed) {}
  constexpr uint64_t next() {
    state_ += kGoldenGamma;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform on [0, n); n must be > 0.
  constexpr uint64_t bounded(uint64_t n) {
    auto [hi, lo] = mul_128(next(), n);
    if (lo < n) {
      const uint64_t threshold = (0 - n) % n;
      // lo changes through std::tie, which bugprone-infinite-loop does not see.
      while (lo < threshold) std::tie(hi, lo) = mul_128(next(), n);  // NOLINT(bugprone-infinite-loop)
    }
    return hi;
  }
  constexpr uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

/// Shuffles `v` in place: for i = n-1 down to 1, swap v[i] with v[bounded(i+1)].
template <typename T>
void fisher_yates(std::span<T> v, SplitMix64& rng) {
  for (uint64_t i = v.size(); i > 1; --i) {
    const uint64_t j = rng.bounded(i);
    std::swap(v[i - 1], v[j]);
  }
}

/// A keyed pseudorandom bijection of [0, n) with O(1) memory: a balanced
/// Feistel network over the smallest even number of bits 2h with 2^(2h) >= n
/// (h >= 1), 8 rounds with round function F_i(r) = mix64(r ^ k_i) masked to h
/// bits (k_i drawn from SplitMix64(key)), and cycle walking: values >= n are
/// encrypted again until they fall in [0, n). Since 2^(2h) < 4n (for n >= 2)
/// a lookup takes fewer than 4 network passes on average. Any n up to 2^64-1.
class DLFEED_EXPORT FeistelPermutation {
 public:
  static constexpr int kRounds = 8;

  FeistelPermutation() = default;
  FeistelPermutation(uint64_t n, uint64_t key) : n_(n) {
    half_bits_ = 1;
    while (half_bits_ < 32 && (n_ - 1) >> (2 * half_bits_) != 0) ++half_bits_;
    mask_ = (half_bits_ == 32) ? 0xffffffffULL : ((1ULL << half_bits_) - 1);
    SplitMix64 rng(key);
    for (auto& k : keys_) k = rng.next();
  }

  uint64_t size() const { return n_; }

  /// The image of x (x < n).
  uint64_t operator()(uint64_t x) const {
    do x = encrypt(x);
    while (x >= n_);
    return x;
  }
  /// The x with (*this)(x) == y (y < n).
  uint64_t inverse(uint64_t y) const {
    do y = decrypt(y);
    while (y >= n_);
    return y;
  }

 private:
  uint64_t encrypt(uint64_t x) const {
    uint64_t l = x >> half_bits_, r = x & mask_;
    for (int i = 0; i < kRounds; ++i) {
      const uint64_t t = l ^ (mix64(r ^ keys_[i]) & mask_);
      l = r;
      r = t;
    }
    return (l << half_bits_) | r;
  }
  uint64_t decrypt(uint64_t y) const {
    uint64_t l = y >> half_bits_, r = y & mask_;
    for (int i = kRounds - 1; i >= 0; --i) {
      const uint64_t t = r ^ (mix64(l ^ keys_[i]) & mask_);
      r = l;
      l = t;
    }
    return (l << half_bits_) | r;
  }

  uint64_t n_ = 0;
  unsigned half_bits_ = 1;
  uint64_t mask_ = 1;
  std::array<uint64_t, kRounds> keys_{};
};

}  // namespace dlfeed
