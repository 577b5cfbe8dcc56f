// SPDX-License-Identifier: Apache-2.0
// TFRecord records read around their value (docs/architecture.md, "Split
// records") through the whole loader, on every backend: each record is one
// scattered read (ReadRequest::pieces), its value of 64 KiB or more straight
// into the batch, the value's CRC taken by the backend as the read lands
// (ReadRequest::checksum) and joined to the other pieces' CRCs by the check; every image and label comes out as
// written, and a flipped byte in a value is an error naming the file and the record's offset, never a wrong sample.
// With the rest of the C++ suite this runs under ASan and TSan (the engine hands the CRCs to the batch's work).
#include <atomic>
#include <cstdio>

#include "loader_fixture.h"
#include "support/dataset.h"

namespace dlfeed {
namespace {

const Shape kBig{256, 272};  // 69,632 uint8: at least the 64 KiB split reads need

// Written flat, then moved to DLIO's names (train/img_I_of_N.tfrecord), for
// which the writer's int64 `size` feature shapes `image` (1-D, its bytes)
// and not `label`, as with DLIO's own files.
testing::GeneratedDataset write_big(const std::string& root, const char* name) {
  auto spec = testing::dataset_spec(root + "/" + name, FileFormat::kTfRecord, 3, 10, kBig, DType::u8(), kSeed);
  auto written = testing::write_generated(spec);
  EXPECT_TRUE(written.ok()) << written.status();
  if (!written.ok()) return {};
  const std::string train = written->path + "/train";
  std::filesystem::create_directories(train);
  for (size_t i = 0; i < written->files.size(); ++i) {
    const std::string to = absl::StrCat(train, "/img_", i, "_of_", written->files.size(), ".tfrecord");
    std::filesystem::rename(written->files[i], to);
    if (std::filesystem::exists(written->files[i] + ".idx"))
      std::filesystem::rename(written->files[i] + ".idx", to + ".idx");
    written->files[i] = to;
  }
  written->path = train;
  return *std::move(written);
}

LoaderOptions big_options(const std::string& path, IoKind io) {
  LoaderOptions o;
  o.paths = {path};
  o.fields = {"image", "label"};
  o.format.feature_dtype = DType::u8();
  o.batch_size = 8;
  o.threads = 2;
  o.resident = Mode::kOff;
  o.io.kind = io;
  o.order.strategy = "global_shuffle";
  return o;
}

// Reads an epoch: every sample's image and label checked; the first error.
absl::Status read_checked(Loader& loader, uint64_t epoch, std::vector<uint64_t>& ids) {
  DLFEED_RETURN_IF_ERROR(loader.start_epoch(epoch));
  while (true) {
    auto b = loader.next();
    if (!b.ok()) return b.status();
    if (!*b) return absl::OkStatus();
    const Batch& batch = **b;
    for (size_t i = 0; i < batch.size(); ++i) {
      const uint64_t id = batch.sample_ids[i];
      ids.push_back(id);
      const auto image = batch.fields[0].sample(i);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(image.data()), image.size()),
                testing::expected_sample(kSeed, id, DType::u8(), kBig))
          << "sample " << id;
      int64_t label = -1;
      if (batch.fields[1].sample(i).size() == 8) std::memcpy(&label, batch.fields[1].sample(i).data(), 8);
      EXPECT_EQ(label, gen::sample_label(id)) << "sample " << id;
    }
  }
}

// Two epochs of the 30 records, every sample checked and each id once; then
// the route: one scattered read per record (the image into the batch, the
// bytes around it into the read buffer; the label decodes from those), and
// every record passed its check from the pieces (with CRCs: the image's CRC
// taken by the backend joined to the others'), none read again whole.
void expect_two_split_epochs(Loader& loader, IoKind io, bool verify) {
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<uint64_t> ids;
    const absl::Status st = read_checked(loader, epoch, ids);
    ASSERT_TRUE(st.ok()) << io_kind_name(io) << ": " << st;
    std::sort(ids.begin(), ids.end());
    ASSERT_EQ(ids.size(), 30u);
    for (uint64_t k = 0; k < ids.size(); ++k) EXPECT_EQ(ids[k], k);
  }
  const LoaderStats st = loader.stats();
  EXPECT_EQ(st.planned_reads, 2u * 30u) << io_kind_name(io);
  EXPECT_EQ(st.split_records, 2u * 30u) << io_kind_name(io);
  EXPECT_EQ(st.split_records_whole, 0u) << io_kind_name(io) << (verify ? " with" : " without") << " CRCs";
}

TEST(SplitRecords, EveryBackendReadsImagesAroundTheirRecordsByteExact) {
  const std::string root = scratch_dir();
  const testing::GeneratedDataset d = write_big(root, "tfr");
  for (IoKind io : backends()) {
    for (bool verify : {true, false}) {
      LoaderOptions o = big_options(d.path, io);
      o.format.verify_crc = verify;
      auto loader = Loader::create(o);
      ASSERT_TRUE(loader.ok()) << loader.status();
      expect_two_split_epochs(**loader, io, verify);
    }
  }
}

// Outside DLIO's names the `size` feature is not read: the image is 1-D, its
// length known only after decode. Its batches are laid out by the first
// record's value length (predict_split_layout), and each image is read
// straight into its slot all the same.
TEST(SplitRecords, WithoutAShapeImagesAreReadIntoPlaceByTheFirstRecordsLength) {
  const std::string root = scratch_dir();
  auto spec = testing::dataset_spec(root + "/flat", FileFormat::kTfRecord, 3, 10, kBig, DType::u8(), kSeed);
  auto d = testing::write_generated(spec);
  ASSERT_TRUE(d.ok()) << d.status();
  for (IoKind io : backends()) {
    for (bool verify : {true, false}) {
      LoaderOptions o = big_options(d->path, io);
      o.format.verify_crc = verify;
      o.threads = 4;  // checks and decodes spread over the arena
      auto loader = Loader::create(o);
      ASSERT_TRUE(loader.ok()) << loader.status();
      expect_two_split_epochs(**loader, io, verify);
      ASSERT_TRUE((*loader)->start_epoch(2).ok());
      auto b = (*loader)->next();
      ASSERT_TRUE(b.ok() && *b) << b.status();
      const BatchField& image = (**b).fields[0];
      EXPECT_EQ(image.shape, (Shape{8, kBig[0] * kBig[1]}));  // 1-D samples, uniform: a (batch, bytes) array
    }
  }
}

// A backend of the caller's that counts the requests it is given and the
// scattered ones among them, reading through a built-in backend.
class CountingBackend final : public IoBackend {
 public:
  CountingBackend(std::unique_ptr<IoBackend> inner, std::atomic<uint64_t>& requests, std::atomic<uint64_t>& scattered)
      : inner_(std::move(inner)), requests_(requests), scattered_(scattered) {}
  absl::Status submit(std::span<const ReadRequest> reqs) override {
    for (const ReadRequest& r : reqs) {
      ++requests_;
      if (r.piece_count > 0) ++scattered_;
    }
    return inner_->submit(reqs);
  }
  size_t reap(std::vector<ReadCompletion>& out, size_t min, std::chrono::nanoseconds timeout) override {
    return inner_->reap(out, min, timeout);
  }
  size_t in_flight() const override { return inner_->in_flight(); }
  std::string name() const override { return "counting " + inner_->name(); }
  IoStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<IoBackend> inner_;
  std::atomic<uint64_t>& requests_;
  std::atomic<uint64_t>& scattered_;
};

// A backend of the caller's (AdvancedOptions::io_factory) may not know
// scattered reads: it gets each record as three plain reads, and the check
// takes the image's CRC from the batch (the checked wrapper drops any the
// backend gives). The same samples, no record read again whole.
TEST(SplitRecords, ABackendOfTheCallersGetsPlainReads) {
  const std::string root = scratch_dir();
  const testing::GeneratedDataset d = write_big(root, "factory");
  LoaderOptions o = big_options(d.path, IoKind::kAuto);
  std::atomic<uint64_t> requests{0}, scattered{0};
  o.advanced.io_factory = [&](std::shared_ptr<FileTable> files,
                              IoOptions io) -> absl::StatusOr<std::unique_ptr<IoBackend>> {
    DLFEED_ASSIGN_OR_RETURN(auto inner, make_io_backend(std::move(files), io));
    return std::make_unique<CountingBackend>(std::move(inner), requests, scattered);
  };
  auto loader = Loader::create(o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<uint64_t> ids;
  const absl::Status st = read_checked(**loader, 0, ids);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(ids.size(), 30u);
  const LoaderStats s = (*loader)->stats();
  EXPECT_EQ(s.split_records, 30u);
  EXPECT_EQ(s.split_records_whole, 0u);
  EXPECT_EQ(scattered.load(), 0u);
  EXPECT_GE(requests.load(), 3u * 30u) << "three plain reads per record";
}

// Files held in memory: the engines' held-files backend copies each record's
// pieces (tracing or not), with the image's CRC as the read backends take it,
// and the batches go round all the engines. The same bytes as reading.
TEST(SplitRecords, HeldFilesGiveTheSameSamples) {
  const std::string root = scratch_dir();
  const testing::GeneratedDataset d = write_big(root, "held");
  for (bool trace : {false, true}) {
    LoaderOptions o = big_options(d.path, IoKind::kAuto);
    o.resident = Mode::kOn;
    o.trace.enabled = trace;
    auto loader = Loader::create(o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    ASSERT_GT((*loader)->stats().resident_bytes, 0u);
    std::vector<uint64_t> ids;
    const absl::Status st = read_checked(**loader, 0, ids);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(ids.size(), 30u);
    const LoaderStats s = (*loader)->stats();
    EXPECT_EQ(s.split_records, 30u) << (trace ? "tracing" : "");
    EXPECT_EQ(s.split_records_whole, 0u) << (trace ? "tracing" : "");
    // Copies from memory wait on no device: they go round all the engines.
    if (s.io_engines > 1) {
      EXPECT_GT(s.batches_spread, 0u) << (trace ? "tracing" : "");
    }
  }
}

// A byte flipped inside one record's image: the CRC the backend took of the
// image no longer joins to the footer's, the record is read whole and its
// plain check fails, naming the file and the record's offset. Every other
// sample delivered before the error is right (read_checked checks them).
TEST(SplitRecords, AFlippedImageByteIsAnErrorNamingFileAndOffset) {
  const std::string root = scratch_dir();
  const testing::GeneratedDataset d = write_big(root, "flip");
  ASSERT_FALSE(d.files.empty());
  const std::string& file = d.files[1];
  // Record 3 of the file (record 0's layout is read when the loader opens
  // it): every record is as long, its image in the middle of it.
  std::string head(8, '\0');
  {
    std::FILE* f = std::fopen(file.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fread(head.data(), 1, 8, f), 8u);
    std::fclose(f);
  }
  uint64_t payload = 0;
  std::memcpy(&payload, head.data(), 8);  // little-endian length field
  const uint64_t record = payload + 16, rec3 = 3 * record, at = rec3 + record / 2;
  {
    std::FILE* f = std::fopen(file.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fseek(f, static_cast<long>(at), SEEK_SET), 0);
    const int c = std::fgetc(f);
    ASSERT_EQ(std::fseek(f, static_cast<long>(at), SEEK_SET), 0);
    std::fputc(c ^ 0x20, f);
    std::fclose(f);
  }
  for (IoKind io : backends()) {
    LoaderOptions o = big_options(d.path, io);
    auto loader = Loader::create(o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    std::vector<uint64_t> ids;
    const absl::Status st = read_checked(**loader, 0, ids);
    ASSERT_FALSE(st.ok()) << io_kind_name(io) << ": the flipped byte went unnoticed";
    const std::string msg(st.message());
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(absl::StrCat("record at offset ", rec3)), std::string::npos) << msg;
    EXPECT_NE(msg.find("CRC"), std::string::npos) << msg;
    EXPECT_EQ(std::count(ids.begin(), ids.end(), uint64_t{13}), 0) << "record 3 of file 1 (sample 13) was delivered";
    EXPECT_GE((*loader)->stats().split_records_whole, 1u) << "the flipped record was not read again whole";
  }
}

}  // namespace
}  // namespace dlfeed
