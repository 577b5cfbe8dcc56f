// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/loader.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed {
namespace {

using testing::scratch_dir;

struct DatasetCase {
  const char* name;
  FileFormat format;
  bool dlio;
  std::vector<std::string> fields;
};

const DatasetCase kDatasets[] = {
    {"npz", FileFormat::kNpz, false, {"x", "y"}},
    {"npz_dlio", FileFormat::kNpz, true, {"x", "y"}},
    {"npy_dlio", FileFormat::kNpy, true, {}},
    {"hdf5", FileFormat::kHdf5, false, {"records", "labels"}},
    {"tfrecord", FileFormat::kTfRecord, false, {"image", "label"}},
};

constexpr uint64_t kSeed = 5;
const Shape kShape{6, 5};

std::string make_dataset(const DatasetCase& c, const std::string& root, uint64_t files = 5, uint64_t per_file = 7) {
  gen::DatasetSpec spec =
      testing::dataset_spec(root + "/" + c.name, c.format, files, per_file, kShape, DType::f32(), kSeed);
  spec.dlio_layout = c.dlio;
  auto written = testing::write_generated(spec);
  EXPECT_TRUE(written.ok()) << written.status();
  return written.ok() ? written->path : "";
}

std::string expected_bytes(uint64_t id) { return testing::expected_sample(kSeed, id, DType::f32(), kShape); }

LoaderOptions options_for(const DatasetCase& c, const std::string& path) {
  LoaderOptions o;
  o.paths = {path};
  o.fields = c.fields;
  if (c.format == FileFormat::kTfRecord) o.format.feature_dtype = DType::parse("<f4").value();
  o.batch_size = 4;
  o.threads = 2;
  o.resident = Mode::kOff;  // the read path (ResidentDatasets... tests the other)
  return o;
}

// Reads a whole epoch; checks every sample's bytes; returns the ids in order.
std::vector<uint64_t> read_epoch(Loader& loader, const DatasetCase& c, uint64_t epoch) {
  std::vector<uint64_t> ids;
  EXPECT_TRUE(loader.start_epoch(epoch).ok());
  while (true) {
    auto b = loader.next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || !*b) break;
    const Batch& batch = **b;
    for (size_t i = 0; i < batch.size(); ++i) {
      const uint64_t id = batch.sample_ids[i];
      ids.push_back(id);
      const auto data = batch.fields[0].sample(i);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(data.data()), data.size()), expected_bytes(id))
          << c.name << " sample " << id;
      if (batch.fields.size() > 1) {
        int64_t label = -1;
        EXPECT_EQ(batch.fields[1].sample(i).size(), 8u);
        if (batch.fields[1].sample(i).size() != 8) continue;
        std::memcpy(&label, batch.fields[1].sample(i).data(), 8);
        EXPECT_EQ(label, c.dlio ? 0 : gen::sample_label(id)) << c.name << " sample " << id;
      }
    }
    if (!batch.fields[0].ragged()) {
      EXPECT_EQ(batch.fields[0].shape[0], static_cast<int64_t>(batch.size()));
    }
  }
  return ids;
}

std::vector<IoKind> backends() {
  std::vector<IoKind> k{IoKind::kSync, IoKind::kThreadPool};
  if (io_uring_available().ok()) k.push_back(IoKind::kIoUring);
  return k;
}

TEST(Loader, ExactlyOnceByteExactForEveryFormatBackendStrategyAndWorld) {
  const std::string root = scratch_dir();
  for (const DatasetCase& c : kDatasets) {
    const std::string path = make_dataset(c, root);
    for (IoKind io : backends()) {
      for (const char* strategy : {"sequential", "file_shuffle", "block_shuffle", "global_shuffle", "global_feistel"}) {
        for (uint32_t world : {1u, 3u}) {
          std::multiset<uint64_t> seen;
          std::vector<std::vector<uint64_t>> per_rank;
          for (uint32_t rank = 0; rank < world; ++rank) {
            LoaderOptions o = options_for(c, path);
            o.io.kind = io;
            o.order.strategy = strategy;
            o.order.seed = 11;
            o.order.rank = rank;
            o.order.world_size = world;
            o.order.drop_last = true;
            auto loader = Loader::create(o);
            ASSERT_TRUE(loader.ok()) << loader.status();
            std::vector<uint64_t> ids = read_epoch(**loader, c, 2);
            EXPECT_EQ(ids.size(), (**loader).samples_per_epoch());
            seen.insert(ids.begin(), ids.end());
            per_rank.push_back(ids);
          }
          const uint64_t n = 35, kept = n - n % world;
          EXPECT_EQ(seen.size(), kept) << c.name << " " << strategy << " world " << world;
          EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()).size(), kept) << "a sample read twice";
          // The same order as the order stage gives, on every backend.
          for (uint32_t rank = 0; rank < world; ++rank) {
            OrderSpec spec;
            spec.strategy = strategy;
            spec.seed = 11;
            spec.epoch = 2;
            spec.rank = rank;
            spec.world_size = world;
            spec.drop_last = true;
            EXPECT_EQ(per_rank[rank], rank_order(FileLayout::uniform(5, 7), spec).value());
          }
        }
      }
    }
  }
}

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
      // prefetch "auto": 8 batches ahead of reads; of copies from held files, 8 within 16 MiB.
      EXPECT_EQ((**read).stats().prefetch, "depth:8,budget:268435456");
      o.resident = Mode::kAuto;
      auto held = Loader::create(o);
      ASSERT_TRUE(held.ok()) << held.status();
      const LoaderStats s = (**held).stats();
      EXPECT_GT(s.resident_bytes, 0u) << c.name << ": " << s.resident_reason;
      EXPECT_NE(s.resident_reason.find("held in memory"), std::string::npos) << s.resident_reason;
      EXPECT_EQ(s.prefetch, "depth:8,budget:16777216");
      // Raw samples at a fixed stride are gathered; the rest go through decode.
      const bool strided = c.name == std::string("npz") || c.name == std::string("hdf5");
      EXPECT_EQ(s.route, strided ? "gather" : "pipeline") << c.name;
      EXPECT_EQ((**read).stats().route, "pipeline") << "samples read from files are decoded";
      // read_epoch checks every sample's bytes; both give the same order.
      EXPECT_EQ(read_epoch(**held, c, 1), read_epoch(**read, c, 1)) << c.name << " " << strategy;
      EXPECT_EQ((**held).stats().samples, 35u);
    }
  }
}

// Orders are made ahead: create()'s for its epoch, each epoch's next one
// while it runs. Epochs taken in any sequence, an epoch left half-read, a
// restore() mid-epoch and an order.epoch other than 0 all get exactly the
// order stage's ids.
TEST(Loader, OrdersMadeAheadAreEachEpochsOwn) {
  const DatasetCase& c = kDatasets[3];  // hdf5
  const std::string path = make_dataset(c, scratch_dir());
  auto want = [](uint64_t epoch, uint64_t first_epoch_seed = 9) {
    OrderSpec spec;
    spec.strategy = "global_shuffle";
    spec.seed = first_epoch_seed;
    spec.epoch = epoch;
    return rank_order(FileLayout::uniform(5, 7), spec).value();
  };
  for (uint64_t first : {uint64_t{0}, uint64_t{4}}) {
    LoaderOptions o = options_for(c, path);
    o.order.strategy = "global_shuffle";
    o.order.seed = 9;
    o.order.epoch = first;
    o.batch_size = 4;
    auto loader = Loader::create(o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    for (uint64_t e : {first, first + 1, first + 3, first + 2, first + 2, uint64_t{0}, first}) {
      EXPECT_EQ(read_epoch(**loader, c, e), want(e)) << "epoch " << e << " after order.epoch " << first;
    }
    // Half of epoch 7, then its state; a fresh loader resumes it.
    ASSERT_TRUE((**loader).start_epoch(7).ok());
    std::vector<uint64_t> ids;
    for (int b = 0; b < 4; ++b) {
      auto batch = (**loader).next();
      ASSERT_TRUE(batch.ok() && *batch);
      ids.insert(ids.end(), (**batch).sample_ids.begin(), (**batch).sample_ids.end());
    }
    const std::string state = (**loader).state();
    EXPECT_EQ(read_epoch(**loader, c, 8), want(8)) << "epoch 8 after epoch 7 was left half-read";
    auto resumed = Loader::create(o);
    ASSERT_TRUE(resumed.ok());
    ASSERT_TRUE((**resumed).restore(state).ok());
    const std::vector<uint64_t> rest = read_epoch(**resumed, c, 7);
    ids.insert(ids.end(), rest.begin(), rest.end());
    EXPECT_EQ(ids, want(7)) << "epoch 7 resumed";
    EXPECT_EQ(read_epoch(**resumed, c, 8), want(8));
  }
}

// Holding many files reads them on several threads; a failure is still the
// first failing file's in file order, as a serial read would report it.
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
  o.index_opener = [&](const std::vector<std::string>& paths, const FormatOptions& f) -> absl::StatusOr<SampleIndex> {
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
  LoaderOptions o = options_for(kDatasets[2], make_dataset(kDatasets[2], root));
  o.unpack = Mode::kOn;  // unpack is auto or off
  EXPECT_EQ(Loader::create(o).status().message(), "loader: unpack is auto or off, not 'on'");
}

TEST(Loader, ResumeMidEpochGivesExactlyTheRemainingBatches) {
  const std::string root = scratch_dir();
  const DatasetCase& c = kDatasets[0];
  const std::string path = make_dataset(c, root);
  LoaderOptions o = options_for(c, path);
  o.order.strategy = "global_shuffle";
  o.order.seed = 3;
  auto full = Loader::create(o).value();
  const std::vector<uint64_t> all = read_epoch(*full, c, 1);
  for (uint64_t stop_after : {0u, 1u, 4u, 8u}) {
    auto first = Loader::create(o).value();
    ASSERT_TRUE(first->start_epoch(1).ok());
    std::vector<uint64_t> got;
    for (uint64_t b = 0; b < stop_after; ++b) {
      auto batch = first->next().value();
      ASSERT_NE(batch, nullptr);
      got.insert(got.end(), batch->sample_ids.begin(), batch->sample_ids.end());
    }
    const std::string state = first->state();
    first.reset();  // destroyed mid-epoch
    auto second = Loader::create(o).value();
    ASSERT_TRUE(second->restore(state).ok());
    const std::vector<uint64_t> rest = read_epoch(*second, c, 1);
    got.insert(got.end(), rest.begin(), rest.end());
    EXPECT_EQ(got, all) << "stopped after " << stop_after << " batches";
  }
  // A state from another seed is refused.
  LoaderOptions other = o;
  other.order.seed = 4;
  auto wrong = Loader::create(other).value();
  EXPECT_FALSE(wrong->restore(full->state()).ok());
  EXPECT_FALSE(wrong->restore("garbage").ok());
}

TEST(Loader, PrefetchPoliciesAndCoalescingDeliverTheSameData) {
  const std::string root = scratch_dir();
  const DatasetCase& c = kDatasets[3];  // hdf5
  const std::string path = make_dataset(c, root);
  std::vector<uint64_t> reference;
  for (const char* policy : {"off", "depth:1", "depth:16", "budget:4K", "budget:64M"}) {
    for (bool coalesce : {false, true}) {
      LoaderOptions o = options_for(c, path);
      o.prefetch = policy;
      o.coalesce.enabled = coalesce;
      o.order.strategy = "block_shuffle";
      o.order.params.block_size = 3;
      auto loader = Loader::create(o).value();
      std::vector<uint64_t> ids = read_epoch(*loader, c, 0);
      if (reference.empty()) reference = ids;
      EXPECT_EQ(ids, reference) << policy;
      const LoaderStats s = loader->stats();
      if (!coalesce) {
        EXPECT_EQ(s.read_requests, s.extents) << policy;
      } else {
        EXPECT_LT(s.read_requests, s.extents) << policy;  // neighbours merged
      }
    }
  }
  auto bad = LoaderOptions(options_for(c, path));
  bad.prefetch = "sometimes";
  EXPECT_FALSE(Loader::create(bad).ok());
}

TEST(Loader, MemoryBudgetBoundsBatchesInFlight) {
  const std::string root = scratch_dir();
  const DatasetCase& c = kDatasets[0];
  const std::string path = make_dataset(c, root, 4, 64);
  LoaderOptions o = options_for(c, path);
  o.prefetch = "depth:64";
  o.coalesce.enabled = false;
  // One batch: 4 samples x (120 + 8 bytes) read + the same decoded.
  o.memory_budget = 3 * 4 * 128 * 2;
  auto loader = Loader::create(o).value();
  ASSERT_TRUE(loader->start_epoch(0).ok());
  std::vector<std::shared_ptr<const Batch>> held;
  while (true) {
    auto b = loader->next().value();
    if (!b) break;
    held.push_back(b);  // a slow consumer holding on to batches
    if (held.size() > 2) held.erase(held.begin());
  }
  EXPECT_LE(loader->stats().peak_in_flight_bytes, o.memory_budget);
  EXPECT_GT(loader->stats().pool_reuses, 0u);
}

TEST(Loader, LargeRawSamplesAreReadStraightIntoTheBatch) {
  // 64 KiB samples: contiguous HDF5 and stored NPZ are read into the batch
  // buffer directly (no read buffer, no copy); neighbours merge in sequence.
  const std::string root = scratch_dir();
  for (FileFormat format : {FileFormat::kHdf5, FileFormat::kNpz}) {
    gen::DatasetSpec spec;
    spec.dir = root + "/" + format_name(format);
    spec.format = format;
    spec.files = 3;
    spec.samples_per_file = 10;
    spec.sample_shape = {256, 256};
    spec.seed = 8;
    ASSERT_TRUE(gen::write_dataset(spec).ok());
    for (const char* strategy : {"sequential", "global_shuffle"}) {
      LoaderOptions o;
      o.paths = {spec.dir};
      o.fields = {format == FileFormat::kHdf5 ? "records" : "x", format == FileFormat::kHdf5 ? "labels" : "y"};
      o.batch_size = 4;
      o.order.strategy = strategy;
      o.resident = Mode::kOff;
      auto loader = Loader::create(o).value();
      ASSERT_TRUE(loader->start_epoch(0).ok());
      std::set<uint64_t> seen;
      while (auto b = loader->next().value()) {
        for (size_t i = 0; i < b->size(); ++i) {
          const uint64_t id = b->sample_ids[i];
          seen.insert(id);
          std::string want(65536, '\0');
          gen::fill_sample(8, id, DType::u8(), {reinterpret_cast<std::byte*>(want.data()), want.size()});
          const auto got = b->fields[0].sample(i);
          ASSERT_EQ(std::string(reinterpret_cast<const char*>(got.data()), got.size()), want) << id;
          int64_t label = -1;
          std::memcpy(&label, b->fields[1].sample(i).data(), 8);
          EXPECT_EQ(label, gen::sample_label(id));
        }
        EXPECT_EQ(b->fields[0].shape, (Shape{static_cast<int64_t>(b->size()), 256, 256}));
      }
      EXPECT_EQ(seen.size(), 30u);
      const LoaderStats st = loader->stats();
      if (std::string(strategy) == "sequential") {
        // Per batch: one merged data read (or two where a batch spans files) and one label read.
        EXPECT_LT(st.read_requests, 30u) << format_name(format);
      }
      EXPECT_EQ(st.extents, 60u);
    }
  }
}

TEST(Loader, AConsumerKeepingEveryBatchNeverHangs) {
  // list(loader) in Python: every batch is kept. Neither the look-ahead depth
  // nor a tiny memory budget may block the next batch forever.
  const std::string root = scratch_dir();
  const DatasetCase& c = kDatasets[0];
  const std::string path = make_dataset(c, root);
  for (const char* policy : {"off", "depth:1", "depth:2", "budget:1K"}) {
    LoaderOptions o = options_for(c, path);
    o.prefetch = policy;
    o.memory_budget = 2048;
    auto loader = Loader::create(o).value();
    ASSERT_TRUE(loader->start_epoch(0).ok());
    std::vector<std::shared_ptr<const Batch>> kept;
    while (auto b = loader->next().value()) kept.push_back(b);
    EXPECT_EQ(kept.size(), 9u) << policy;
  }
}

TEST(Loader, RaggedSamplesGiveOffsetsAndShapes) {
  const std::string root = scratch_dir();
  // Two NPZ files whose samples have different shapes.
  for (int f = 0; f < 2; ++f) {
    gen::FileSpec spec;
    spec.path = absl::StrCat(root, "/part", f, ".npz");
    spec.sample_shape = f == 0 ? Shape{2, 3} : Shape{4, 1};
    spec.num_samples = 3;
    spec.first_global_id = f * 3;
    ASSERT_TRUE(gen::write_npz_file(spec).ok());
  }
  LoaderOptions o;
  o.paths = {root};
  o.batch_size = 6;
  // Refused unless asked for, naming both files and shapes: never ragged by surprise.
  auto refused = Loader::create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  const std::string msg(refused.status().message());
  EXPECT_NE(msg.find("sample 0 of " + root + "/part0.npz has shape (2, 3) but sample 0 of"), std::string::npos) << msg;
  EXPECT_NE(msg.find("part1.npz has shape (4, 1)"), std::string::npos) << msg;
  o.ragged = true;
  auto loader = Loader::create(o).value();
  EXPECT_EQ(loader->field_specs()[0].shape, (Shape{-1, -1}));
  ASSERT_TRUE(loader->start_epoch(0).ok());
  auto b = loader->next().value();
  ASSERT_NE(b, nullptr);
  const BatchField& x = b->fields[0];
  EXPECT_TRUE(x.ragged());
  ASSERT_EQ(x.size(), 6u);
  EXPECT_EQ(x.sample_shapes[0], (Shape{2, 3}));
  EXPECT_EQ(x.sample_shapes[5], (Shape{4, 1}));
  EXPECT_EQ(x.sample(5).size(), 4u);
  EXPECT_EQ(loader->next().value(), nullptr);
}

TEST(Loader, ReadFailuresReachTheConsumerWithFileAndOffset) {
  const std::string root = scratch_dir();
  for (IoKind io : backends()) {
    for (bool remove : {false, true}) {
      const DatasetCase& c = kDatasets[0];
      const std::string path = make_dataset(c, root + (remove ? "/rm" : "/cut") + std::to_string(int(io)));
      LoaderOptions o = options_for(c, path);
      o.io.kind = io;
      auto loader = Loader::create(o).value();
      const std::string victim = loader->index().files[3];
      if (remove) {
        std::filesystem::remove(victim);
      } else {
        ASSERT_EQ(::truncate(victim.c_str(), 100), 0);
      }
      ASSERT_TRUE(loader->start_epoch(0).ok());
      absl::Status error;
      int batches = 0;
      while (true) {
        auto b = loader->next();
        if (!b.ok()) {
          error = b.status();
          break;
        }
        if (!*b) break;
        ++batches;
      }
      ASSERT_FALSE(error.ok()) << "no error after " << batches << " batches";
      EXPECT_NE(std::string(error.message()).find(victim), std::string::npos) << error;
      if (!remove) EXPECT_NE(std::string(error.message()).find("offset"), std::string::npos) << error;
      // After an error the epoch is over; a new one can start (and fails again).
      EXPECT_EQ(loader->next().value(), nullptr);
    }
  }
}

// dlfeed's own threads (named "dlfeed-..."); oneTBB's worker pool is shared
// by the process and comes and goes on its own schedule.
int count_dlfeed_threads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string name;
      std::getline(comm, name);
      n += name.rfind("dlfeed", 0) == 0;
    }
    closedir(d);
  }
  return n;
}

// The names of dlfeed's threads still running, for a failure message.
std::string dlfeed_thread_names() {
  std::string names;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string name;
      std::getline(comm, name);
      if (name.rfind("dlfeed", 0) == 0) names += " " + name;
    }
    closedir(d);
  }
  return "threads:" + names;
}

int count_fds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

TEST(Loader, DestroyedMidEpochLeavesNoThreadOrDescriptor) {
  const std::string root = scratch_dir();
  const DatasetCase& c = kDatasets[3];
  const std::string path = make_dataset(c, root, 6, 50);
  {  // open and close once, so lazily created process-wide state exists before counting
    auto warm = Loader::create(options_for(c, path)).value();
    read_epoch(*warm, c, 0);
  }
  // A joined thread leaves /proc a moment after join(); on a loaded machine
  // (CI builds beside the tests) that moment was seen to pass 1 s. A thread
  // left behind for good still fails after 5 s.
  auto settle = [] {
    int left = count_dlfeed_threads();
    for (int i = 0; i < 500 && left > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      left = count_dlfeed_threads();
    }
    return left;
  };
  EXPECT_EQ(settle(), 0);
  const int fds = count_fds();
  for (IoKind io : backends()) {
    for (int taken : {0, 1, 5}) {
      LoaderOptions o = options_for(c, path);
      o.io.kind = io;
      o.io_engines = taken == 1 ? 1 : 3;  // several engines with reads in flight, too
      o.tuning.io_spread_always = taken == 5;
      auto loader = Loader::create(o).value();
      ASSERT_TRUE(loader->start_epoch(0).ok());
      std::shared_ptr<const Batch> kept;
      for (int i = 0; i < taken; ++i) kept = loader->next().value();
      EXPECT_GE(count_dlfeed_threads(), 1);  // the I/O engine (and the pipeline, pread workers)
      loader.reset();
      // A batch kept past its loader stays valid.
      if (kept) EXPECT_EQ(kept->fields[0].sample(0).size(), 120u);
    }
  }
  EXPECT_EQ(settle(), 0) << dlfeed_thread_names();  // no thread of dlfeed's left behind
  EXPECT_EQ(count_fds(), fds);
}

TEST(Loader, BatchesSpreadOverIoEnginesArriveExactlyOnceAndInOrder) {
  const std::string root = scratch_dir();
  for (const DatasetCase& c : {kDatasets[3], kDatasets[4]}) {  // HDF5 (direct reads), TFRecord (decoded)
    const std::string path = make_dataset(c, root, 5, 40);
    for (IoKind io : backends()) {
      LoaderOptions o = options_for(c, path);
      o.io.kind = io;
      o.io_engines = 3;
      o.tuning.io_spread_always = true;
      o.order.strategy = "global_shuffle";
      o.order.seed = 3;
      auto loader = Loader::create(o);
      ASSERT_TRUE(loader.ok()) << loader.status();
      for (uint64_t epoch : {0, 1}) {
        OrderSpec spec;
        spec.strategy = "global_shuffle";
        spec.seed = 3;
        spec.epoch = epoch;
        EXPECT_EQ(read_epoch(**loader, c, epoch), rank_order(FileLayout::uniform(5, 40), spec).value())
            << c.name << " " << io_kind_name(io);
      }
      const LoaderStats st = (**loader).stats();
      EXPECT_EQ(st.io_engines, 3u);
      EXPECT_EQ(st.batches_spread, 2u * 33)
          << "of 50 batches an epoch, those not numbered 0 mod 3 go to the other engines";
      EXPECT_EQ(st.batches, 100u);
    }
  }
}

TEST(Loader, ReadsThatAreNotPageCacheHitsStayOnTheFirstEngine) {
  // The thread pool completes no read inside submit() (IoStats::completed_at_submit
  // stays 0), so however busy its engine, batches never spread.
  const std::string root = scratch_dir();
  const DatasetCase& c = kDatasets[3];
  const std::string path = make_dataset(c, root, 4, 200);
  LoaderOptions o = options_for(c, path);
  o.io.kind = IoKind::kThreadPool;
  o.io_engines = 2;
  auto loader = Loader::create(o).value();
  for (uint64_t epoch : {0, 1, 2}) read_epoch(*loader, c, epoch);
  EXPECT_EQ(loader->stats().io_engines, 2u);
  EXPECT_EQ(loader->stats().batches_spread, 0u);
  // With an io_factory the default is one engine.
  o.io_engines = 0;
  o.io_factory = [](std::shared_ptr<FileTable> files, const IoOptions& io) { return make_io_backend(files, io); };
  EXPECT_EQ(Loader::create(o).value()->stats().io_engines, 1u);
}

TEST(Loader, RangeForOverEpochs) {
  const std::string root = scratch_dir();
  const DatasetCase& c = kDatasets[4];
  const std::string path = make_dataset(c, root);
  LoaderOptions o = options_for(c, path);
  o.order.strategy = "file_shuffle";
  auto loader = Loader::create(o).value();
  for (uint64_t e = 0; e < 2; ++e) {
    uint64_t n = 0;
    for (const auto& batch : loader->epoch(e)) n += batch->size();
    EXPECT_EQ(n, 35u);
  }
  EXPECT_EQ(loader->batches_per_epoch(), 9u);
  EXPECT_EQ(loader->field_names(), (std::vector<std::string>{"image", "label"}));
}

}  // namespace
}  // namespace dlfeed
