// SPDX-License-Identifier: Apache-2.0
// The emulated compute of a training step (fixed, or normal(mean, stdev)
// truncated at 0), shared by `dlfeed run` and `dlfeed dlio`.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "dlfeed/order/random.h"

namespace dlfeed::cli {

/// Running count, mean and standard deviation (Welford).
struct Moments {
  uint64_t n = 0;
  double mean = 0, m2 = 0, sum = 0;
  void add(double x) {
    ++n;
    sum += x;
    const double d = x - mean;
    mean += d / static_cast<double>(n);
    m2 += d * (x - mean);
  }
  double stdev() const { return n > 1 ? std::sqrt(m2 / static_cast<double>(n - 1)) : 0; }
};

/// The emulated compute of one step: fixed, or normal(mean, stdev) truncated
/// at 0 by drawing again, from SplitMix64 (order/random.h) seeded by --seed
/// and the Box-Muller transform, so a seed gives the same times everywhere.
class ComputeModel {
 public:
  ComputeModel(double mean_s, double stdev_s, uint64_t seed)
      : mean_(mean_s), stdev_(stdev_s), rng_(derive_key(seed, 0, 0xC0C0C0C0ull)) {}

  double next() {
    double t = mean_;
    if (stdev_ > 0) {
      t = -1;
      for (int tries = 0; tries < 1000 && t < 0; ++tries) t = mean_ + stdev_ * gaussian();
      t = std::max(t, 0.0);
    }
    drawn_.add(t);
    return t;
  }
  bool active() const { return mean_ > 0 || stdev_ > 0; }
  double mean() const { return mean_; }
  double stdev() const { return stdev_; }
  const Moments& drawn() const { return drawn_; }

 private:
  double uniform01() {  // (0, 1]: 53 random bits
    return (static_cast<double>(rng_.next() >> 11) + 1.0) * 0x1.0p-53;
  }
  double gaussian() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform01()));
    const double a = 2.0 * M_PI * uniform01();
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

  double mean_, stdev_;
  SplitMix64 rng_;
  bool has_spare_ = false;
  double spare_ = 0;
  Moments drawn_;
};

}  // namespace dlfeed::cli
