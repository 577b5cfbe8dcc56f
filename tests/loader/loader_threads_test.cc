// Each loader has its own threads: a second loader made while a first is
// mid-epoch gets the threads it asked for (oneTBB's worker pool is one per
// process, sized by the first arena unless the loaders grow it), and holding
// a dataset in memory spreads its copies without changing a byte.
#include <set>

#include "dlfeed/loader.h"
#include "format/test_util.h"
#include "gen/generate.h"
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
  o.resident = "off";
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
  // first loader (1 worker on a 2-core machine) it was at most 2.
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
    o.resident = "on";
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

}  // namespace
}  // namespace dlfeed
