// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/format/npy.h"
#include <filesystem>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "dlfeed/format/format.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace dlfeed {
namespace {

using testing::read_all;
using testing::scratch_dir;
using testing::write_all;

using testing::as_bytes;
using testing::expected_sample;

std::string read_one(const SampleIndex& index, uint64_t id) {
  auto s = testing::read_bytes(index, id);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

TEST(DType, ParsesNumpyDescriptorsAndNames) {
  struct Case {
    const char* text;
    DType::Kind kind;
    int size;
    bool big;
  };
  const Case cases[] = {
      {"|b1", DType::Kind::kBool, 1, false},
      {"<i1", DType::Kind::kInt, 1, false},
      {"<i2", DType::Kind::kInt, 2, false},
      {">i4", DType::Kind::kInt, 4, true},
      {"<i8", DType::Kind::kInt, 8, false},
      {"|u1", DType::Kind::kUInt, 1, false},
      {">u2", DType::Kind::kUInt, 2, true},
      {"<u4", DType::Kind::kUInt, 4, false},
      {"<u8", DType::Kind::kUInt, 8, false},
      {"<f2", DType::Kind::kFloat, 2, false},
      {">f4", DType::Kind::kFloat, 4, true},
      {"<f8", DType::Kind::kFloat, 8, false},
      {"float32", DType::Kind::kFloat, 4, false},
      {"uint16", DType::Kind::kUInt, 2, false},
      {"bool", DType::Kind::kBool, 1, false},
      // numpy's one-letter codes, as np.dtype reads them: 'b' is int8, not bool.
      {"b", DType::Kind::kInt, 1, false},
      {"|b", DType::Kind::kInt, 1, false},
      {"?", DType::Kind::kBool, 1, false},
      {">?", DType::Kind::kBool, 1, false},
      {"B", DType::Kind::kUInt, 1, false},
      {"<h", DType::Kind::kInt, 2, false},
      {">H", DType::Kind::kUInt, 2, true},
      {"<i", DType::Kind::kInt, 4, false},
      {"I", DType::Kind::kUInt, 4, false},
      {"l", DType::Kind::kInt, 8, false},
      {"Q", DType::Kind::kUInt, 8, false},
      {"<e", DType::Kind::kFloat, 2, false},
      {"f", DType::Kind::kFloat, 4, false},
      {">d", DType::Kind::kFloat, 8, true},
  };
  for (const Case& c : cases) {
    auto t = DType::parse(c.text);
    ASSERT_TRUE(t.ok()) << c.text << ": " << t.status();
    EXPECT_EQ(t->kind, c.kind) << c.text;
    EXPECT_EQ(t->size, c.size) << c.text;
    EXPECT_EQ(t->big_endian, c.big) << c.text;
    EXPECT_EQ(DType::parse(t->str()).value(), *t) << c.text;
  }
}

TEST(DType, RefusesObjectStringStructuredAndOddSizes) {
  for (const char* bad :
       {"|O", "<U8", "|S4", "|V16", "<c8", "<f3", "<i3", "", "<", "x4", "<M8", "u", "g", "D", "F", "?1", "e2", "c"}) {
    auto t = DType::parse(bad);
    EXPECT_FALSE(t.ok()) << bad;
  }
  EXPECT_NE(std::string(DType::parse("|O").status().message()).find("object"), std::string::npos);
}

TEST(NpyHeader, RoundTripsThroughMakeAndParse) {
  const std::string h = make_npy_header(DType::parse("<f4").value(), Shape{3, 4, 5}, false);
  EXPECT_EQ(h.size() % 64, 0u);
  auto parsed = parse_npy_header(as_bytes(h), "mem", 0);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->major, 1);
  EXPECT_EQ(parsed->shape, (Shape{3, 4, 5}));
  EXPECT_EQ(parsed->dtype.str(), "<f4");
  EXPECT_FALSE(parsed->fortran_order);
  EXPECT_EQ(parsed->data_offset, h.size());
  auto one = parse_npy_header(as_bytes(make_npy_header(DType::u8(), Shape{7}, true)), "mem", 0);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->shape, (Shape{7}));
  EXPECT_TRUE(one->fortran_order);
}

TEST(NpyHeader, ReadsVersions2And3) {
  for (int major : {2, 3}) {
    std::string dict = "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3), }";
    dict.append(64 - (12 + dict.size() + 1) % 64, ' ');
    dict.push_back('\n');
    std::string h = "\x93NUMPY";
    h.push_back(static_cast<char>(major));
    h.push_back(0);
    const uint32_t len = static_cast<uint32_t>(dict.size());
    h.append(reinterpret_cast<const char*>(&len), 4);
    h += dict;
    auto parsed = parse_npy_header(as_bytes(h), "mem", 0);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->major, major);
    EXPECT_EQ(parsed->data_offset, h.size());
    EXPECT_EQ(parsed->shape, (Shape{2, 3}));
  }
}

TEST(NpyHeader, ErrorsNameTheOffsetAndWhatWasExpected) {
  std::string good = make_npy_header(DType::u8(), Shape{2, 2});
  std::string bad_magic = good;
  bad_magic[1] = 'X';
  auto r = parse_npy_header(as_bytes(bad_magic), "f.npy", 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("f.npy: at offset 0: expected the NPY magic"), std::string::npos)
      << r.status();
  std::string bad_version = good;
  bad_version[6] = 9;
  r = parse_npy_header(as_bytes(bad_version), "f.npy", 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("version"), std::string::npos);
  for (const char* dict :
       {"{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,), }",
        "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
        "{'descr': '<i4', 'fortran_order': Maybe, 'shape': (2,), }", "{'descr': '<i4', 'shape': (2,), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, -1), }",
        // No elements, but strides (empty dimensions as 1) past 63 bits: a fuzz finding.
        "{'descr': '<u2', 'fortran_order': False, 'shape': (0, 1000000, 1000000, 1000000, 1000001), }",
        // (12) is an int to Python, not a shape: numpy refuses it.
        "{'descr': '<i4', 'fortran_order': False, 'shape': (12), }",
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2,"}) {
    std::string h = "\x93NUMPY\x01";
    h.push_back(0);
    std::string d = dict;
    d.push_back('\n');
    h.push_back(static_cast<char>(d.size() & 0xff));
    h.push_back(static_cast<char>(d.size() >> 8));
    h += d;
    auto p = parse_npy_header(as_bytes(h), "f.npy", 100);
    EXPECT_FALSE(p.ok()) << dict;
    EXPECT_NE(std::string(p.status().message()).find("f.npy: at offset 1"), std::string::npos) << p.status();
  }
}

class NpyFiles : public ::testing::TestWithParam<std::tuple<const char*, SampleAxis>> {};

TEST_P(NpyFiles, GeneratedFilesReadBackEverySample) {
  const auto [dtype_text, axis] = GetParam();
  const DType dt = DType::parse(dtype_text).value();
  const std::string dir = scratch_dir();
  gen::FileSpec spec;
  spec.path = dir + "/a.npy";
  spec.sample_shape = {3, 5};
  spec.dtype = dt;
  spec.num_samples = 7;
  spec.first_global_id = 100;
  spec.seed = 9;
  spec.axis = axis;
  ASSERT_TRUE(gen::write_npy_file(spec).ok());
  FormatOptions o;
  o.axis = axis;
  auto index = open_file(spec.path, o);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->size(), 7u);
  EXPECT_EQ(index->file_begin, (std::vector<uint64_t>{0, 7}));
  for (uint64_t k = 0; k < 7; ++k) {
    EXPECT_EQ(index->ref(k).shape, (Shape{3, 5}));
    EXPECT_EQ(index->ref(k).dtype, dt);
    EXPECT_EQ(read_one(*index, k), expected_sample(9, 100 + k, dt, {3, 5})) << "sample " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypesBothAxes, NpyFiles,
                         ::testing::Combine(::testing::Values("|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4",
                                                              "<u8", "<f2", "<f4", "<f8", ">f4", ">i8", ">u2"),
                                            ::testing::Values(SampleAxis::kFirst, SampleAxis::kLast)),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param);
                           for (char& c : name) {
                             if (c == '<')
                               c = 'L';
                             else if (c == '>')
                               c = 'B';
                             else if (c == '|')
                               c = 'N';
                           }
                           return name + (std::get<1>(info.param) == SampleAxis::kLast ? "_last" : "_first");
                         });

TEST(NpyFile, FortranOrderIsGatheredIntoCOrderOnBothAxes) {
  const std::string dir = scratch_dir();
  // A (2, 3, 4) int16 array with value 100*i + 10*j + k, stored column-major.
  std::string data;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) {
        int16_t v = static_cast<int16_t>(100 * i + 10 * j + k);
        data.append(reinterpret_cast<const char*>(&v), 2);
      }
  write_all(dir + "/f.npy", make_npy_header(DType::parse("<i2").value(), Shape{2, 3, 4}, true) + data);
  for (SampleAxis axis : {SampleAxis::kFirst, SampleAxis::kLast}) {
    FormatOptions o;
    o.axis = axis;
    auto index = open_file(dir + "/f.npy", o);
    ASSERT_TRUE(index.ok()) << index.status();
    ASSERT_EQ(index->size(), axis == SampleAxis::kFirst ? 2u : 4u);
    for (uint64_t s = 0; s < index->size(); ++s) {
      std::string want;
      if (axis == SampleAxis::kFirst) {
        for (int j = 0; j < 3; ++j)
          for (int k = 0; k < 4; ++k) {
            int16_t v = static_cast<int16_t>(100 * s + 10 * j + k);
            want.append(reinterpret_cast<const char*>(&v), 2);
          }
      } else {
        for (int i = 0; i < 2; ++i)
          for (int j = 0; j < 3; ++j) {
            int16_t v = static_cast<int16_t>(100 * i + 10 * j + s);
            want.append(reinterpret_cast<const char*>(&v), 2);
          }
      }
      EXPECT_EQ(read_one(*index, s), want) << "sample " << s;
    }
  }
}

TEST(NpyFile, TheDlioPlaceAndNameDefaultToTheLastAxis) {
  const std::string dir = scratch_dir();
  std::filesystem::create_directories(dir + "/train/3");
  gen::FileSpec spec;
  spec.sample_shape = {4, 4};
  spec.num_samples = 5;
  spec.axis = SampleAxis::kLast;
  // Where and as DLIO's generator writes: train/ (or a numbered subfolder), i zero-padded to n's digits,
  // or (its releases before the padding) i without leading zeros.
  for (const std::string name : {"/train/img_03_of_16.npy", "/train/3/img_03_of_16.npy", "/train/img_3_of_16.npy"}) {
    spec.path = dir + name;
    ASSERT_TRUE(gen::write_npy_file(spec).ok());
    auto index = open_file(spec.path, {});
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(index->size(), 5u) << name;
    EXPECT_EQ(index->ref(0).shape, (Shape{4, 4}));
    EXPECT_EQ(index->sources[0]->layout(), "npy");
    EXPECT_NE(index->sources[0]->describe().find("last axis (the DLIO layout"), std::string::npos);
  }
  // The name alone, or a name DLIO would not write, keeps the first axis: 4 samples of (4, 5).
  for (const std::string name : {"/img_03_of_16.npy", "/train/img_03_of_160.npy", "/train/img_16_of_16.npy"}) {
    spec.path = dir + name;
    ASSERT_TRUE(gen::write_npy_file(spec).ok());
    auto index = open_file(spec.path, {});
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(index->size(), 4u) << name;
    EXPECT_EQ(index->ref(0).shape, (Shape{4, 5})) << name;
  }
}

TEST(NpyFile, EveryTruncationIsAClearError) {
  const std::string dir = scratch_dir();
  gen::FileSpec spec;
  spec.path = dir + "/full.npy";
  spec.sample_shape = {3};
  spec.num_samples = 4;
  ASSERT_TRUE(gen::write_npy_file(spec).ok());
  const std::string full = read_all(spec.path);
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string p = dir + "/cut.npy";
    write_all(p, full.substr(0, n));
    auto index = open_file(p, {});
    ASSERT_FALSE(index.ok()) << "truncated to " << n << " bytes";
    const std::string msg(index.status().message());
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find("at offset"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
  }
}

TEST(NpyFile, ZeroDimensionalAndEmptyArrays) {
  const std::string dir = scratch_dir();
  write_all(dir + "/scalar.npy", make_npy_header(DType::f32(), Shape{}) + std::string(4, '\0'));
  auto s = open_file(dir + "/scalar.npy", {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("0-d"), std::string::npos) << s.status();
  write_all(dir + "/empty.npy", make_npy_header(DType::f32(), Shape{0, 3}));
  auto e = open_file(dir + "/empty.npy", {});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->size(), 0u);
  // Empty samples: nothing in the file bounds their count, so a tiny header
  // could make the index allocate without limit (found by fuzz_npy's kind
  // of input: shape (10^12, 0) in a 128-byte file). Refused, on both axes.
  write_all(dir + "/empty_samples.npy", make_npy_header(DType::u8(), Shape{1000000000000, 0}));
  auto z = open_file(dir + "/empty_samples.npy", {});
  ASSERT_FALSE(z.ok());
  EXPECT_EQ(z.status().code(), absl::StatusCode::kInvalidArgument) << "a valid file dlfeed does not read";
  EXPECT_NE(std::string(z.status().message())
                .find("expected samples of at least one element, found 1000000000000 "
                      "empty samples"),
            std::string::npos)
      << z.status();
  FormatOptions last;
  last.axis = SampleAxis::kLast;
  write_all(dir + "/empty_last.npy", make_npy_header(DType::u8(), Shape{0, 7}));
  EXPECT_FALSE(open_file(dir + "/empty_last.npy", last).ok());
}

TEST(Dataset, FolderOpensEveryDataFileInOrder) {
  const std::string dir = scratch_dir();
  gen::DatasetSpec spec;
  spec.dir = dir;
  spec.format = FileFormat::kNpy;
  spec.files = 3;
  spec.samples_per_file = 4;
  spec.sample_shape = {2, 2};
  spec.dlio_layout = true;
  spec.valid_files = 1;
  auto files = gen::write_dataset(spec);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->size(), 4u);
  EXPECT_EQ((*files)[0], dir + "/train/img_0_of_3.npy");
  auto index = open_dataset({dir + "/train"}, {});
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->size(), 12u);
  EXPECT_EQ(index->file_begin, (std::vector<uint64_t>{0, 4, 8, 12}));
  for (uint64_t g = 0; g < 12; ++g) {
    EXPECT_EQ(index->ref(g).file, g / 4);
    EXPECT_EQ(read_one(*index, g), expected_sample(42, g, DType::u8(), {2, 2})) << g;
  }
  auto missing = open_dataset({dir + "/nope"}, {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  auto globbed = open_dataset({dir + "/train/img_[12]_of_3.npy", dir + "/valid/*.npy"}, {});
  ASSERT_TRUE(globbed.ok()) << globbed.status();
  EXPECT_EQ(globbed->files, (std::vector<std::string>{dir + "/train/img_1_of_3.npy", dir + "/train/img_2_of_3.npy",
                                                      dir + "/valid/img_0_of_1.npy"}));
  EXPECT_EQ(open_dataset({dir + "/train/*.h5"}, {}).status().code(), absl::StatusCode::kNotFound);
}

TEST(Generator, DlioFileNamesArePaddedToTheDigitsOfN) {
  EXPECT_EQ(gen::dlio_file_name("img", 3, 16, "npz"), "img_03_of_16.npz");
  EXPECT_EQ(gen::dlio_file_name("img", 0, 8, "npz"), "img_0_of_8.npz");
  EXPECT_EQ(gen::dlio_file_name("img", 7, 1024, "tfrecord"), "img_0007_of_1024.tfrecord");
}

}  // namespace
}  // namespace dlfeed
