// SPDX-License-Identifier: Apache-2.0
// LoaderOptions::autotune on a real loader: while it moves the engines, the
// read-ahead depth and the decode threads, every batch is what it is with
// autotune off; and what the options set is never moved. DLFEED_CORES=8 (set
// before the first loader: the core count is read once) gives 8 engines made
// and active (one per core) and 8 decode threads, so there is room to move
// down on this 2-core machine too, and the read-ahead depth either way.
#include <cstdlib>
#include <vector>

#include "dev/generate.h"
#include "dlfeed/loader.h"
#include "format/test_util.h"
#include "gtest/gtest.h"
#include "support/dataset.h"

namespace dlfeed {
namespace {

constexpr uint64_t kSeed = 23;
const bool kEightCores = ::setenv("DLFEED_CORES", "8", 1) == 0;
const Shape kShape{64, 64, 4};

const std::string& dataset() {
  static const std::string path = [] {
    const std::string dir = testing::scratch_dir() + "/autotune_npy";
    gen::DatasetSpec spec = testing::dataset_spec(dir, FileFormat::kNpy, 4, 256, kShape, DType::u8(), kSeed);
    auto written = testing::write_generated(spec);
    EXPECT_TRUE(written.ok()) << written.status();
    return written.ok() ? written->path : std::string();
  }();
  return path;
}

LoaderOptions options(bool autotune) {
  LoaderOptions o;
  o.paths = {dataset()};
  o.batch_size = 16;
  o.resident = Mode::kOff;  // read: what the autotuner tunes
  o.order.strategy = "global_shuffle";
  o.order.seed = 5;
  o.autotune = autotune ? Mode::kOn : Mode::kOff;
  return o;
}

// One epoch's sample ids, every sample's bytes checked against what the generator wrote.
std::vector<uint64_t> epoch_ids(Loader& loader, uint64_t epoch) {
  std::vector<uint64_t> ids;
  EXPECT_TRUE(loader.start_epoch(epoch).ok());
  while (true) {
    auto b = loader.next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || !*b) break;
    for (size_t i = 0; i < (*b)->size(); ++i) {
      const uint64_t id = (*b)->sample_ids[i];
      const auto data = (*b)->fields[0].sample(i);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(data.data()), data.size()),
                testing::expected_sample(kSeed, id, DType::u8(), kShape))
          << "sample " << id << " of epoch " << epoch;
      ids.push_back(id);
    }
  }
  return ids;
}

TEST(LoaderAutotune, OnAndOffGiveTheSameBatchesWhileItMoves) {
  ASSERT_TRUE(kEightCores);
  LoaderOptions traced = options(true);
  traced.trace.enabled = true;
  traced.trace.io_sample_every = 1000;
  auto on = Loader::create(traced).value();
  auto off = Loader::create(options(false)).value();
  EXPECT_TRUE(on->stats().autotune);
  EXPECT_FALSE(off->stats().autotune);
  EXPECT_EQ(on->stats().io_engines_made, 8u);
  EXPECT_EQ(on->stats().io_engines, 8u);  // the machine's default, to start with
  EXPECT_EQ(off->stats().io_engines_made, 8u);
  uint64_t epoch = 0;
  // Until it has moved a few times (each window is at least 100 ms).
  for (; epoch < 200 && on->stats().autotune_changes < 3; ++epoch) {
    EXPECT_EQ(epoch_ids(*on, epoch), epoch_ids(*off, epoch)) << "epoch " << epoch;
    const LoaderStats s = on->stats();
    EXPECT_GE(s.io_engines, 1u);
    EXPECT_LE(s.io_engines, 8u);
    EXPECT_GE(s.threads, 2u);  // decode threads: between the floor and the 8 made
    EXPECT_LE(s.threads, 8u);
  }
  EXPECT_GE(on->stats().autotune_changes, 3u) << "it never moved in " << epoch << " epochs";
  EXPECT_EQ(off->stats().autotune_changes, 0u);
  // An "autotune" trace event per change, the last one saying what is in use now.
  std::vector<counters::TraceEvent> changes;
  for (const counters::TraceEvent& e : on->counters().trace_events()) {
    if (std::string(e.name) == "autotune") changes.push_back(e);
  }
  const LoaderStats s = on->stats();
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.back().a2, s.autotune_changes);
  EXPECT_EQ(changes.back().a0, s.io_engines);
  EXPECT_EQ(s.prefetch, "depth:" + std::to_string(changes.back().a1) + ",budget:268435456");
  EXPECT_EQ(off->stats().io_engines, 8u);
  EXPECT_EQ(off->stats().prefetch, "depth:8,budget:268435456");
}

TEST(LoaderAutotune, ExplicitOptionsAreNeverMoved) {
  LoaderOptions both = options(true);
  both.advanced.io_engines = 3;
  both.advanced.prefetch = "depth:4";
  both.threads = 4;
  auto fixed = Loader::create(both).value();
  EXPECT_FALSE(fixed->stats().autotune);  // nothing left to tune

  LoaderOptions engines = options(true);
  engines.advanced.io_engines = 3;  // depth left to it, engines and threads not
  engines.threads = 3;
  auto half = Loader::create(engines).value();
  EXPECT_TRUE(half->stats().autotune);
  EXPECT_EQ(half->stats().io_engines_made, 3u);
  for (uint64_t e = 0; e < 200 && half->stats().autotune_changes < 3; ++e) {
    epoch_ids(*fixed, e);
    epoch_ids(*half, e);
    EXPECT_EQ(fixed->stats().io_engines, 3u);
    EXPECT_EQ(fixed->stats().prefetch, "depth:4");
    EXPECT_EQ(fixed->stats().threads, 4u);
    EXPECT_EQ(half->stats().io_engines, 3u);
    EXPECT_EQ(half->stats().threads, 3u);
  }
  EXPECT_EQ(fixed->stats().autotune_changes, 0u);
  EXPECT_GE(half->stats().autotune_changes, 3u);
}

}  // namespace
}  // namespace dlfeed
