// SPDX-License-Identifier: Apache-2.0
// Batches the consumer holds (a copy queue to a GPU, gradient accumulation,
// a user's own prefetch) must not shrink the loader's read-ahead: the
// prefetch policy's byte limit counts only the look-ahead, the memory budget
// counts both. And the batch pool takes a user's allocator (LoaderOptions::
// buffer_allocator, e.g. cudaHostAlloc): every batch buffer comes from it,
// each is allocated once and reused, and each goes back to it.

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dev/generate.h"
#include "dlfeed/loader.h"
#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed {
namespace {

using testing::scratch_dir;

constexpr uint64_t kSampleBytes = 64 << 10;  // 256 x 256 uint8
constexpr uint64_t kBatch = 4;

// 3 HDF5 files x 32 samples of 64 KiB (+ an int label): 24 batches of 4.
std::string make_images(const std::string& root) {
  gen::DatasetSpec spec;
  spec.dir = root + "/held";
  spec.format = FileFormat::kHdf5;
  spec.files = 3;
  spec.samples_per_file = 32;
  spec.sample_shape = {256, 256};
  spec.seed = 11;
  EXPECT_TRUE(gen::write_dataset(spec).ok());
  return spec.dir;
}

LoaderOptions images(const std::string& dir, const char* resident) {
  LoaderOptions o;
  o.paths = {dir};
  o.fields = {"records", "labels"};
  o.batch_size = kBatch;
  o.threads = 2;
  o.order.strategy = "global_shuffle";
  o.order.seed = 4;
  o.resident = parse_mode(resident, "resident").value();
  o.memory_budget = 64 << 20;
  return o;
}

// Takes `hold` batches and keeps them; then waits until the look-ahead holds
// `want` batches (or 10 s pass) and returns how many it holds.
uint64_t lookahead_with_held(Loader& loader, uint64_t hold, uint64_t want,
                             std::vector<std::shared_ptr<const Batch>>& held) {
  EXPECT_TRUE(loader.start_epoch(0).ok());
  for (uint64_t i = 0; i < hold; ++i) {
    auto b = loader.next();
    EXPECT_TRUE(b.ok() && *b != nullptr);
    held.push_back(*b);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (loader.stats().lookahead_batches < want && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // had it gone past `want`, it would show now
  return loader.stats().lookahead_batches;
}

TEST(HeldBatches, DoNotShrinkTheReadAhead) {
  const std::string dir = make_images(scratch_dir());
  for (const char* resident : {"off", "on"}) {
    // Room in the policy's byte limit for 4 batches ahead (a batch: 4 x 64 KiB
    // of images, the labels' few bytes, less than 1 KiB of slack each).
    const uint64_t room = 4 * (kBatch * kSampleBytes + 1024);
    for (uint64_t hold : {0, 1, 4, 8}) {
      LoaderOptions o = images(dir, resident);
      o.advanced.prefetch = "depth:16,budget:" + std::to_string(room);
      auto loader = Loader::create(o).value();
      std::vector<std::shared_ptr<const Batch>> held;
      const uint64_t ahead = lookahead_with_held(*loader, hold, 4, held);
      EXPECT_EQ(ahead, 4u) << "resident " << resident << ", " << hold << " batches held: the read-ahead must stay "
                           << "4 batches (it was 1 when held batches counted against the policy's bytes)";
      const LoaderStats s = loader->stats();
      EXPECT_EQ(s.held_batches, hold);
      EXPECT_EQ(s.batches, hold);
      EXPECT_LE(s.peak_in_flight_bytes, (hold + 4) * (kBatch * kSampleBytes + 1024));
    }
  }
}

TEST(HeldBatches, StillCountAgainstTheMemoryBudget) {
  const std::string dir = make_images(scratch_dir());
  LoaderOptions o = images(dir, "off");
  o.advanced.prefetch = "depth:16";
  // 6 batches' worth: with 4 held, 2 fit ahead.
  o.memory_budget = 6 * (kBatch * kSampleBytes + 1024);
  auto loader = Loader::create(o).value();
  std::vector<std::shared_ptr<const Batch>> held;
  EXPECT_EQ(lookahead_with_held(*loader, 4, 2, held), 2u);
  held.clear();  // dropped: their room goes to the read-ahead
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (loader->stats().lookahead_batches < 6 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(loader->stats().lookahead_batches, 6u);
  EXPECT_LE(loader->stats().peak_in_flight_bytes, o.memory_budget);
}

// A user's allocator that records its blocks (as cudaHostAlloc would pin them).
struct Recorder {
  std::mutex mu;
  std::map<const std::byte*, size_t> live;
  uint64_t allocations = 0, frees = 0, bad_frees = 0;
  bool owns(const std::byte* p, size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = live.upper_bound(p);
    if (it == live.begin()) return false;
    --it;
    return p >= it->first && p + n <= it->first + it->second;
  }
};

std::shared_ptr<const BufferAllocator> recording(const std::shared_ptr<Recorder>& r) {
  auto a = std::make_shared<BufferAllocator>();
  a->allocate = [r](size_t n) {
    void* p = std::aligned_alloc(64, (n + 63) / 64 * 64);
    std::lock_guard<std::mutex> lock(r->mu);
    r->live[static_cast<const std::byte*>(p)] = n;
    ++r->allocations;
    return p;
  };
  a->free = [r](void* p, size_t n) {
    {
      std::lock_guard<std::mutex> lock(r->mu);
      auto it = r->live.find(static_cast<const std::byte*>(p));
      if (it == r->live.end() || it->second != n) {
        ++r->bad_frees;
      } else {
        r->live.erase(it);
      }
      ++r->frees;
    }
    std::free(p);
  };
  return a;
}

TEST(BufferAllocator, EveryBatchBufferComesFromItOnceAndGoesBack) {
  const std::string dir = make_images(scratch_dir());
  auto rec = std::make_shared<Recorder>();
  uint64_t batches = 0;
  {
    LoaderOptions o = images(dir, "off");
    o.buffer_allocator = recording(rec);
    auto loader = Loader::create(o).value();
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      ASSERT_TRUE(loader->start_epoch(epoch).ok());
      std::vector<std::shared_ptr<const Batch>> held;  // a consumer keeping 3 batches
      while (auto b = loader->next().value()) {
        for (const BatchField& f : b->fields) {
          EXPECT_TRUE(rec->owns(f.bytes.data(), f.bytes.size())) << f.name << " of batch " << b->index;
        }
        held.push_back(b);
        if (held.size() > 3) held.erase(held.begin());
        ++batches;
      }
    }
    const LoaderStats s = loader->stats();
    EXPECT_EQ(batches, 72u);
    // Pooled: a buffer is allocated (pinned) once, then reused. A read buffer
    // and two fields a batch, at most 3 held + 8 ahead + the few in hand.
    EXPECT_GT(s.pool_reuses, batches);
    EXPECT_LE(rec->allocations, 3 * (3 + 8 + 4)) << "buffers must be reused, not allocated per batch";
    EXPECT_EQ(rec->allocations, s.pool_allocations);
  }
  EXPECT_EQ(rec->bad_frees, 0u);
  EXPECT_EQ(rec->frees, rec->allocations) << "every buffer goes back to the allocator that made it";
  EXPECT_TRUE(rec->live.empty());
}

}  // namespace
}  // namespace dlfeed
