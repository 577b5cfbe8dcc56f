// SPDX-License-Identifier: Apache-2.0
// Datasets held in memory (resident) and arrays unpacked once (unpack): the
// same batches as the read path, and the reasons given when they are not used.
#include "loader/loader_fields.h"
#include "loader_fixture.h"

namespace dlfeed {
namespace {

TEST(Loader, ResidentDatasetsGiveTheSameBatchesAsReadOnes) {
  const std::string root = scratch_dir();
  for (const DatasetCase& c : kDatasets) {
    const std::string path = make_dataset(c, root);
    for (const char* strategy : {"sequential", "global_shuffle"}) {
      LoaderOptions o = options_for(c, path);
      o.order.strategy = strategy;
      o.order.seed = 3;
      auto read = Loader::create(o);
      ASSERT_TRUE(read.ok()) << read.status();
      EXPECT_EQ((**read).stats().resident_bytes, 0u);
      EXPECT_NE((**read).stats().resident_reason.find("resident is off"), std::string::npos);
      // prefetch "auto": 8 batches ahead of reads; of copies from held files,
      // 8 within 16 MiB, but for TFRecord, whose records the engines copy and
      // the decode stage checks (split_reads.h), as many ahead as reads.
      EXPECT_EQ((**read).stats().prefetch, "depth:8,budget:268435456");
      o.resident = Mode::kAuto;
      auto held = Loader::create(o);
      ASSERT_TRUE(held.ok()) << held.status();
      const LoaderStats s = (**held).stats();
      EXPECT_GT(s.resident_bytes, 0u) << c.name << ": " << s.resident_reason;
      EXPECT_NE(s.resident_reason.find("held in memory"), std::string::npos) << s.resident_reason;
      EXPECT_EQ(s.prefetch, c.format == FileFormat::kTfRecord ? "depth:8,budget:268435456" : "depth:8,budget:16777216")
          << c.name;
      // read_epoch checks every sample's bytes; both give the same order,
      // the first epoch while the files are being held too.
      EXPECT_EQ(read_epoch(**held, c, 1), read_epoch(**read, c, 1)) << c.name << " " << strategy;
      EXPECT_EQ((**held).stats().samples, 35u);
      // Raw samples at a fixed stride are gathered, from the first epoch
      // that starts with every file held; the rest go through decode.
      EXPECT_EQ(read_epoch(**held, c, 2), read_epoch(**read, c, 2)) << c.name << " " << strategy;
      const bool strided = c.name == std::string("npz") || c.name == std::string("hdf5");
      EXPECT_EQ((**held).stats().route, strided ? "gather" : "pipeline") << c.name;
      EXPECT_EQ((**read).stats().route, "pipeline") << "samples read from files are decoded";
    }
  }
}

// Orders are made ahead: create()'s for its epoch, each epoch's next one
// while it runs. Epochs taken in any sequence, an epoch left half-read, a
// restore() mid-epoch and an order.epoch other than 0 all get exactly the
// order stage's ids.
TEST(Loader, ResidentLoadOfManyFilesReportsTheFirstFailingFile) {
  const std::string root = scratch_dir();
  const DatasetCase c{"npy_many", FileFormat::kNpy, false, {}};
  const std::string path = make_dataset(c, root, /*files=*/300, /*per_file=*/1);
  LoaderOptions o = options_for(c, path);
  o.resident = Mode::kOn;
  {
    auto held = Loader::create(o);
    ASSERT_TRUE(held.ok()) << held.status();
    EXPECT_EQ((**held).stats().resident_bytes > 0, true);
    EXPECT_EQ(read_epoch(**held, c, 0).size(), 300u);
  }
  std::vector<std::string> gone;
  o.advanced.index_opener = [&](const std::vector<std::string>& paths,
                                const FormatOptions& f) -> absl::StatusOr<SampleIndex> {
    auto index = open_dataset(paths, f);
    if (!index.ok()) return index;
    for (size_t k : {250u, 120u, 290u}) {  // removed after indexing: their reads fail
      gone.push_back(index->files[k]);
      std::filesystem::remove(index->files[k]);
    }
    return index;
  };
  auto failed = Loader::create(o);
  ASSERT_FALSE(failed.ok());
  ASSERT_EQ(gone.size(), 3u);
  EXPECT_NE(std::string(failed.status().message()).find(gone[1]), std::string::npos) << failed.status();
}

// Files over 8 MiB whose size the index knows are held in pieces read by
// several threads: every byte as written, and a file cut short after it was
// indexed is an error naming it and what changed, never a sample of zeros.
TEST(Loader, LargeHeldFilesAreReadInPiecesByteExact) {
  const std::string root = scratch_dir();
  const Shape shape{1000, 1000};  // 4 MB float32 samples, 3 a file: 12 MB, not a whole number of 8 MiB pieces
  gen::DatasetSpec spec = testing::dataset_spec(root + "/npy", FileFormat::kNpy, 3, 3, shape, DType::f32(), kSeed);
  auto written = testing::write_generated(spec);
  ASSERT_TRUE(written.ok()) << written.status();
  LoaderOptions o;
  o.paths = {written->path};
  o.batch_size = 2;
  o.threads = 2;
  o.order.strategy = "global_shuffle";
  o.order.seed = 1;
  o.resident = Mode::kOn;
  {
    auto held = Loader::create(o);
    ASSERT_TRUE(held.ok()) << held.status();
    EXPECT_GT((**held).stats().resident_bytes, 9u * 4'000'000);
    ASSERT_TRUE((**held).start_epoch(0).ok());
    uint64_t samples = 0;
    while (true) {
      auto b = (**held).next();
      ASSERT_TRUE(b.ok()) << b.status();
      if (!*b) break;
      for (size_t i = 0; i < (**b).size(); ++i, ++samples) {
        const auto data = (**b).fields[0].sample(i);
        ASSERT_TRUE(std::string(reinterpret_cast<const char*>(data.data()), data.size()) ==
                    testing::expected_sample(kSeed, (**b).sample_ids[i], DType::f32(), shape))
            << "sample " << (**b).sample_ids[i];
      }
    }
    EXPECT_EQ(samples, 9u);
  }
  std::string cut;
  o.advanced.index_opener = [&](const std::vector<std::string>& paths,
                                const FormatOptions& f) -> absl::StatusOr<SampleIndex> {
    auto index = open_dataset(paths, f);
    if (!index.ok()) return index;
    cut = index->files[1];
    std::filesystem::resize_file(cut, 10 << 20);  // after indexing: its last 2 MB gone
    return index;
  };
  auto failed = Loader::create(o);
  ASSERT_FALSE(failed.ok());
  const std::string message(failed.status().message());
  EXPECT_NE(message.find(cut), std::string::npos) << message;
  EXPECT_NE(message.find("12000128 -> 10485760 bytes"), std::string::npos) << message;
}

// auto holds the files from create on, in the order the first epoch first
// uses them (every field's file of a sample together). A file that cannot be
// held is read from its source instead: a file removed after indexing is an
// error naming it at the batch that reads it, never a hang or a sample of
// zeros, and the stats say why it is not held.
TEST(Loader, HeldFromCreateOnInTheFirstEpochsOrder) {
  const FileLayout layout = FileLayout::uniform(4, 2);
  OrderSpec spec;
  spec.strategy = "sequential";
  auto seq = OrderCursor::create(layout, spec);
  ASSERT_TRUE(seq.ok()) << seq.status();
  const std::vector<std::vector<uint32_t>> two_fields{{0, 1, 2, 3}, {4, 5, 6, 7}};
  EXPECT_EQ(detail::first_use_order(*seq, layout, two_fields), (std::vector<uint32_t>{0, 4, 1, 5, 2, 6, 3, 7}));
  spec.strategy = "global_shuffle";
  spec.seed = 5;
  auto shuffled = OrderCursor::create(layout, spec);
  ASSERT_TRUE(shuffled.ok()) << shuffled.status();
  std::vector<uint32_t> want;
  OrderCursor c = *shuffled;
  for (uint64_t id = 0; c.next(std::span<uint64_t>(&id, 1)) == 1;) {
    const auto file = static_cast<uint32_t>(layout.file_of(id));
    if (std::find(want.begin(), want.end(), file) == want.end()) want.push_back(file);
  }
  EXPECT_EQ(detail::first_use_order(*shuffled, layout, {{0, 1, 2, 3}}), want);

  const std::string root = scratch_dir();
  const DatasetCase ds{"npy_many", FileFormat::kNpy, false, {}};
  LoaderOptions o = options_for(ds, make_dataset(ds, root, /*files=*/60, /*per_file=*/1));
  o.resident = Mode::kAuto;
  o.order.strategy = "global_shuffle";
  std::string gone;
  o.advanced.index_opener = [&](const std::vector<std::string>& paths,
                                const FormatOptions& f) -> absl::StatusOr<SampleIndex> {
    auto index = open_dataset(paths, f);
    if (!index.ok()) return index;
    gone = index->files[33];
    std::filesystem::remove(gone);  // after indexing: its hold and its read fail
    return index;
  };
  auto loader = Loader::create(o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_TRUE((**loader).start_epoch(0).ok());
  absl::Status failed;
  uint64_t delivered = 0;
  while (true) {
    auto b = (**loader).next();
    if (!b.ok()) {
      failed = b.status();
      break;
    }
    if (!*b) break;
    for (size_t i = 0; i < (**b).size(); ++i, ++delivered) {
      const auto data = (**b).fields[0].sample(i);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(data.data()), data.size()),
                expected_bytes((**b).sample_ids[i]));
    }
  }
  ASSERT_FALSE(failed.ok()) << delivered << " samples and no error";
  EXPECT_NE(std::string(failed.message()).find(gone), std::string::npos) << failed;
  const std::string why = (**loader).stats().resident_reason;
  EXPECT_NE(why.find("read from their source instead"), std::string::npos) << why;
  EXPECT_NE(why.find(gone), std::string::npos) << why;
}

TEST(Loader, ResidentSaysWhyNot) {
  const std::string root = scratch_dir();
  const DatasetCase& c = kDatasets[3];  // hdf5
  const std::string path = make_dataset(c, root);
  LoaderOptions o = options_for(c, path);
  o.memory_budget = 4096;  // the files are larger than half of it
  o.resident = Mode::kAuto;
  auto loader = Loader::create(o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((**loader).stats().resident_bytes, 0u);
  EXPECT_NE((**loader).stats().resident_reason.find("more than half of memory_budget"), std::string::npos)
      << (**loader).stats().resident_reason;
  o.resident = Mode::kOn;
  auto refused = Loader::create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("more than half of memory_budget (4096 bytes)"), std::string::npos)
      << refused.status();
  o.memory_budget = 1 << 30;
  o.io.direct = true;
  EXPECT_NE(Loader::create(o).status().message().find("io.direct"), std::string::npos);
  o.io.direct = false;
  // The switch as text (Python, the command line): the same three words, anything else refused.
  EXPECT_EQ(parse_mode("off", "resident").value(), Mode::kOff);
  EXPECT_EQ(parse_mode("on", "resident").value(), Mode::kOn);
  EXPECT_EQ(parse_mode("auto", "resident").value(), Mode::kAuto);
  EXPECT_EQ(parse_mode("sometimes", "resident").status().message(),
            "loader: resident is auto, on or off, not 'sometimes'");
  for (Mode m : {Mode::kAuto, Mode::kOn, Mode::kOff}) EXPECT_EQ(parse_mode(mode_name(m), "resident").value(), m);
}

// Deflated NPZ members and DLIO-layout (strided) arrays are unpacked once
// (LoaderOptions::unpack): the same batches as reading per sample, each
// member or array read once in all (bytes_read), resumable mid-epoch.
TEST(Loader, UnpackedArraysGiveTheSameBatchesReadOnce) {
  const std::string root = scratch_dir();
  const DatasetCase deflated{"npz_deflated", FileFormat::kNpz, false, {"x", "y"}};
  for (const DatasetCase& c : {kDatasets[1], kDatasets[2], deflated}) {
    gen::DatasetSpec spec = testing::dataset_spec(root + "/" + c.name, c.format, 5, 7, kShape, DType::f32(), kSeed);
    spec.dlio_layout = c.dlio;
    if (std::string(c.name) == deflated.name) spec.compression = gen::Compression::kDeflate;
    auto written = testing::write_generated(spec);
    ASSERT_TRUE(written.ok()) << written.status();
    for (Mode resident : {Mode::kOff, Mode::kAuto}) {
      LoaderOptions o = options_for(c, written->path);
      o.resident = resident;
      o.order.strategy = "global_shuffle";
      o.order.seed = 3;
      o.unpack = Mode::kOff;
      auto per_sample = Loader::create(o).value();
      EXPECT_EQ(per_sample->stats().unpacked_bytes, 0u);
      EXPECT_NE(per_sample->stats().unpacked_reason.find("unpack is off"), std::string::npos);
      o.unpack = Mode::kAuto;
      auto unpacked = Loader::create(o).value();
      const LoaderStats s0 = unpacked->stats();
      EXPECT_NE(s0.unpacked_reason.find("unpacked: "), std::string::npos) << c.name << ": " << s0.unpacked_reason;
      // A raw array in a held file is gathered from the held bytes.
      EXPECT_EQ(s0.unpacked_bytes == 0, c.dlio && resident == Mode::kAuto) << c.name;
      const std::vector<uint64_t> ids = read_epoch(*unpacked, c, 1);  // checks every sample's bytes
      EXPECT_EQ(ids, read_epoch(*per_sample, c, 1)) << c.name;
      const LoaderStats s1 = unpacked->stats();
      // Every member or array read once: at most the files' bytes (x, and y
      // where it is deflated); per sample, many times that.
      uint64_t file_bytes = 0;
      for (const std::string& f : unpacked->index(0).files) file_bytes += std::filesystem::file_size(f);
      EXPECT_LE(s1.bytes_read, file_bytes) << c.name;
      EXPECT_GT(per_sample->stats().bytes_read, 2 * s1.bytes_read) << c.name;
      // Each epoch starts afresh: another reads every array once more (and
      // a DLIO NPZ's labels, y, contiguous int64, per sample as before).
      read_epoch(*unpacked, c, 2);
      const uint64_t again = unpacked->stats().bytes_read - s1.bytes_read;
      if (c.dlio && c.fields.size() > 1) {  // y's reads coalesce differently in another order
        EXPECT_NEAR(static_cast<double>(again), static_cast<double>(s1.bytes_read), 5 * 7 * 8 * 2.0) << c.name;
      } else {
        EXPECT_EQ(again, s1.bytes_read) << c.name;
      }
      // Resumed mid-epoch in a new loader: exactly the rest.
      auto first = Loader::create(o).value();
      ASSERT_TRUE(first->start_epoch(1).ok());
      std::vector<uint64_t> got;
      for (int b = 0; b < 3; ++b) {
        auto batch = first->next().value();
        ASSERT_NE(batch, nullptr);
        got.insert(got.end(), batch->sample_ids.begin(), batch->sample_ids.end());
      }
      const std::string state = first->state();
      first.reset();
      auto second = Loader::create(o).value();
      ASSERT_TRUE(second->restore(state).ok());
      const std::vector<uint64_t> rest = read_epoch(*second, c, 1);
      got.insert(got.end(), rest.begin(), rest.end());
      EXPECT_EQ(got, ids) << c.name;
    }
  }
  // on: every array, or an error that says why not.
  LoaderOptions o = options_for(kDatasets[2], make_dataset(kDatasets[2], root));
  o.resident = Mode::kOff;
  o.unpack = Mode::kOn;
  auto all = Loader::create(o);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_NE((*all)->stats().unpacked_reason.find("unpacked: "), std::string::npos);
  EXPECT_EQ((*all)->stats().unpacked_reason.find("more read per sample"), std::string::npos);
  o.memory_budget = 64;  // no room for any array
  absl::Status refused = Loader::create(o).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("unpack=on, but the 5 deflated or strided arrays keep "), std::string::npos)
      << refused;
  o.memory_budget = 0;
  o.io.direct = true;
  EXPECT_EQ(Loader::create(o).status().message(), "loader: unpack=on, but io.direct asks for the device");
}

}  // namespace
}  // namespace dlfeed
