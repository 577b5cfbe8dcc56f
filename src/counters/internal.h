// SPDX-License-Identifier: Apache-2.0
// What the counters' files share and nothing outside them sees: the slabs a
// thread writes, the trace slots, a reading of every slab (Raw) and an
// epoch's state. The recorder (recorder.cc) writes the slabs; epochs.cc turns
// readings into epoch reports; trace.cc fills the trace slots; export_*.cc
// turn snapshots and traces into text.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::counters {

inline constexpr auto kRelaxed = std::memory_order_relaxed;

inline double secs(uint64_t ns) { return static_cast<double>(ns) * 1e-9; }

/// The names given by Counters::set_thread_name, by thread index.
std::map<uint32_t, std::string> thread_names_copy();

namespace detail {

struct Slab {
  std::array<std::atomic<uint64_t>, kNumIds> sum{};
  std::array<std::atomic<uint64_t>, kNumIds> count{};
  std::array<std::atomic<uint64_t>, kNumIds> max{};
  std::array<std::array<std::atomic<uint64_t>, kHistBuckets>, kNumIds> hist{};
};

// Every slab of one Counters. A slab is written by one thread at a time: the
// thread that holds it in its cache; when that thread ends (or evicts it from
// its cache) the slab goes to `idle` with its sums, and the next thread to
// record takes it and adds to them. So the slabs are as many as the threads
// that ever recorded at once, however many threads come and go (the loader
// starts a pipeline thread per epoch).
//
// Recording never throws (it runs in destructors, a Span's): `idle` has room
// for every slab of `all`, so handing one back allocates nothing, and a
// thread that finds no memory for a slab of its own records into `spare`,
// which such threads share (their counts may then be lost to races, never
// the process to an exception).
struct SlabPool {
  SlabPool() {
    all.push_back(std::make_unique<Slab>());
    spare = all.back().get();
  }
  std::mutex mu;
  std::vector<std::unique_ptr<Slab>> all;  // summed by read_raw
  std::vector<Slab*> idle;                 // held by no thread (capacity: all.size())
  Slab* spare = nullptr;                   // in `all`, never in a thread's cache or `idle`
};

struct TraceSlot {
  std::atomic<uint32_t> ready{0};
  uint32_t tid = 0;
  const char* name = nullptr;
  const char* cat = nullptr;
  uint64_t ts = 0, dur = 0, a0 = 0, a1 = 0, a2 = 0;
};

}  // namespace detail

/// Every slab summed at time t, with the components' busy times.
struct Counters::Raw {
  uint64_t t = 0;
  std::array<uint64_t, kNumIds> sum{}, count{}, max{};
  std::vector<uint64_t> hist = std::vector<uint64_t>(kNumIds * kHistBuckets, 0);
  std::array<uint64_t, kNumComponents> busy{};

  void subtract(const Raw& b) {
    for (size_t i = 0; i < kNumIds; ++i) {
      sum[i] -= std::min(sum[i], b.sum[i]);
      count[i] -= std::min(count[i], b.count[i]);
    }
    for (size_t i = 0; i < hist.size(); ++i) hist[i] -= std::min(hist[i], b.hist[i]);
    for (size_t i = 0; i < kNumComponents; ++i) busy[i] -= std::min(busy[i], b.busy[i]);
  }
};

// An epoch's counters: a reading less the one at the epoch's start, with
// sparse histograms. max: the largest value since creation or reset (a
// distribution's max is its top bucket's, clamped to this).
struct Counters::Delta {
  std::array<uint64_t, kNumIds> sum{}, count{}, max{};
  std::array<uint64_t, kNumComponents> busy{};
  std::array<Histogram, kNumIds> hist;
};

struct Counters::EpochState {
  uint64_t epoch = 0;
  uint64_t t0 = 0, t1 = 0;
  bool open = true, complete = false;
  std::shared_ptr<Raw> start;  // while open
  uint64_t first_step_end = 0;
  uint64_t first_step_compute = 0;
  // Once closed: its Delta as varints (end_epoch packs, report_of unpacks).
  // A full EpochReport is ~2 KiB and its histograms more; this is ~150 bytes
  // for a short epoch, a few bytes more per histogram bucket.
  std::string packed;
};

}  // namespace dlfeed::counters
