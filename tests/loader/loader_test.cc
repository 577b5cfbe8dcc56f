// SPDX-License-Identifier: Apache-2.0
// The loader end to end: every sample exactly once and byte-exact for every
// format, backend, strategy and world size; resume, prefetch and coalescing,
// the memory budget, direct reads into the batch, ragged samples, I/O engines.
#include "dlfeed/loader_state.h"
#include "loader_fixture.h"

namespace dlfeed {
namespace {

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
  // state() right after restore(), before its epoch starts, is the restored
  // position (a checkpoint taken then resumes there), not where the loader
  // was; and a restore given up for another epoch leaves its epoch whole
  // (found by outside testing: the old state, and 4 samples skipped).
  {
    auto first = Loader::create(o).value();
    ASSERT_TRUE(first->start_epoch(1).ok());
    std::vector<uint64_t> got;
    for (int b = 0; b < 2; ++b) {
      auto batch = first->next().value();
      got.insert(got.end(), batch->sample_ids.begin(), batch->sample_ids.end());
    }
    const std::string state = first->state();
    auto busy = Loader::create(o).value();
    ASSERT_TRUE(busy->start_epoch(0).ok());
    ASSERT_NE(busy->next().value(), nullptr);  // partway through epoch 0
    ASSERT_TRUE(busy->restore(state).ok());
    const std::string again = busy->state();
    EXPECT_EQ(decode_loader_state(again).value().order.position, got.size());
    EXPECT_EQ(decode_loader_state(again).value().order.spec.epoch, 1u);
    auto third = Loader::create(o).value();
    ASSERT_TRUE(third->restore(again).ok());
    std::vector<uint64_t> rest = read_epoch(*third, c, 1);
    std::vector<uint64_t> joined = got;
    joined.insert(joined.end(), rest.begin(), rest.end());
    EXPECT_EQ(joined, all) << "resumed from the state taken right after a restore";
    EXPECT_EQ(read_epoch(*busy, c, 2).size(), all.size()) << "another epoch: the restore is given up";
    EXPECT_EQ(read_epoch(*busy, c, 1), all) << "then epoch 1 is whole";
  }
  // A state from another seed is refused.
  LoaderOptions other = o;
  other.order.seed = 4;
  auto wrong = Loader::create(other).value();
  EXPECT_FALSE(wrong->restore(full->state()).ok());
  EXPECT_FALSE(wrong->restore("garbage").ok());
}

// AdvancedOptions::before_first_epoch: called once, by the first
// start_epoch, with its epoch, the restored global_start and the position;
// an error ends that start_epoch and the next one asks again.
TEST(Loader, BeforeFirstEpochSeesWhereTheLoaderStarts) {
  const std::string root = scratch_dir();
  const DatasetCase& c = kDatasets[0];
  const std::string path = make_dataset(c, root);
  LoaderOptions o = options_for(c, path);
  o.order.strategy = "global_shuffle";
  o.order.seed = 5;
  o.order.world_size = 2;
  o.batch_size = 2;
  std::string state;
  {
    auto first = Loader::create(o).value();
    ASSERT_TRUE(first->start_epoch(3).ok());
    for (int b = 0; b < 2; ++b) ASSERT_NE(first->next().value(), nullptr);
    state = first->state();
  }
  struct Call {
    uint64_t epoch, global_start, world_size, position;
  };
  std::vector<Call> calls;
  int refuse = 1;
  LoaderOptions four = o;
  four.order.world_size = 4;  // an elastic restart: the rest of epoch 3 from global position 2 * 2 * 2
  four.advanced.before_first_epoch = [&](const OrderSpec& spec, uint64_t position) -> absl::Status {
    calls.push_back({spec.epoch, spec.global_start, spec.world_size, position});
    if (refuse-- > 0) return absl::UnavailableError("not yet");
    return absl::OkStatus();
  };
  auto loader = Loader::create(four).value();
  EXPECT_TRUE(calls.empty()) << "not called by create";
  ASSERT_TRUE(loader->restore(state).ok());
  const absl::Status refused = loader->start_epoch(3);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  // Started again: the restore is still pending after the refused start.
  const std::vector<uint64_t> rest = read_epoch(*loader, c, 3);
  EXPECT_FALSE(rest.empty());
  EXPECT_LT(rest.size(), loader->samples_per_epoch()) << "resumed, not from the epoch's start";
  EXPECT_EQ(read_epoch(*loader, c, 4).size(), loader->samples_per_epoch());
  ASSERT_EQ(calls.size(), 2u) << "once it succeeded, never again";
  for (const Call& k : calls) {
    EXPECT_EQ(k.epoch, 3u);
    EXPECT_EQ(k.global_start, 8u);
    EXPECT_EQ(k.world_size, 4u);
    EXPECT_EQ(k.position, 0u);
  }
  // The same world size resumes at the rank's position instead.
  calls.clear();
  refuse = 0;
  LoaderOptions two = o;
  two.advanced.before_first_epoch = four.advanced.before_first_epoch;
  auto same = Loader::create(two).value();
  ASSERT_TRUE(same->restore(state).ok());
  ASSERT_TRUE(same->start_epoch(3).ok());
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].global_start, 0u);
  EXPECT_EQ(calls[0].position, 4u);
  // A start past the epoch's end fails before the hook: the next good start
  // is the first. Epochs that follow, chained ahead (overlap_epochs), never call it.
  calls.clear();
  auto at = Loader::create(two).value();
  at->set_overlap_epochs(true);
  EXPECT_FALSE(at->start_epoch_at(1, 1u << 30).ok());
  EXPECT_TRUE(calls.empty());
  ASSERT_TRUE(at->start_epoch_at(1, 2).ok());
  while (true) {
    auto b = at->next();
    ASSERT_TRUE(b.ok()) << b.status();
    if (*b == nullptr) break;
  }
  for (uint64_t e : {2u, 3u, 4u}) EXPECT_EQ(read_epoch(*at, c, e).size(), at->samples_per_epoch());
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].epoch, 1u);
  EXPECT_EQ(calls[0].position, 2u);
}

TEST(Loader, PrefetchPoliciesAndCoalescingDeliverTheSameData) {
  const std::string root = scratch_dir();
  const DatasetCase& c = kDatasets[3];  // hdf5
  const std::string path = make_dataset(c, root);
  std::vector<uint64_t> reference;
  for (const char* policy : {"off", "depth:1", "depth:16", "budget:4K", "budget:64M"}) {
    for (bool coalesce : {false, true}) {
      LoaderOptions o = options_for(c, path);
      o.advanced.prefetch = policy;
      o.advanced.coalesce.enabled = coalesce;
      o.order.strategy = "block_shuffle";
      o.order.params.block_size = 3;
      auto loader = Loader::create(o).value();
      std::vector<uint64_t> ids = read_epoch(*loader, c, 0);
      if (reference.empty()) reference = ids;
      EXPECT_EQ(ids, reference) << policy;
      const LoaderStats s = loader->stats();
      if (!coalesce) {
        EXPECT_EQ(s.planned_reads, s.extents) << policy;
      } else {
        EXPECT_LT(s.planned_reads, s.extents) << policy;  // neighbours merged
      }
    }
  }
  auto bad = LoaderOptions(options_for(c, path));
  bad.advanced.prefetch = "sometimes";
  EXPECT_FALSE(Loader::create(bad).ok());
}

TEST(Loader, MemoryBudgetBoundsBatchesInFlight) {
  const std::string root = scratch_dir();
  const DatasetCase& c = kDatasets[0];
  const std::string path = make_dataset(c, root, 4, 64);
  LoaderOptions o = options_for(c, path);
  o.advanced.prefetch = "depth:64";
  o.advanced.coalesce.enabled = false;
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
        EXPECT_LT(st.planned_reads, 30u) << format_name(format);
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
    o.advanced.prefetch = policy;
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

TEST(Loader, BatchesSpreadOverIoEnginesArriveExactlyOnceAndInOrder) {
  const std::string root = scratch_dir();
  for (const DatasetCase& c : {kDatasets[3], kDatasets[4]}) {  // HDF5 (direct reads), TFRecord (decoded)
    const std::string path = make_dataset(c, root, 5, 40);
    for (IoKind io : backends()) {
      LoaderOptions o = options_for(c, path);
      o.io.kind = io;
      o.advanced.io_engines = 3;
      o.advanced.tuning.io_spread_always = true;
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
  o.advanced.io_engines = 2;
  auto loader = Loader::create(o).value();
  for (uint64_t epoch : {0, 1, 2}) read_epoch(*loader, c, epoch);
  EXPECT_EQ(loader->stats().io_engines, 2u);
  EXPECT_EQ(loader->stats().batches_spread, 0u);
  // With an io_factory the default is one engine.
  o.advanced.io_engines = 0;
  o.advanced.io_factory = [](std::shared_ptr<FileTable> files, const IoOptions& io) {
    return make_io_backend(files, io);
  };
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
