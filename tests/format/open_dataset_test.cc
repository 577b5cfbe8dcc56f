// SPDX-License-Identifier: Apache-2.0
// open_dataset over folders of many files: the files are indexed by several
// threads at once and appended in path order, so the index must equal the
// one each file gives alone, in order; and an error must name the first bad
// file in path order, whichever thread met it first.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dev/generate.h"
#include "dlfeed/format/format.h"
#include "test_util.h"

namespace dlfeed {
namespace {
namespace fs = std::filesystem;

constexpr uint64_t kSeed = 7;
const DType kI16{DType::Kind::kInt, 2, false};

struct Written {
  std::vector<std::string> files;      // sorted, as the folder listing gives them
  std::vector<uint64_t> first_global;  // global id of each file's first sample
  std::vector<uint64_t> samples;       // samples in each file
};

std::string extension(FileFormat f) {
  switch (f) {
    case FileFormat::kNpy: return "npy";
    case FileFormat::kNpz: return "npz";
    case FileFormat::kHdf5: return "h5";
    case FileFormat::kTfRecord: return "tfrecord";
    default: return "bin";
  }
}

// `n` files of 1 to 5 samples each (so file boundaries differ from file to
// file) of shape (3, 2) int16, written by dlfeed's own writers; TFRecord
// files get a .idx sidecar when `sidecars`.
Written write_files(const std::string& dir, FileFormat format, size_t n, bool sidecars = false) {
  Written w;
  uint64_t g = 0;
  for (size_t i = 0; i < n; ++i) {
    gen::FileSpec spec;
    spec.path = absl::StrFormat("%s/f_%05d.%s", dir, i, extension(format));
    spec.sample_shape = {3, 2};
    spec.dtype = kI16;
    spec.num_samples = 1 + (i * 7) % 5;
    spec.first_global_id = g;
    spec.seed = kSeed;
    absl::Status st;
    switch (format) {
      case FileFormat::kNpy: st = gen::write_npy_file(spec); break;
      case FileFormat::kNpz: st = gen::write_npz_file(spec); break;
      case FileFormat::kHdf5: st = gen::write_hdf5_file(spec); break;
      case FileFormat::kTfRecord:
        if (sidecars) spec.index_path = spec.path + ".idx";
        st = gen::write_tfrecord_file(spec);
        break;
      default: break;
    }
    EXPECT_TRUE(st.ok()) << st;
    w.files.push_back(spec.path);
    w.first_global.push_back(g);
    w.samples.push_back(spec.num_samples);
    g += spec.num_samples;
  }
  return w;
}

FormatOptions options_for(FileFormat format) {
  FormatOptions o;
  o.format = format;
  o.axis = SampleAxis::kFirst;
  if (format == FileFormat::kHdf5) o.name = "x";  // the writer's data set ("y" holds labels)
  return o;
}

// The folder's index equals each file's own index, appended in path order:
// files, file_begin, every sample's extents, shape and dtype, and the bytes
// read_sample gives (which must be what the writer wrote).
void expect_same_as_one_by_one(const SampleIndex& all, const Written& w, const FormatOptions& o) {
  ASSERT_EQ(all.files, w.files);
  ASSERT_EQ(all.file_begin.size(), w.files.size() + 1);
  uint64_t id = 0;
  std::vector<std::byte> raw, scratch;
  for (size_t f = 0; f < w.files.size(); ++f) {
    SCOPED_TRACE(w.files[f]);
    absl::StatusOr<SampleIndex> one = open_file(w.files[f], o);
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_EQ(one->size(), w.samples[f]);
    ASSERT_EQ(all.file_begin[f], id);
    for (uint64_t k = 0; k < one->size(); ++k, ++id) {
      const SampleRef got = all.ref(id);
      const SampleRef want = one->ref(k);
      EXPECT_EQ(got.file, f);
      EXPECT_EQ(got.item, want.item);
      EXPECT_EQ(std::vector<Extent>(got.extents.begin(), got.extents.end()),
                std::vector<Extent>(want.extents.begin(), want.extents.end()))
          << "sample " << id;
      EXPECT_EQ(got.shape, want.shape) << "sample " << id;
      EXPECT_EQ(got.dtype, want.dtype) << "sample " << id;
      absl::StatusOr<std::string> bytes = testing::read_bytes(all, id);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      EXPECT_EQ(*bytes, testing::expected_sample(kSeed, w.first_global[f] + k, kI16, {3, 2})) << "sample " << id;
    }
  }
  EXPECT_EQ(all.file_begin.back(), id);
  EXPECT_EQ(all.size(), id);
}

class OpenDatasetTest : public ::testing::TestWithParam<FileFormat> {};

TEST_P(OpenDatasetTest, ManyFilesIndexAsEachFileAlone) {
  const FileFormat format = GetParam();
  const std::string dir = testing::scratch_dir();
  const Written w = write_files(dir, format, 200, /*sidecars=*/true);
  const FormatOptions o = options_for(format);
  absl::StatusOr<SampleIndex> all = open_dataset({dir}, o);
  ASSERT_TRUE(all.ok()) << all.status();
  expect_same_as_one_by_one(*all, w, o);
  // With the format found by extension too (the .idx sidecars are not data).
  FormatOptions by_ext = o;
  by_ext.format = FileFormat::kAuto;
  absl::StatusOr<SampleIndex> again = open_dataset({dir}, by_ext);
  ASSERT_TRUE(again.ok()) << again.status();
  expect_same_as_one_by_one(*again, w, o);
}

// The 57th of 200 files is damaged, and so is a later one: the error is the
// 57th's, word for word what opening that file alone says, every time.
TEST_P(OpenDatasetTest, FirstBadFileInPathOrderIsReported) {
  const FileFormat format = GetParam();
  const std::string dir = testing::scratch_dir();
  const Written w = write_files(dir, format, 200);
  const FormatOptions o = options_for(format);
  for (size_t bad : {size_t{56}, size_t{180}}) {
    // A file of the right name holding no valid header.
    testing::write_all(w.files[bad], std::string("not a data file, ") + std::string(60, 'x'));
  }
  absl::StatusOr<SampleIndex> alone = open_file(w.files[56], o);
  ASSERT_FALSE(alone.ok());
  ASSERT_NE(alone.status().message().find(w.files[56]), absl::string_view::npos) << alone.status();
  for (int run = 0; run < 5; ++run) {
    absl::StatusOr<SampleIndex> all = open_dataset({dir}, o);
    ASSERT_FALSE(all.ok());
    EXPECT_EQ(all.status(), alone.status());
  }
  // The same file, given as a list of paths instead of a folder.
  absl::StatusOr<SampleIndex> listed = open_dataset(w.files, o);
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.status(), alone.status());
}

INSTANTIATE_TEST_SUITE_P(Formats, OpenDatasetTest,
                         ::testing::Values(FileFormat::kNpy, FileFormat::kNpz, FileFormat::kHdf5,
                                           FileFormat::kTfRecord),
                         [](const ::testing::TestParamInfo<FileFormat>& p) { return format_name(p.param); });

// More files than are held ahead of the one appended next, so results wrap
// round the window; and a missing file far from the start.
TEST(OpenDatasetWindow, MoreFilesThanTheWindow) {
  const std::string dir = testing::scratch_dir();
  const Written w = write_files(dir, FileFormat::kNpy, 2600);
  const FormatOptions o = options_for(FileFormat::kNpy);
  absl::StatusOr<SampleIndex> all = open_dataset({dir}, o);
  ASSERT_TRUE(all.ok()) << all.status();
  expect_same_as_one_by_one(*all, w, o);

  std::vector<std::string> paths = w.files;
  paths[2345] = dir + "/missing.npy";
  paths[2500] = dir + "/also_missing.npy";
  absl::StatusOr<SampleIndex> missing = open_dataset(paths, o);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_NE(missing.status().message().find(dir + "/missing.npy"), absl::string_view::npos) << missing.status();
}

// One file and two files take the serial path and the few-threads path.
TEST(OpenDatasetWindow, FewFiles) {
  const std::string dir = testing::scratch_dir();
  const Written w = write_files(dir, FileFormat::kTfRecord, 9);
  const FormatOptions o = options_for(FileFormat::kTfRecord);
  for (size_t n : {size_t{1}, size_t{2}, size_t{9}}) {
    Written part{{w.files.begin(), w.files.begin() + n},
                 {w.first_global.begin(), w.first_global.begin() + n},
                 {w.samples.begin(), w.samples.begin() + n}};
    absl::StatusOr<SampleIndex> all = open_dataset(part.files, o);
    ASSERT_TRUE(all.ok()) << all.status();
    expect_same_as_one_by_one(*all, part, o);
  }
}

// Scanned TFRecord files write their .idx sidecars from the opening threads;
// a second open reads them and gives the same index.
TEST(OpenDatasetWindow, TfRecordSidecarsWrittenWhileOpening) {
  const std::string dir = testing::scratch_dir();
  const Written w = write_files(dir, FileFormat::kTfRecord, 200);
  FormatOptions o = options_for(FileFormat::kTfRecord);
  o.write_index_files = true;
  absl::StatusOr<SampleIndex> scanned = open_dataset({dir}, o);
  ASSERT_TRUE(scanned.ok()) << scanned.status();
  for (const std::string& f : w.files) EXPECT_TRUE(fs::exists(f + ".idx")) << f;
  o.write_index_files = false;
  expect_same_as_one_by_one(*scanned, w, o);
  absl::StatusOr<SampleIndex> from_sidecars = open_dataset({dir}, o);
  ASSERT_TRUE(from_sidecars.ok()) << from_sidecars.status();
  expect_same_as_one_by_one(*from_sidecars, w, o);
}

}  // namespace
}  // namespace dlfeed
