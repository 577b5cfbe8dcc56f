// SPDX-License-Identifier: Apache-2.0
// The decode stage (src/decode/decoder.h): batches planned over real NPY
// (read straight into place) and deflated NPZ files (decoded, in parallel
// for 8 samples and more) come out equal to read_sample; failed reads and
// corrupt bytes become the batch's error, naming the file.

#include "decode/decoder.h"

#include "pipeline/stage_fixture.h"
#include "plan/planner.h"

namespace dlfeed::decode {
namespace {

using testing::read_by_hand;
using testing::write_and_open;

struct Stage {
  std::vector<SampleIndex> indices;
  std::vector<std::vector<uint32_t>> file_ids;
  std::vector<std::string> names = {"x"};
  std::vector<std::string> files;
  std::shared_ptr<BufferPool> pool = std::make_shared<BufferPool>();
  counters::Counters counters;

  explicit Stage(const std::string& path, uint64_t n) {
    indices.push_back(write_and_open(path, n));
    file_ids = {{0}};
    files = {path};
  }
  std::shared_ptr<batch::Work> planned(std::vector<uint64_t> ids) {
    plan::Planner p(indices, file_ids, {static_cast<uint32_t>(ids.size()), false, {}}, nullptr);
    auto w = std::make_shared<batch::Work>();
    w->ids = std::move(ids);
    w->index = 4;
    w->epoch = 2;
    p.plan(*w);
    return w;
  }
  void expect_samples(const batch::Work& w) {
    ASSERT_TRUE(w.error.ok()) << w.error;
    ASSERT_NE(w.batch, nullptr);
    const BatchField& f = w.batch->fields[0];
    EXPECT_EQ(f.name, "x");
    EXPECT_EQ(f.shape, (Shape{static_cast<int64_t>(w.ids.size()), 8}));
    EXPECT_EQ(f.dtype, DType::f32());
    for (size_t i = 0; i < w.ids.size(); ++i) {
      auto want = dlfeed::testing::read_bytes(indices[0], w.ids[i]);
      ASSERT_TRUE(want.ok()) << want.status();
      const std::string got(reinterpret_cast<const char*>(f.bytes.data()) + f.offsets[i],
                            f.offsets[i + 1] - f.offsets[i]);
      EXPECT_EQ(got, *want) << "sample " << w.ids[i];
    }
    EXPECT_EQ(w.batch->sample_ids, w.ids);
    EXPECT_EQ(w.batch->index, 4u);
    EXPECT_EQ(w.batch->epoch, 2u);
  }
};

TEST(Decoder, RawSamplesReadIntoPlaceNeedNoDecode) {
  Stage s(testing::scratch_dir() + "/x.npy", 5000);
  // 0 and 1 are neighbours (coalesced, copied out of the read buffer); 4000
  // is isolated (read straight into the batch).
  auto w = s.planned({0, 4000, 1});
  EXPECT_EQ(w->direct, (std::vector<uint8_t>{0, 1, 0}));
  ASSERT_TRUE(read_by_hand(*w, s.files, *s.pool).ok());
  w->reads_finished(absl::OkStatus());
  Decoder(s.indices, s.names, s.pool, &s.counters).decode(*w);
  s.expect_samples(*w);
}

TEST(Decoder, DeflatedSamplesDecodeInParallel) {
  Stage s(testing::scratch_dir() + "/x.npz", 100);
  std::vector<uint64_t> ids;
  for (uint64_t k = 0; k < 20; ++k) ids.push_back((k * 37) % 100);
  auto w = s.planned(ids);
  for (uint8_t d : w->direct) ASSERT_EQ(d, 0) << "deflated samples are never read into place";
  ASSERT_TRUE(read_by_hand(*w, s.files, *s.pool).ok());
  w->reads_finished(absl::OkStatus());
  Decoder(s.indices, s.names, s.pool, &s.counters).decode(*w);
  s.expect_samples(*w);
}

TEST(Decoder, AFailedReadIsTheBatchsError) {
  Stage s(testing::scratch_dir() + "/x.npy", 10);
  auto w = s.planned({0, 1});
  w->reads_finished(absl::DataLossError("x.npy: at offset 128: the disk said no"));
  Decoder(s.indices, s.names, s.pool, nullptr).decode(*w);
  EXPECT_EQ(w->error, absl::DataLossError("x.npy: at offset 128: the disk said no"));
  EXPECT_EQ(w->batch, nullptr);
}

TEST(Decoder, CorruptBytesAreTheBatchsErrorNamingTheFile) {
  const std::string path = testing::scratch_dir() + "/x.npz";
  Stage s(path, 30);
  auto w = s.planned({3, 4, 5});
  ASSERT_TRUE(read_by_hand(*w, s.files, *s.pool).ok());
  for (size_t k = 0; k < w->raw.size(); ++k) w->raw.data()[k] = std::byte{0xFF};
  w->reads_finished(absl::OkStatus());
  Decoder(s.indices, s.names, s.pool, &s.counters).decode(*w);
  ASSERT_FALSE(w->error.ok()) << "garbage decoded as a sample";
  EXPECT_NE(std::string(w->error.message()).find(path), std::string::npos) << w->error;
  EXPECT_EQ(w->batch, nullptr);
}

}  // namespace
}  // namespace dlfeed::decode
