// SPDX-License-Identifier: Apache-2.0
// HDF5 reader and writer: every layout the reader resolves to extents, the
// library-read fallback, every dtype, DLIO names, and bad input.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "dlfeed/format/format.h"

namespace dlfeed::gen::internal {
// The fixture writer in tests/format/hdf5_fixture.cc: one dataset with exactly the
// storage `options` asks for (see there).
absl::Status write_hdf5_custom(const std::string& path, const std::string& name, DType dtype,
                               const std::vector<uint64_t>& dims, std::span<const std::byte> data,
                               const std::string& options);
}  // namespace dlfeed::gen::internal

namespace dlfeed {
namespace {
namespace fs = std::filesystem;
using gen::internal::write_hdf5_custom;

std::string tmp_path(const std::string& name) {
  fs::path dir = fs::path(DLFEED_TEST_TMPDIR) / "hdf5";
  fs::create_directories(dir);
  return (dir / name).string();
}

std::vector<std::byte> expected_sample(uint64_t seed, uint64_t gid, DType dtype, uint64_t nbytes) {
  std::vector<std::byte> out(nbytes);
  gen::fill_sample(seed, gid, dtype, out);
  return out;
}

std::vector<std::byte> pattern(uint64_t n) {
  std::vector<std::byte> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 7 + 3) % 251);
  return v;
}

std::vector<std::byte> bytes_of(const DecodedSample& s) { return {s.bytes.begin(), s.bytes.end()}; }

gen::FileSpec spec_for(const std::string& path, DType dtype, uint64_t n = 10) {
  gen::FileSpec s;
  s.path = path;
  s.sample_shape = {4, 5};
  s.dtype = dtype;
  s.num_samples = n;
  s.first_global_id = 100;
  s.seed = 7;
  s.data_names = {"records"};
  s.label_name = "labels";
  return s;
}

// Every sample of `index` decodes to fill_sample of its global id.
void expect_generated(const SampleIndex& index, const gen::FileSpec& spec) {
  ASSERT_EQ(index.size(), spec.num_samples);
  ASSERT_EQ(index.file_begin, (std::vector<uint64_t>{0, spec.num_samples}));
  std::vector<std::byte> raw, scratch;
  for (uint64_t k = 0; k < index.size(); ++k) {
    const SampleRef ref = index.ref(k);
    EXPECT_EQ(ref.item, k);
    EXPECT_EQ(ref.shape, spec.sample_shape);
    EXPECT_EQ(ref.dtype, spec.dtype);
    auto s = read_sample(index, k, raw, scratch);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->shape, spec.sample_shape);
    EXPECT_EQ(s->dtype, spec.dtype);
    EXPECT_EQ(bytes_of(*s), expected_sample(spec.seed, spec.first_global_id + k, spec.dtype, ref.nbytes()))
        << "sample " << k;
  }
}

// Sample k of a dataset of shape dims holding `data`, as C-order bytes.
std::vector<std::byte> row(const std::vector<std::byte>& data, const std::vector<uint64_t>& dims, DType dtype,
                           uint64_t k) {
  uint64_t row_bytes = dtype.size;
  for (size_t d = 1; d < dims.size(); ++d) row_bytes *= dims[d];
  return {data.begin() + k * row_bytes, data.begin() + (k + 1) * row_bytes};
}

void expect_rows(const SampleIndex& index, const std::vector<std::byte>& data, const std::vector<uint64_t>& dims,
                 DType dtype) {
  ASSERT_EQ(index.size(), dims[0]);
  std::vector<std::byte> raw, scratch;
  for (uint64_t k = 0; k < dims[0]; ++k) {
    auto s = read_sample(index, k, raw, scratch);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(bytes_of(*s), row(data, dims, dtype, k)) << "sample " << k;
  }
}

// ---------------------------------------------------------------------------
// Files written by write_hdf5_file.

TEST(Hdf5, ContiguousIsOneExtentAndZeroCopy) {
  auto spec = spec_for(tmp_path("contiguous.h5"), DType::f32());
  ASSERT_TRUE(gen::write_hdf5_file(spec).ok());
  auto index = open_hdf5(spec.path, {});
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->sources.size(), 1u);
  EXPECT_EQ(index->files, std::vector<std::string>{spec.path});
  EXPECT_EQ(index->sources[0]->layout(), "hdf5:contiguous");
  EXPECT_FALSE(index->sources[0]->reads_through_library());
  EXPECT_TRUE(absl::StrContains(index->sources[0]->describe(), "records")) << index->sources[0]->describe();
  EXPECT_TRUE(absl::StrContains(index->sources[0]->describe(), "(10, 4, 5)")) << index->sources[0]->describe();
  const uint64_t off0 = index->ref(0).extents[0].offset;
  for (uint64_t k = 0; k < index->size(); ++k) {
    ASSERT_EQ(index->ref(k).extents.size(), 1u);
    EXPECT_EQ(index->ref(k).extents[0], (Extent{off0 + k * 80, 80}));
  }
  expect_generated(*index, spec);
  std::vector<std::byte> raw, scratch;
  auto s = read_sample(*index, 3, raw, scratch);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->bytes.data(), raw.data());  // a view of the read bytes
}

TEST(Hdf5, ChunkedWholeSamplesAreZeroCopySlices) {
  auto spec = spec_for(tmp_path("chunked.h5"), DType::f32());
  spec.chunk_samples = 3;
  ASSERT_TRUE(gen::write_hdf5_file(spec).ok());
  auto index = open_hdf5(spec.path, {});
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->sources[0]->layout(), "hdf5:chunked");
  EXPECT_TRUE(absl::StrContains(index->sources[0]->describe(), "chunks (3, 4, 5)")) << index->sources[0]->describe();
  for (uint64_t id = 0; id < index->size(); ++id) {
    const SampleRef r = index->ref(id);
    ASSERT_EQ(r.extents.size(), 1u);
    EXPECT_EQ(r.extents[0].length, 80u);  // only the sample's rows of its chunk
  }
  expect_generated(*index, spec);
  std::vector<std::byte> raw, scratch;
  auto s = read_sample(*index, 4, raw, scratch);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->bytes.data(), raw.data());
}

TEST(Hdf5, Deflate) {
  auto spec = spec_for(tmp_path("deflate.h5"), DType::f32());
  spec.chunk_samples = 3;
  spec.compression = gen::Compression::kDeflate;
  ASSERT_TRUE(gen::write_hdf5_file(spec).ok());
  auto index = open_hdf5(spec.path, {});
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->sources[0]->layout(), "hdf5:chunked+deflate");
  // Samples of one chunk read the same compressed chunk.
  EXPECT_EQ(index->ref(0).extents, index->ref(2).extents);
  EXPECT_NE(index->ref(0).extents, index->ref(3).extents);
  expect_generated(*index, spec);
}

TEST(Hdf5, ShuffleDeflate) {
  auto spec = spec_for(tmp_path("shuffle_deflate.h5"), DType{DType::Kind::kInt, 8, false});
  spec.chunk_samples = 4;
  spec.compression = gen::Compression::kDeflate;
  spec.hdf5_shuffle = true;
  spec.level = 9;
  ASSERT_TRUE(gen::write_hdf5_file(spec).ok());
  auto index = open_hdf5(spec.path, {});
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->sources[0]->layout(), "hdf5:chunked+shuffle+deflate");
  expect_generated(*index, spec);
}

TEST(Hdf5, AChunkStoredLargerThanAChunkIsAnErrorNotAnOverrun) {
  // Found by fuzz_hdf5: a shuffle+deflate chunk whose deflate was skipped
  // (filter mask bit 1, as HDF5 stores chunks deflate does not shrink) and
  // whose stored size exceeds a chunk was unshuffled into a one-chunk buffer.
  // Written here with H5Dwrite_chunk: 6-byte chunks of 2-byte elements, the
  // first stored as 6 + 100 shuffled bytes.
  const std::string path = tmp_path("oversized_chunk.h5");
  const std::vector<std::byte> data = pattern(4 * 6);
  {
    hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[2] = {4, 3}, chunk[2] = {1, 3};
    hid_t space = H5Screate_simple(2, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, 4);
    hid_t d = H5Dcreate2(f, "records", H5T_STD_U16LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(H5Dwrite(d, H5T_STD_U16LE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), 0);
    std::vector<std::byte> big(6 + 100, std::byte{0x11});
    const hsize_t origin[2] = {0, 0};
    ASSERT_GE(H5Dwrite_chunk(d, H5P_DEFAULT, /*filter mask: deflate skipped*/ 2u, origin, big.size(), big.data()), 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
  }
  auto index = open_hdf5(path, {});
  ASSERT_TRUE(index.ok()) << index.status();
  std::vector<std::byte> raw, scratch;
  auto bad = read_sample(*index, 0, raw, scratch);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), path + ": at offset ")) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "decoding to 6 bytes, found 106 bytes")) << bad.status();
  for (uint64_t k = 1; k < 4; ++k) {  // the other chunks are intact
    auto s = read_sample(*index, k, raw, scratch);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(bytes_of(*s), row(data, {4, 3}, DType{DType::Kind::kUInt, 2, false}, k));
  }
}

TEST(Hdf5, EveryDtypeInEveryLayout) {
  const std::vector<DType> types = {
      DType::boolean(),
      {DType::Kind::kInt, 1, false},
      {DType::Kind::kUInt, 1, false},
      {DType::Kind::kInt, 2, false},
      {DType::Kind::kInt, 2, true},
      {DType::Kind::kUInt, 2, false},
      {DType::Kind::kInt, 4, false},
      {DType::Kind::kInt, 4, true},
      {DType::Kind::kUInt, 4, true},
      {DType::Kind::kInt, 8, false},
      {DType::Kind::kUInt, 8, true},
      {DType::Kind::kFloat, 2, false},
      {DType::Kind::kFloat, 2, true},
      {DType::Kind::kFloat, 4, false},
      {DType::Kind::kFloat, 4, true},
      {DType::Kind::kFloat, 8, false},
      {DType::Kind::kFloat, 8, true},
  };
  int i = 0;
  for (const DType& t : types) {
    for (int layout = 0; layout < 3; ++layout) {
      SCOPED_TRACE(absl::StrCat(t.str(), " layout ", layout));
      auto spec = spec_for(tmp_path(absl::StrCat("dtype_", i++, ".h5")), t, 7);
      if (layout >= 1) spec.chunk_samples = 2;
      if (layout == 2) {
        spec.compression = gen::Compression::kDeflate;
        spec.hdf5_shuffle = true;
      }
      ASSERT_TRUE(gen::write_hdf5_file(spec).ok());
      auto index = open_hdf5(spec.path, {});
      ASSERT_TRUE(index.ok()) << index.status();
      expect_generated(*index, spec);
    }
  }
}

TEST(Hdf5, DlioNamesAndNameSelection) {
  auto spec = spec_for(tmp_path("dlio.h5"), DType::u8(), 6);
  spec.data_names = {"records_0", "records_1"};
  spec.label_name = "labels";
  spec.zero_labels = true;
  ASSERT_TRUE(gen::write_hdf5_file(spec).ok());
  auto index = open_hdf5(spec.path, {});  // default: records_0
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_TRUE(absl::StrContains(index->sources[0]->describe(), "records_0"));
  expect_generated(*index, spec);

  FormatOptions o;
  o.name = "records_1";
  index = open_hdf5(spec.path, o);
  ASSERT_TRUE(index.ok()) << index.status();
  expect_generated(*index, spec);

  o.name = "/labels";
  index = open_hdf5(spec.path, o);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->size(), 6u);
  std::vector<std::byte> raw, scratch;
  for (uint64_t k = 0; k < 6; ++k) {
    auto s = read_sample(*index, k, raw, scratch);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->dtype, DType::i64());
    EXPECT_TRUE(s->shape.empty());
    int64_t v = -1;
    ASSERT_EQ(s->bytes.size(), 8u);
    std::memcpy(&v, s->bytes.data(), 8);
    EXPECT_EQ(v, 0);
  }
}

TEST(Hdf5, LabelsAreSampleLabel) {
  auto spec = spec_for(tmp_path("labels.h5"), DType::u8(), 12);
  ASSERT_TRUE(gen::write_hdf5_file(spec).ok());
  FormatOptions o;
  o.name = "labels";
  auto index = open_hdf5(spec.path, o);
  ASSERT_TRUE(index.ok()) << index.status();
  std::vector<std::byte> raw, scratch;
  for (uint64_t k = 0; k < 12; ++k) {
    auto s = read_sample(*index, k, raw, scratch);
    ASSERT_TRUE(s.ok());
    int64_t v = -1;
    std::memcpy(&v, s->bytes.data(), 8);
    EXPECT_EQ(v, gen::sample_label(spec.first_global_id + k));
  }
}

// ---------------------------------------------------------------------------
// Datasets written with chosen storage (chunk shapes, masks, fill values).

struct ChunkCase {
  std::string options;
  std::string layout;
};

TEST(Hdf5, ChunksThatDoNotDivideTheSample) {
  const std::vector<uint64_t> dims{10, 5, 7};
  const DType t{DType::Kind::kInt, 2, false};
  const auto data = pattern(10 * 5 * 7 * 2);
  const std::vector<ChunkCase> cases = {
      {"chunk=3x2x4", "hdf5:chunked"},
      {"chunk=3x2x4,earliest", "hdf5:chunked"},
      {"chunk=3x2x4,deflate=6", "hdf5:chunked+deflate"},
      {"chunk=3x2x4,shuffle,deflate=1", "hdf5:chunked+shuffle+deflate"},
      {"chunk=3x2x4,shuffle", "hdf5:chunked+shuffle"},
      {"chunk=1x5x7", "hdf5:chunked"},
      {"chunk=4x5x7,deflate=4,earliest", "hdf5:chunked+deflate"},
      {"chunk=10x1x1", "hdf5:chunked"},
      {"chunk=2x3x3,shuffle,deflate=4,direct", "hdf5:chunked+shuffle+deflate"},
      {"chunk=2x3x3,deflate=4,direct", "hdf5:chunked+deflate"},
      {"chunk=3x2x4,userblock=1024", "hdf5:chunked"},
      {"userblock=512", "hdf5:contiguous"},
      {"chunk=3x2x4,deflate=3,userblock=512", "hdf5:chunked+deflate"},
  };
  int i = 0;
  for (const ChunkCase& c : cases) {
    SCOPED_TRACE(c.options);
    const std::string path = tmp_path(absl::StrCat("chunks_", i++, ".h5"));
    ASSERT_TRUE(write_hdf5_custom(path, "data", t, dims, data, c.options).ok());
    FormatOptions o;
    o.name = "data";
    auto index = open_hdf5(path, o);
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(index->sources[0]->layout(), c.layout);
    EXPECT_EQ(index->ref(0).shape, (Shape{5, 7}));
    expect_rows(*index, data, dims, t);
  }
}

TEST(Hdf5, ChunkExtentsAreTheChunksOfTheRow) {
  const std::vector<uint64_t> dims{10, 5, 7};
  const DType t{DType::Kind::kInt, 2, false};
  const auto data = pattern(10 * 5 * 7 * 2);
  const std::string path = tmp_path("chunk_extents.h5");
  ASSERT_TRUE(write_hdf5_custom(path, "data", t, dims, data, "chunk=3x2x4").ok());
  FormatOptions o;
  o.name = "data";
  auto index = open_hdf5(path, o);
  ASSERT_TRUE(index.ok()) << index.status();
  // 3 x 2 chunks in the sample dims, each contributing its row (2*4 int16).
  for (uint64_t id = 0; id < index->size(); ++id) {
    const SampleRef r = index->ref(id);
    ASSERT_EQ(r.extents.size(), 6u);
    for (const Extent& e : r.extents) EXPECT_EQ(e.length, 16u);
  }
}

TEST(Hdf5, UnwrittenChunksAndRowsAreTheFillValue) {
  const std::vector<uint64_t> dims{10, 5, 7};
  const DType t = DType::u8();
  const auto data = pattern(10 * 5 * 7);
  for (const std::string opts : {"chunk=3x2x4,rows=2:7,fill=7", "chunk=3x2x4,deflate=4,rows=2:7,fill=7",
                                 "chunk=3x5x7,rows=2:7", "rows=0:0", "rows=0:0,fill=9"}) {
    SCOPED_TRACE(opts);
    const std::string path = tmp_path("fill.h5");
    ASSERT_TRUE(write_hdf5_custom(path, "data", t, dims, data, opts).ok());
    FormatOptions o;
    o.name = "data";
    auto index = open_hdf5(path, o);
    ASSERT_TRUE(index.ok()) << index.status();
    const bool written_any = !absl::StrContains(opts, "rows=0:0");
    const std::byte fill = absl::StrContains(opts, "fill=7")   ? std::byte{7}
                           : absl::StrContains(opts, "fill=9") ? std::byte{9}
                                                               : std::byte{0};
    std::vector<std::byte> raw, scratch;
    for (uint64_t k = 0; k < 10; ++k) {
      auto s = read_sample(*index, k, raw, scratch);
      ASSERT_TRUE(s.ok()) << s.status();
      if (written_any && k >= 2 && k < 7) {
        EXPECT_EQ(bytes_of(*s), row(data, dims, t, k)) << k;
      } else {
        EXPECT_EQ(bytes_of(*s), std::vector<std::byte>(35, fill)) << k;
      }
    }
    if (written_any) {
      EXPECT_TRUE(index->ref(9).extents.empty());
    }  // chunk row 3 never written
  }
}

TEST(Hdf5, OneDimensionalDatasetsGiveScalarSamples) {
  const std::vector<uint64_t> dims{9};
  const DType t{DType::Kind::kFloat, 8, true};
  const auto data = pattern(9 * 8);
  for (const std::string opts : {"", "chunk=4", "chunk=4,shuffle,deflate=2"}) {
    SCOPED_TRACE(opts);
    const std::string path = tmp_path("scalar_samples.h5");
    ASSERT_TRUE(write_hdf5_custom(path, "v", t, dims, data, opts).ok());
    FormatOptions o;
    o.name = "v";
    auto index = open_hdf5(path, o);
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_TRUE(index->ref(0).shape.empty());
    EXPECT_EQ(index->ref(0).dtype, t);
    expect_rows(*index, data, dims, t);
  }
}

// ---------------------------------------------------------------------------
// The library-read fallback.

TEST(Hdf5, FallbackReadsThroughTheLibrary) {
  const std::vector<uint64_t> dims{6, 3, 4};
  const DType t = DType::f32();
  const auto data = pattern(6 * 3 * 4 * 4);
  for (const std::string opts : {"chunk=2x3x4,fletcher32", "chunk=2x2x2,shuffle,deflate=4,fletcher32", "compact"}) {
    SCOPED_TRACE(opts);
    const std::string path = tmp_path("fallback.h5");
    ASSERT_TRUE(write_hdf5_custom(path, "data", t, dims, data, opts).ok());
    FormatOptions o;
    o.name = "data";
    auto index = open_hdf5(path, o);
    ASSERT_TRUE(index.ok()) << index.status();
    const SampleSource& src = *index->sources[0];
    EXPECT_EQ(src.layout(), "hdf5:library-read");
    EXPECT_TRUE(src.reads_through_library());
    EXPECT_TRUE(absl::StrContains(src.describe(), absl::StrContains(opts, "compact") ? "compact" : "fletcher32"))
        << src.describe();
    for (uint64_t id = 0; id < index->size(); ++id) EXPECT_TRUE(index->ref(id).extents.empty());
    expect_rows(*index, data, dims, t);

    // Several threads decoding at once.
    std::vector<std::thread> threads;
    std::atomic<int> bad{0};
    for (int th = 0; th < 4; ++th) {
      threads.emplace_back([&, th] {
        std::vector<std::byte> raw, scratch;
        for (int rep = 0; rep < 20; ++rep) {
          const uint64_t k = static_cast<uint64_t>(th + rep) % 6;
          auto s = read_sample(*index, k, raw, scratch);
          if (!s.ok() || bytes_of(*s) != row(data, dims, t, k)) ++bad;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(bad.load(), 0);
  }
}

TEST(Hdf5, ManyChunksReadCorrectlyEitherWay) {
  // Past 2048 chunks, libhdf5 < 1.14 (no H5Dchunk_iter) makes dlfeed read
  // through the library; with 1.14 the chunk table is indexed. Same bytes.
  const std::vector<uint64_t> dims{3000, 2};
  const DType t{DType::Kind::kUInt, 2, false};
  const auto data = pattern(3000 * 2 * 2);
  const std::string path = tmp_path("many_chunks.h5");
  ASSERT_TRUE(write_hdf5_custom(path, "data", t, dims, data, "chunk=1x2").ok());
  FormatOptions o;
  o.name = "data";
  auto index = open_hdf5(path, o);
  ASSERT_TRUE(index.ok()) << index.status();
  const std::string layout = index->sources[0]->layout();
  EXPECT_TRUE(layout == "hdf5:chunked" || layout == "hdf5:library-read") << layout;
  expect_rows(*index, data, dims, t);
}

// ---------------------------------------------------------------------------
// Bad input.

void expect_error(const absl::StatusOr<SampleIndex>& r, const std::string& path,
                  std::initializer_list<const char*> words) {
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  EXPECT_TRUE(absl::StrContains(msg, path)) << msg;
  for (const char* w : words) EXPECT_TRUE(absl::StrContains(msg, w)) << "missing '" << w << "' in: " << msg;
}

TEST(Hdf5, MissingDatasetListsTheDatasets) {
  auto spec = spec_for(tmp_path("missing.h5"), DType::u8(), 3);
  spec.data_names = {"images"};
  ASSERT_TRUE(gen::write_hdf5_file(spec).ok());
  expect_error(open_hdf5(spec.path, {}), spec.path, {"records", "images", "labels"});
  FormatOptions o;
  o.name = "nope";
  expect_error(open_hdf5(spec.path, o), spec.path, {"'nope'", "images", "labels"});
}

TEST(Hdf5, NotHdf5EmptyTruncatedMissing) {
  const std::string text = tmp_path("not_hdf5.h5");
  std::ofstream(text) << "this is not an HDF5 file at all, just text\n";
  expect_error(open_hdf5(text, {}), text, {"HDF5", "74 68 69 73"});

  const std::string empty = tmp_path("empty.h5");
  std::ofstream(empty).close();
  expect_error(open_hdf5(empty, {}), empty, {"empty"});

  auto spec = spec_for(tmp_path("whole.h5"), DType::f32(), 50);
  ASSERT_TRUE(gen::write_hdf5_file(spec).ok());
  for (uint64_t keep : {uint64_t{4}, uint64_t{100}, fs::file_size(spec.path) / 2, fs::file_size(spec.path) - 1}) {
    SCOPED_TRACE(keep);
    const std::string cut = tmp_path("truncated.h5");
    fs::copy_file(spec.path, cut, fs::copy_options::overwrite_existing);
    fs::resize_file(cut, keep);
    auto r = open_hdf5(cut, {});
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(absl::StrContains(r.status().message(), cut)) << r.status();
  }

  const std::string none = tmp_path("does_not_exist.h5");
  expect_error(open_hdf5(none, {}), none, {});
}

TEST(Hdf5, UnsupportedTypesAndShapesAreRefused) {
  const std::string path = tmp_path("strings.h5");
  ASSERT_TRUE(write_hdf5_custom(path, "names", DType::u8(), {4}, {}, "string").ok());
  const auto one = pattern(4);
  ASSERT_TRUE(write_hdf5_custom(path, "scalar", DType::f32(), {}, one, "append,scalar").ok());
  FormatOptions o;
  o.name = "names";
  expect_error(open_hdf5(path, o), path, {"'names'", "string"});
  o.name = "scalar";
  expect_error(open_hdf5(path, o), path, {"'scalar'", "0-dimensional"});
}

TEST(Hdf5, AbsurdShapesAreRefused) {
  // Datasets never written have no storage: huge dims must not turn into a
  // huge index or huge samples.
  const std::string path = tmp_path("absurd.h5");
  ASSERT_TRUE(write_hdf5_custom(path, "wide", DType::f32(), {2, uint64_t{1} << 40}, {}, "rows=0:0").ok());
  ASSERT_TRUE(write_hdf5_custom(path, "long", DType::u8(), {uint64_t{1} << 40}, {}, "append,rows=0:0").ok());
  ASSERT_TRUE(
      write_hdf5_custom(path, "sparse", DType::u8(), {uint64_t{1} << 40, 4}, {}, "append,chunk=1x1,rows=0:0").ok());
  for (const char* name : {"wide", "long", "sparse"}) {
    SCOPED_TRACE(name);
    FormatOptions o;
    o.name = name;
    auto r = open_hdf5(path, o);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(absl::StrContains(r.status().message(), path)) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), name)) << r.status();
  }
}

}  // namespace
}  // namespace dlfeed
