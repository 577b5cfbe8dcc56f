// SPDX-License-Identifier: Apache-2.0
// Each loader has its own threads: a second loader made while a first is
// mid-epoch gets the threads it asked for (oneTBB's worker pool is one per
// process, sized by the first arena unless the loaders grow it), and holding
// a dataset in memory spreads its copies without changing a byte.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <thread>
#include <vector>

#include "dev/generate.h"
#include "dlfeed/loader.h"
#include "format/test_util.h"
#include "gtest/gtest.h"
#include "support/dataset.h"

namespace dlfeed {
namespace {

constexpr uint64_t kSeed = 11;

// gzip-chunked HDF5 (a chunk per sample): decode is the work.
std::string deflated_hdf5(const std::string& dir) {
  gen::DatasetSpec spec = testing::dataset_spec(dir, FileFormat::kHdf5, 4, 96, Shape{64, 64, 4}, DType::f32(), kSeed);
  spec.compression = gen::Compression::kDeflate;
  spec.chunk_samples = 1;
  auto written = testing::write_generated(spec);
  EXPECT_TRUE(written.ok()) << written.status();
  return written.ok() ? written->path : "";
}

LoaderOptions options(const std::string& path, uint32_t threads) {
  LoaderOptions o;
  o.paths = {path};
  o.fields = {"records"};
  o.batch_size = 4;
  o.threads = threads;
  o.resident = Mode::kOff;
  o.order.strategy = "global_shuffle";
  return o;
}

uint64_t drain(Loader& loader) {
  uint64_t n = 0;
  while (true) {
    auto b = loader.next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || !*b) break;
    n += (*b)->size();
  }
  return n;
}

// The sample ids of `loader`'s next `n` batches (all that remain when n is 0).
std::vector<uint64_t> ids_of(Loader& loader, uint64_t n = 0) {
  std::vector<uint64_t> ids;
  for (uint64_t k = 0; n == 0 || k < n; ++k) {
    auto b = loader.next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || !*b) break;
    ids.insert(ids.end(), (*b)->sample_ids.begin(), (*b)->sample_ids.end());
  }
  return ids;
}

// overlap_epochs: once epoch 0 is all read the pipeline reads epoch 1 (its
// batches counted as look-ahead while epoch 0's last are still to be taken
// or already taken), and start_epoch(1) adopts them: the same ids as a fresh
// loader's epoch 1, a state() inside it as a fresh one's; another epoch
// cancels them.
TEST(LoaderThreads, OverlappedEpochsReadTheNextOneAheadAndAdoptIt) {
  const std::string path = deflated_hdf5(testing::scratch_dir() + "/overlap_hdf5");
  LoaderOptions o = options(path, 2);
  o.advanced.prefetch = "depth:4";
  auto fresh = Loader::create(o).value();
  auto loader = Loader::create(o).value();
  loader->set_overlap_epochs(true);
  const uint64_t n = loader->batches_per_epoch();
  ASSERT_TRUE(loader->start_epoch(0).ok());
  ASSERT_TRUE(fresh->start_epoch(0).ok());
  EXPECT_EQ(ids_of(*loader, n), ids_of(*fresh));  // every batch of epoch 0, its end not yet taken
  // Epoch 0's batches are all handed out: the look-ahead is epoch 1's.
  uint64_t ahead = 0;
  for (int i = 0; i < 6000 && ahead == 0; ++i) {
    ahead = loader->stats().lookahead_batches;
    if (ahead == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(ahead, 1u);
  EXPECT_TRUE(ids_of(*loader).empty());  // the end of epoch 0
  ASSERT_TRUE(loader->start_epoch(1).ok());
  ASSERT_TRUE(fresh->start_epoch(1).ok());
  EXPECT_EQ(ids_of(*loader, 3), ids_of(*fresh, 3));
  EXPECT_EQ(loader->state(), fresh->state());
  EXPECT_EQ(ids_of(*loader), ids_of(*fresh));
  // Epoch 2 is being read ahead; start_epoch(5) cancels it and runs epoch 5.
  ASSERT_TRUE(loader->start_epoch(5).ok());
  ASSERT_TRUE(fresh->start_epoch(5).ok());
  EXPECT_EQ(ids_of(*loader), ids_of(*fresh));
}

TEST(LoaderThreads, ASecondLoaderGetsItsOwnThreadsWhileTheFirstIsMidEpoch) {
  const std::string path = deflated_hdf5(testing::scratch_dir() + "/threads_hdf5");
  auto first = Loader::create(options(path, 2)).value();
  ASSERT_TRUE(first->start_epoch(0).ok());
  auto one = first->next();  // the first loader's arena is running: mid-epoch
  ASSERT_TRUE(one.ok() && *one);

  auto second = Loader::create(options(path, 4)).value();
  EXPECT_EQ(second->stats().threads, 4u);
  ASSERT_TRUE(second->start_epoch(0).ok());
  EXPECT_EQ(drain(*second), 4u * 96);
  // 4 threads decoding batches at once; with oneTBB's pool sized by the
  // first loader (1 worker on a 2-core machine) it was at most 2. How many
  // overlap depends on the scheduler too (ctest runs another test beside
  // this one): up to two more epochs, the first loader still mid-epoch.
  for (uint64_t e = 1; e < 3 && second->stats().decode_peak < 3; ++e) {
    ASSERT_TRUE(second->start_epoch(e).ok());
    EXPECT_EQ(drain(*second), 4u * 96);
  }
  EXPECT_GE(second->stats().decode_peak, 3u) << "the second loader's arena did not get its threads";
  EXPECT_LE(second->stats().decode_peak, 4u);

  EXPECT_EQ(drain(*first) + (*one)->size(), 4u * 96);
  EXPECT_EQ(first->stats().threads, 2u);
  EXPECT_LE(first->stats().decode_peak, 2u);  // its own arena: no more than it asked for
}

TEST(LoaderThreads, HeldCopiesSpreadOverThreadsGiveTheSameBatches) {
  // 64 KiB samples, batches of 64: 4 MiB of copies each, spread when the
  // loader has more than 2 threads (the held gather route).
  const std::string dir = testing::scratch_dir() + "/threads_npy";
  gen::DatasetSpec spec = testing::dataset_spec(dir, FileFormat::kNpy, 3, 100, Shape{128, 128, 4}, DType::u8(), kSeed);
  auto written = testing::write_generated(spec);
  ASSERT_TRUE(written.ok()) << written.status();
  auto epoch_of = [&](uint32_t threads) {
    LoaderOptions o;
    o.paths = {written->path};
    o.batch_size = 64;
    o.threads = threads;
    o.resident = Mode::kOn;
    o.order.strategy = "global_shuffle";
    o.order.seed = 9;
    auto loader = Loader::create(o).value();
    EXPECT_EQ(loader->stats().route, "gather");
    EXPECT_TRUE(loader->start_epoch(1).ok());
    std::set<uint64_t> seen;
    uint64_t n = 0;
    while (true) {
      auto b = loader->next();
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok() || !*b) break;
      for (size_t i = 0; i < (*b)->size(); ++i) {
        const uint64_t id = (*b)->sample_ids[i];
        const auto data = (*b)->fields[0].sample(i);
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(data.data()), data.size()),
                  testing::expected_sample(kSeed, id, DType::u8(), spec.sample_shape))
            << "sample " << id << " with " << threads << " threads";
        seen.insert(id);
        ++n;
      }
    }
    EXPECT_EQ(n, 300u);
    EXPECT_EQ(seen.size(), 300u);
    return loader->stats().bytes_read;
  };
  EXPECT_EQ(epoch_of(2), epoch_of(6));
}

// A child of fork() has none of its parent's oneTBB workers, though oneTBB's
// bookkeeping says it has: decode work queued there waited forever (a torch
// DataLoader's fork workers after the parent finished an epoch of gzip
// HDF5). A loader made in the child runs its stages in turn instead, with
// the same bytes; the child is bounded by alarm() so a regression fails,
// not hangs.
TEST(LoaderThreads, AChildForkedAfterAFinishedEpochDecodesWithoutTheParentsWorkers) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not run threads started after a multithreaded fork";
#else
  const std::string path = deflated_hdf5(testing::scratch_dir() + "/fork_hdf5");
  // Every sample's bytes checked, in the parent and again in the child.
  auto epoch_ok = [&](Loader& loader) -> uint64_t {
    if (!loader.start_epoch(0).ok()) return 0;
    uint64_t n = 0;
    while (true) {
      auto b = loader.next();
      if (!b.ok()) return 0;
      if (!*b) break;
      for (size_t i = 0; i < (*b)->size(); ++i) {
        const auto data = (*b)->fields[0].sample(i);
        if (std::string(reinterpret_cast<const char*>(data.data()), data.size()) !=
            testing::expected_sample(kSeed, (*b)->sample_ids[i], DType::f32(), Shape{64, 64, 4})) {
          return 0;
        }
        ++n;
      }
    }
    return n;
  };
  auto parent = Loader::create(options(path, 2)).value();
  ASSERT_EQ(epoch_ok(*parent), 4u * 96);  // oneTBB's workers ran here: the epoch is finished, the arena idle
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(60);
    // The parent's loader is refused here, and let go of without waiting for its threads.
    const absl::Status refused = parent->start_epoch(1);
    if (refused.ok() || std::string(refused.message()).find("a child of fork()") == std::string::npos) ::_exit(4);
    parent.reset();
    auto made = Loader::create(options(path, 4));
    int code = 3;
    if (made.ok()) {
      const bool read_all = epoch_ok(**made) == 4u * 96;  // hung here before: alarm() ends it
      code = !read_all ? 1 : (*made)->stats().threads != 1 ? 2 : 0;
    }
    std::fflush(nullptr);
    ::_exit(code);  // not the parent's loader's destructor: its threads are not here
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child did not finish (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                 << "; SIGALRM: it hung)";
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: wrong bytes or an error; 2: decode threads made; 3: create failed; 4: the parent's loader not refused";
  // The parent's threads are untouched.
  EXPECT_EQ(epoch_ok(*parent), 4u * 96);
  EXPECT_EQ(parent->stats().threads, 2u);
#endif
}

}  // namespace
}  // namespace dlfeed
