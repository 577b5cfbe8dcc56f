// SPDX-License-Identifier: Apache-2.0
// raw_read (the device-limit measurement behind `dlfeed calibrate` and
// bench/raw_read): every extent of every sample is read from the right file
// and offset, in the order given, with both readers; bounds stop at a sample
// boundary; short files fail naming the file and offset; evict_pages drops
// the page cache (checked with mincore through resident_bytes).

#include "dev/raw_read.h"

#include <filesystem>
#include <map>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "dlfeed/format/format.h"
#include "dlfeed/io/io_backend.h"
#include "dlfeed/order/order.h"
#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed {
namespace {

#define EXPECT_CONTAINS(text, part)                          \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "'" << std::string(text) << "' does not contain '" << (part) << "'"

/// A generated dataset and its index.
struct Dataset {
  std::string dir;
  SampleIndex index;
};

Dataset make(FileFormat format, bool dlio, uint64_t files, uint64_t per_file, Shape shape) {
  Dataset d;
  d.dir = testing::scratch_dir();
  gen::DatasetSpec spec = testing::dataset_spec(d.dir, format, files, per_file, shape, DType::u8(), 42);
  spec.dlio_layout = dlio;
  auto written = testing::write_generated(spec);
  EXPECT_TRUE(written.ok()) << written.status();
  auto index = open_dataset({dlio ? d.dir + "/train" : d.dir}, {});
  EXPECT_TRUE(index.ok()) << index.status();
  d.index = std::move(*index);
  return d;
}

std::vector<RawReader> readers() {
  std::vector<RawReader> r = {RawReader::kPread};
  if (io_uring_available().ok()) r.push_back(RawReader::kIoUring);
  return r;
}

/// Reads with on_extent checking each extent against the file's bytes.
RawReadResult read_checked(const Dataset& d, std::span<const uint64_t> ids, RawReadOptions o,
                           std::vector<std::pair<uint64_t, size_t>>* seen) {
  std::map<std::string, std::string> content;
  for (const std::string& f : d.index.files) content[f] = testing::read_all(f);
  o.on_extent = [&](uint64_t id, size_t k, std::span<const std::byte> bytes) {
    const SampleRef r = d.index.ref(id);
    ASSERT_LT(k, r.extents.size());
    const Extent& e = r.extents[k];
    ASSERT_EQ(bytes.size(), e.length);
    EXPECT_EQ(testing::to_string(bytes), content[d.index.files[r.file]].substr(e.offset, e.length))
        << "sample " << id << " extent " << k;
    seen->emplace_back(id, k);
  };
  auto r = raw_read(d.index, ids, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : RawReadResult{};
}

TEST(RawRead, ReadsEveryExtentOfEverySampleInOrder) {
  for (const bool dlio : {false, true}) {
    // DLIO's NPZ keeps samples on the last axis: a sample's 12 strided bytes
    // are read as one 56-byte span (spans of neighbours overlap). The flat
    // HDF5 file has one contiguous 64-byte extent per sample.
    const Dataset d = dlio ? make(FileFormat::kNpz, true, 3, 5, {3, 4}) : make(FileFormat::kHdf5, false, 4, 6, {8, 8});
    OrderSpec spec;
    spec.strategy = "global_shuffle";
    spec.seed = 9;
    const std::vector<uint64_t> ids = rank_order(FileLayout::of(d.index), spec).value();
    uint64_t want_bytes = 0, want_extents = 0;
    for (uint64_t id : ids) {
      want_bytes += d.index.ref(id).read_bytes();
      want_extents += d.index.ref(id).extents.size();
    }
    ASSERT_EQ(want_extents, ids.size());
    ASSERT_EQ(want_bytes, dlio ? 15u * 56 : 24u * 64);
    for (RawReader reader : readers()) {
      SCOPED_TRACE(absl::StrCat(raw_reader_name(reader), dlio ? " npz/dlio" : " hdf5"));
      RawReadOptions o;
      o.reader = reader;
      o.queue_depth = 4;
      std::vector<std::pair<uint64_t, size_t>> seen;
      const RawReadResult r = read_checked(d, ids, o, &seen);
      EXPECT_EQ(r.samples, ids.size());
      EXPECT_EQ(r.requests, want_extents);
      EXPECT_EQ(r.bytes, want_bytes);
      EXPECT_FALSE(r.truncated);
      EXPECT_GT(r.seconds, 0);
      ASSERT_EQ(seen.size(), want_extents);
      if (reader == RawReader::kPread) {
        // One at a time: exactly the order of ids, extents in order.
        size_t i = 0;
        for (uint64_t id : ids) {
          for (size_t k = 0; k < d.index.ref(id).extents.size(); ++k, ++i) {
            EXPECT_EQ(seen[i], std::make_pair(id, k));
          }
        }
      } else {
        std::set<std::pair<uint64_t, size_t>> unique(seen.begin(), seen.end());
        EXPECT_EQ(unique.size(), want_extents);  // each extent once, in any completion order
      }
    }
  }
}

TEST(RawRead, MaxBytesStopsAtASampleBoundaryAfterThePrefix) {
  const Dataset d = make(FileFormat::kHdf5, false, 2, 10, {10, 10});  // 100-byte samples
  std::vector<uint64_t> ids(20);
  std::iota(ids.rbegin(), ids.rend(), 0);  // 19, 18, ..., 0
  for (RawReader reader : readers()) {
    SCOPED_TRACE(raw_reader_name(reader));
    RawReadOptions o;
    o.reader = reader;
    o.queue_depth = 3;
    o.max_bytes = 450;  // the 5th sample crosses it: 5 samples read
    std::vector<std::pair<uint64_t, size_t>> seen;
    const RawReadResult r = read_checked(d, ids, o, &seen);
    EXPECT_EQ(r.samples, 5u);
    EXPECT_EQ(r.bytes, 500u);
    EXPECT_TRUE(r.truncated);
    std::set<uint64_t> got;
    for (auto& [id, k] : seen) got.insert(id);
    EXPECT_EQ(got, (std::set<uint64_t>{19, 18, 17, 16, 15}));  // the prefix of the order
  }
}

TEST(RawRead, ShortFileFailsNamingTheFileAndOffset) {
  const Dataset d = make(FileFormat::kHdf5, false, 2, 4, {16, 16});
  const std::string victim = d.index.files[1];
  const uint64_t keep = d.index.ref(5).extents[0].offset + 10;  // sample 5 is cut short
  std::filesystem::resize_file(victim, keep);
  std::vector<uint64_t> ids(8);
  std::iota(ids.begin(), ids.end(), 0);
  for (RawReader reader : readers()) {
    SCOPED_TRACE(raw_reader_name(reader));
    RawReadOptions o;
    o.reader = reader;
    auto r = raw_read(d.index, ids, o);
    ASSERT_FALSE(r.ok());
    EXPECT_CONTAINS(r.status().message(), victim);
    EXPECT_CONTAINS(r.status().message(), "offset");
  }
  auto r = raw_read(d.index, std::vector<uint64_t>{99}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.status().message(), "99");
}

TEST(Evict, DropsTheFilesPagesFromThePageCache) {
  const std::string dir = testing::scratch_dir();
  const std::string path = dir + "/pages.bin";
  testing::write_all(path, std::string(1 << 20, 'x'));
  ASSERT_TRUE(evict_pages(path).ok());  // writes back, then drops
  (void)testing::read_all(path);        // and reads it in again
  auto warm = resident_bytes(path);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_GT(*warm, 0u) << "reading a file must leave pages in the cache";
  ASSERT_TRUE(evict_pages(std::vector<std::string>{path}).ok());
  auto cold = resident_bytes(path);
  ASSERT_TRUE(cold.ok()) << cold.status();
  if (*cold == *warm) GTEST_SKIP() << "this file system ignores POSIX_FADV_DONTNEED (tmpfs?)";
  EXPECT_EQ(*cold, 0u);

  const std::string missing = dir + "/missing.bin";
  absl::Status st = evict_pages(missing);
  ASSERT_FALSE(st.ok());
  EXPECT_CONTAINS(st.message(), missing);
  EXPECT_FALSE(resident_bytes(missing).ok());
  testing::write_all(dir + "/empty.bin", "");
  EXPECT_EQ(resident_bytes(dir + "/empty.bin").value(), 0u);
}

}  // namespace
}  // namespace dlfeed
