// SPDX-License-Identifier: Apache-2.0
// One sample per file (SampleAxis::kNone) and fields from file-name patterns
// (FormatOptions::file_pattern): issue 26.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "dlfeed/format/format.h"
#include "test_util.h"

namespace dlfeed {
namespace {
namespace fs = std::filesystem;
using testing::read_bytes;
using testing::scratch_dir;

// Every sample of `idx` read along axis 0, concatenated: the whole array.
std::string rows_of(const SampleIndex& idx) {
  std::string all;
  for (uint64_t k = 0; k < idx.size(); ++k) all += *read_bytes(idx, k);
  return all;
}

TEST(AxisNone, DeepCamFileIsOneSampleOfTheWholeDataset) {
  const std::string dir = scratch_dir();
  const std::string path = dir + "/data-2106-01-01-00-1.h5";
  ASSERT_TRUE(gen::write_deepcam_file(path, 5, 7, 3, 1, 0, nullptr).ok());
  FormatOptions o;
  o.name = "climate/data";
  auto rows = open_dataset({path}, o);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), 5u);
  EXPECT_EQ(samples_per_file_str(*rows), "5 samples per file along axis 0");
  o.axis = SampleAxis::kNone;
  auto whole = open_dataset({path}, o);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->size(), 1u);
  EXPECT_EQ(samples_per_file_str(*whole), "1 sample per file (axis none)");
  const SampleRef r = whole->ref(0);
  EXPECT_EQ(r.shape, (Shape{5, 7, 3}));
  EXPECT_EQ(r.extents.size(), 1u);  // contiguous: one extent, read straight into the batch
  EXPECT_TRUE(whole->sources[0]->is_identity(r));
  EXPECT_EQ(*read_bytes(*whole, 0), rows_of(*rows));
  EXPECT_TRUE(absl::StrContains(whole->sources[0]->describe(), "axis none"));
}

TEST(AxisNone, ChunkedDeflatedDatasetIsAssembledRowByRow) {
  const std::string dir = scratch_dir();
  gen::FileSpec spec;
  spec.path = dir + "/c.h5";
  spec.sample_shape = {3, 4};
  spec.dtype = DType::f32();
  spec.num_samples = 5;
  spec.chunk_samples = 2;
  spec.compression = gen::Compression::kDeflate;
  spec.hdf5_shuffle = true;
  spec.data_names = {"records"};
  ASSERT_TRUE(gen::write_hdf5_file(spec).ok());
  FormatOptions o;
  auto rows = open_dataset({spec.path}, o);
  ASSERT_TRUE(rows.ok()) << rows.status();
  o.axis = SampleAxis::kNone;
  auto whole = open_dataset({spec.path}, o);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->size(), 1u);
  EXPECT_EQ(whole->ref(0).shape, (Shape{5, 3, 4}));
  EXPECT_EQ(*read_bytes(*whole, 0), rows_of(*rows));
  // Each chunk (two rows each) is read once, not once per row.
  std::vector<std::pair<uint64_t, uint64_t>> chunks;
  for (uint64_t k = 0; k < rows->size(); ++k) {
    for (const Extent& e : rows->ref(k).extents) chunks.push_back({e.offset, e.length});
  }
  std::sort(chunks.begin(), chunks.end());
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  uint64_t once = 0;
  for (const auto& c : chunks) once += c.second;
  EXPECT_EQ(chunks.size(), 3u);
  EXPECT_EQ(whole->ref(0).read_bytes(), once);
}

TEST(AxisNone, TheIndexCacheKeepsWholeSources) {
  const std::string dir = scratch_dir();
  fs::create_directories(dir + "/d");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(gen::write_deepcam_file(absl::StrCat(dir, "/d/data-", i, ".h5"), 4, 6, 2, 1, i, nullptr).ok());
  }
  FormatOptions o;
  o.name = "climate/data";
  o.axis = SampleAxis::kNone;
  o.index_cache = dir + "/cache";
  auto first = open_dataset({dir + "/d"}, o);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(fs::exists(o.index_cache));
  auto again = open_dataset({dir + "/d"}, o);  // from the cache
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->size(), 3u);
  for (uint64_t k = 0; k < 3; ++k) EXPECT_EQ(*read_bytes(*again, k), *read_bytes(*first, k));
  EXPECT_EQ(again->sources[0]->cache_tag(), "whole+hdf5:contiguous");
}

TEST(AxisNone, NpyArrayOfAnyRankIsOneSample) {
  const std::string dir = scratch_dir();
  gen::FileSpec spec;
  spec.path = dir + "/x.npy";
  spec.sample_shape = {2, 3};
  spec.dtype = DType::f32();
  spec.num_samples = 4;
  ASSERT_TRUE(gen::write_npy_file(spec).ok());
  FormatOptions o;
  o.axis = SampleAxis::kNone;
  auto whole = open_dataset({spec.path}, o);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->size(), 1u);
  EXPECT_EQ(whole->ref(0).shape, (Shape{4, 2, 3}));
  o.axis = SampleAxis::kFirst;
  EXPECT_EQ(*read_bytes(*whole, 0), rows_of(*open_dataset({spec.path}, o)));
}

TEST(AxisNone, NamesParse) {
  EXPECT_EQ(*parse_axis("none"), SampleAxis::kNone);
  EXPECT_EQ(axis_name(SampleAxis::kNone), "none");
  auto bad = parse_axis("sideways");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "none")) << bad.status();
}

TEST(FilePattern, StemIsWhatTheStarMatched) {
  EXPECT_EQ(pattern_stem("/a/univ_7_data.npy", "*_data.npy"), "univ_7");
  EXPECT_EQ(pattern_stem("/a/data-2106-01-01-00-1.npy", "data-*.npy"), "2106-01-01-00-1");
  EXPECT_EQ(pattern_stem("/a/univ_7_label.npy", "*_data.npy"), std::nullopt);
  EXPECT_EQ(pattern_stem("/a/_data.npy", "*_data.npy"), "");
}

TEST(FilePattern, FilesOrderByWhatTheStarMatchedAndPairAcrossPatterns) {
  const std::string dir = scratch_dir();
  // By path, a1_data < a_data but a.npy-like suffixes reorder: the stems keep both fields in step.
  for (const char* stem : {"a", "a1", "b"}) {
    for (const char* kind : {"_data.npy", ".lbl.npy"}) {
      gen::FileSpec spec;
      spec.path = absl::StrCat(dir, "/", stem, kind);
      spec.sample_shape = {2};
      spec.num_samples = 1;
      ASSERT_TRUE(gen::write_npy_file(spec).ok());
    }
  }
  FormatOptions o;
  o.axis = SampleAxis::kNone;
  o.file_pattern = "*_data.npy";
  auto x = open_dataset({dir}, o);
  o.file_pattern = "*.lbl.npy";
  auto y = open_dataset({dir}, o);
  ASSERT_TRUE(x.ok() && y.ok()) << x.status() << y.status();
  ASSERT_EQ(x->num_files(), 3u);
  ASSERT_EQ(y->num_files(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(pattern_stem(x->files[i], "*_data.npy"), pattern_stem(y->files[i], "*.lbl.npy")) << i;
  }
}

TEST(FilePattern, NoMatchListsTheFilesThere) {
  const std::string dir = scratch_dir();
  gen::FileSpec spec;
  spec.path = dir + "/u_data.npy";
  spec.sample_shape = {2};
  ASSERT_TRUE(gen::write_npy_file(spec).ok());
  FormatOptions o;
  o.file_pattern = "*_label.npy";
  auto r = open_dataset({dir}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "u_data.npy")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "*_label.npy")) << r.status();
  o.file_pattern = "*_*.npy";  // two stars: nothing to pair by
  EXPECT_TRUE(absl::IsInvalidArgument(open_dataset({dir}, o).status()));
}

}  // namespace
}  // namespace dlfeed
