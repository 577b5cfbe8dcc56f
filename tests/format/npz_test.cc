// SPDX-License-Identifier: Apache-2.0
#include <cstring>

#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "dlfeed/format/format.h"
#include "dlfeed/format/npy.h"
#include "dlfeed/format/zip.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace dlfeed {
namespace {

using testing::read_all;
using testing::scratch_dir;
using testing::write_all;

using testing::expected_sample;
using testing::read_bytes;

gen::FileSpec spec_for(const std::string& path, bool deflate, SampleAxis axis) {
  gen::FileSpec spec;
  spec.path = path;
  spec.sample_shape = {6, 5};
  spec.dtype = DType::parse("<f4").value();
  spec.num_samples = 9;
  spec.first_global_id = 18;
  spec.seed = 3;
  spec.axis = axis;
  spec.compression = deflate ? gen::Compression::kDeflate : gen::Compression::kNone;
  return spec;
}

class NpzFiles : public ::testing::TestWithParam<std::tuple<bool, SampleAxis>> {};

TEST_P(NpzFiles, StoredAndDeflatedReadBackEverySample) {
  const auto [deflate, axis] = GetParam();
  const std::string dir = scratch_dir();
  const gen::FileSpec spec = spec_for(dir + "/a.npz", deflate, axis);
  ASSERT_TRUE(gen::write_npz_file(spec).ok());
  FormatOptions o;
  o.axis = axis;
  auto index = open_file(spec.path, o);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->size(), 9u);
  EXPECT_EQ(index->sources[0]->layout(), deflate ? "npz:deflated" : "npz:stored");
  for (uint64_t k = 0; k < 9; ++k) {
    auto got = read_bytes(*index, k);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, expected_sample(3, 18 + k, spec.dtype, {6, 5})) << "sample " << k;
  }
  // The labels member, selected by name.
  o.name = "y";
  auto labels = open_file(spec.path, o);
  ASSERT_TRUE(labels.ok()) << labels.status();
  ASSERT_EQ(labels->size(), 9u);
  EXPECT_EQ(labels->ref(0).dtype, DType::i64());
  for (uint64_t k = 0; k < 9; ++k) {
    auto got = read_bytes(*labels, k);
    ASSERT_TRUE(got.ok());
    int64_t v = 0;
    std::memcpy(&v, got->data(), 8);
    EXPECT_EQ(v, gen::sample_label(18 + k));
  }
}

INSTANTIATE_TEST_SUITE_P(StoredDeflatedBothAxes, NpzFiles,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(SampleAxis::kFirst, SampleAxis::kLast)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "deflated" : "stored") +
                                  (std::get<1>(info.param) == SampleAxis::kLast ? "_last" : "_first");
                         });

TEST(NpzFile, StoredMembersAreIndexedByDirectOffset) {
  const std::string dir = scratch_dir();
  const gen::FileSpec spec = spec_for(dir + "/a.npz", false, SampleAxis::kFirst);
  ASSERT_TRUE(gen::write_npz_file(spec).ok());
  auto index = open_file(spec.path, {});
  ASSERT_TRUE(index.ok());
  const std::string file = read_all(spec.path);
  const SampleRef r = index->ref(4);
  ASSERT_EQ(r.extents.size(), 1u);
  EXPECT_EQ(r.extents[0].length, 6u * 5 * 4);
  EXPECT_EQ(file.substr(r.extents[0].offset, r.extents[0].length), expected_sample(3, 22, spec.dtype, {6, 5}));
}

TEST(NpzFile, MissingMemberListsWhatIsThere) {
  const std::string dir = scratch_dir();
  ASSERT_TRUE(gen::write_npz_file(spec_for(dir + "/a.npz", false, SampleAxis::kFirst)).ok());
  FormatOptions o;
  o.name = "images";
  auto index = open_file(dir + "/a.npz", o);
  ASSERT_FALSE(index.ok());
  const std::string msg(index.status().message());
  EXPECT_TRUE(absl::IsNotFound(index.status())) << index.status();
  EXPECT_NE(msg.find(dir + "/a.npz: no member 'images' (members: 'x', 'y')"), std::string::npos) << msg;
}

TEST(NpzFile, EveryTruncationIsAClearError) {
  const std::string dir = scratch_dir();
  for (bool deflate : {false, true}) {
    gen::FileSpec spec = spec_for(dir + "/full.npz", deflate, SampleAxis::kFirst);
    spec.sample_shape = {2};
    spec.num_samples = 3;
    ASSERT_TRUE(gen::write_npz_file(spec).ok());
    const std::string full = read_all(spec.path);
    for (size_t n = 0; n < full.size(); ++n) {
      const std::string p = dir + "/cut.npz";
      write_all(p, full.substr(0, n));
      auto index = open_file(p, {});
      ASSERT_FALSE(index.ok()) << "truncated to " << n;
      const std::string msg(index.status().message());
      EXPECT_NE(msg.find(p + ": at offset"), std::string::npos) << msg;
    }
  }
}

TEST(NpzFile, CorruptDeflateDataAndWrongCrcAreCaught) {
  const std::string dir = scratch_dir();
  gen::FileSpec spec = spec_for(dir + "/a.npz", true, SampleAxis::kFirst);
  spec.dtype = DType::u8();
  ASSERT_TRUE(gen::write_npz_file(spec).ok());
  auto clean = open_file(spec.path, {});
  ASSERT_TRUE(clean.ok());
  const Extent member = clean->ref(0).extents[0];
  const std::string full = read_all(spec.path);
  // Flip a byte in the middle of the compressed member and, separately, the stored CRC.
  std::string corrupt = full;
  corrupt[member.offset + member.length / 2] ^= 0x5a;
  write_all(dir + "/b.npz", corrupt);
  auto b = open_file(dir + "/b.npz", {});
  if (b.ok()) {
    auto s = read_bytes(*b, 8);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(std::string(s.status().message()).find(dir + "/b.npz: at offset"), std::string::npos) << s.status();
  }
  std::string bad_crc = full;
  // The local header's CRC is at +14; the central directory's is what dlfeed checks.
  const size_t cd = bad_crc.rfind(std::string("PK\x01\x02", 4), bad_crc.rfind(std::string("PK\x01\x02", 4)) - 1);
  ASSERT_NE(cd, std::string::npos);
  bad_crc[cd + 16] ^= 0x01;
  write_all(dir + "/c.npz", bad_crc);
  auto c = open_file(dir + "/c.npz", {});
  ASSERT_TRUE(c.ok()) << c.status();
  auto s = read_bytes(*c, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("CRC-32"), std::string::npos) << s.status();
}

TEST(NpzFile, HeaderThatLiesAboutItsShapeIsRefused) {
  const std::string dir = scratch_dir();
  // A member whose NPY header claims more data than the member holds.
  std::string npy = make_npy_header(DType::u8(), Shape{1000, 1000}) + std::string(10, 'a');
  ZipWriter zip(dir + "/lie.npz");
  ASSERT_TRUE(zip.add("x.npy", {reinterpret_cast<const std::byte*>(npy.data()), npy.size()}, false, 0).ok());
  ASSERT_TRUE(zip.finish().ok());
  auto index = open_file(dir + "/lie.npz", {});
  ASSERT_FALSE(index.ok());
  EXPECT_NE(std::string(index.status().message()).find("1000000 bytes of array data"), std::string::npos)
      << index.status();
}

TEST(NpzFile, AnUncompressedSizeDeflateCannotReachIsRefused) {
  // Found by fuzz_npz: a deflated member whose directory entry claims
  // gigabytes made decode allocate them. Deflate expands at most ~1032:1.
  const std::string dir = scratch_dir();
  gen::FileSpec spec = spec_for(dir + "/ok.npz", /*deflate=*/true, SampleAxis::kFirst);
  ASSERT_TRUE(gen::write_npz_file(spec).ok());
  std::string bytes = read_all(spec.path);
  // The first central directory entry: uncompressed size at +24 (4 bytes, no Zip64 here).
  const size_t cd = bytes.find(std::string("PK\x01\x02", 4));
  ASSERT_NE(cd, std::string::npos);
  uint32_t csize = 0;
  std::memcpy(&csize, bytes.data() + cd + 20, 4);
  const uint32_t huge = 0xfffffff0u;
  ASSERT_GT(huge / 1032, csize + 1);
  std::memcpy(bytes.data() + cd + 24, &huge, 4);
  write_all(dir + "/bomb.npz", bytes);
  auto index = open_file(dir + "/bomb.npz", {});
  ASSERT_FALSE(index.ok());
  EXPECT_NE(std::string(index.status().message()).find(absl::StrCat(dir, "/bomb.npz: at offset ")), std::string::npos);
  EXPECT_NE(std::string(index.status().message()).find("(at most 1032x), found 4294967280 bytes"), std::string::npos)
      << index.status();
}

TEST(NpzFile, NotAZipFile) {
  const std::string dir = scratch_dir();
  write_all(dir + "/junk.npz", std::string(5000, 'z'));
  auto index = open_file(dir + "/junk.npz", {});
  ASSERT_FALSE(index.ok());
  EXPECT_NE(std::string(index.status().message()).find("end-of-central-directory"), std::string::npos);
  write_all(dir + "/empty.npz", "");
  EXPECT_FALSE(open_file(dir + "/empty.npz", {}).ok());
}

}  // namespace
}  // namespace dlfeed
