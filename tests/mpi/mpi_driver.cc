// SPDX-License-Identifier: Apache-2.0
// dlfeed::mpi under a real MPI launcher (registered in ctest with label mpi):
//   mpirun -np 4 mpi_driver --gtest_filter=-Elastic.ResumeOnThreeRanks
//   mpirun -np 3 mpi_driver --gtest_filter=Elastic.ResumeOnThreeRanks
// Every rank runs every test; collectives are reached on every rank whatever
// the checks found (EXPECT, not ASSERT, before a collective), and the exit
// status is the worst over the ranks.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dev/generate.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/loader.h"
#include "dlfeed/mpi/job_cache.h"
#include "dlfeed/mpi/mpi.h"
#include "gtest/gtest.h"
#include "support/dataset.h"

namespace dlfeed {
namespace {

namespace fs = std::filesystem;

mpi::Job* g_job = nullptr;

constexpr uint64_t kSeed = 17;
constexpr uint64_t kFiles = 8, kPerFile = 15, kN = kFiles * kPerFile;  // 120
const Shape kShape{4, 3};

std::string work_dir() { return std::string(DLFEED_TEST_TMPDIR) + "/mpi"; }

// The dataset, written once by rank 0 (deterministic, so a later job finds
// the same one), then everyone sees it.
std::string dataset() {
  const std::string dir = work_dir() + "/data";
  if (g_job->rank() == 0 && !fs::exists(dir + "/done")) {
    auto w = testing::write_generated(
        testing::dataset_spec(dir, FileFormat::kNpz, kFiles, kPerFile, kShape, DType::f32(), kSeed));
    EXPECT_TRUE(w.ok()) << w.status();
    std::ofstream(dir + "/done") << "ok";
  }
  EXPECT_TRUE(g_job->barrier().ok());
  return dir;
}

std::string expected_bytes(uint64_t id) { return testing::expected_sample(kSeed, id, DType::f32(), kShape); }

LoaderOptions options(const std::string& path, const std::string& strategy) {
  LoaderOptions o;
  o.paths = {path};
  o.fields = {"x"};
  o.batch_size = 4;
  o.threads = 2;
  o.order.strategy = strategy;
  o.order.seed = 33;
  o.order.params.block_size = 5;
  o.order.params.window = 3;
  o.order.params.buffer_size = 20;
  if (strategy == "explicit") {
    auto idx = std::make_shared<std::vector<uint64_t>>();
    for (uint64_t i = kN; i-- > 0;) idx->push_back(i);
    o.order.params.indices = idx;
  }
  g_job->configure(o);
  return o;
}

// Reads up to `batches` batches (all when negative) of the running epoch,
// checking every sample's bytes; returns the ids, and adds an
// order-independent hash of (id, bytes) to `hash`.
std::vector<uint64_t> read(Loader& l, int batches, uint64_t* hash = nullptr) {
  std::vector<uint64_t> ids;
  for (int b = 0; batches < 0 || b < batches; ++b) {
    auto batch = l.next();
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok() || !*batch) break;
    for (size_t i = 0; i < (*batch)->size(); ++i) {
      const uint64_t id = (*batch)->sample_ids[i];
      ids.push_back(id);
      const auto d = (*batch)->fields[0].sample(i);
      const std::string bytes(reinterpret_cast<const char*>(d.data()), d.size());
      EXPECT_EQ(bytes, expected_bytes(id)) << "rank " << g_job->rank() << " sample " << id;
      if (hash) *hash += std::hash<std::string>()(bytes) * 0x9E3779B97F4A7C15ull + id;
    }
  }
  return ids;
}

std::string encode_ids(const std::vector<uint64_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
}
std::vector<uint64_t> decode_ids(const std::string& s) {
  std::vector<uint64_t> ids(s.size() / 8);
  std::memcpy(ids.data(), s.data(), ids.size() * 8);
  return ids;
}

// Every rank's ids on rank 0, as one multiset.
std::multiset<uint64_t> gather_ids(const std::vector<uint64_t>& mine) {
  auto all = g_job->gather(encode_ids(mine));
  EXPECT_TRUE(all.ok()) << all.status();
  std::multiset<uint64_t> out;
  if (all.ok()) {
    for (const std::string& s : *all) {
      const auto ids = decode_ids(s);
      out.insert(ids.begin(), ids.end());
    }
  }
  return out;
}

void expect_each_once(const std::multiset<uint64_t>& seen, const std::string& what) {
  EXPECT_EQ(seen.size(), kN) << what;
  for (uint64_t id = 0; id < kN; ++id) EXPECT_EQ(seen.count(id), 1u) << what << ": sample " << id;
}

TEST(Shards, DisjointAndCoveringForEveryStrategy) {
  const std::string path = dataset();
  for (const std::string& strategy : strategy_names()) {
    auto loader = Loader::create(options(path, strategy));
    EXPECT_TRUE(loader.ok()) << strategy << ": " << loader.status();
    std::vector<uint64_t> ids;
    if (loader.ok()) {
      EXPECT_TRUE((*loader)->start_epoch(1).ok());
      ids = read(**loader, -1);
      EXPECT_EQ(ids.size(), kN / g_job->size()) << strategy;
    }
    const std::multiset<uint64_t> seen = gather_ids(ids);
    if (g_job->rank() == 0) expect_each_once(seen, strategy);
  }
}

// share_index: the job opens and stats each file once (on rank 0), not
// once per rank: the ranks given the index do no per-file metadata
// operation at create (the file table takes the sizes and identities that
// came with the index; files open when first read). Every rank still reads
// exactly its shard's samples.
TEST(ShareIndex, OneRankOpensTheFilesForTheJob) {
  const std::string path = dataset();
  struct MetadataOps {
    uint64_t opens = 0, stats = 0;
  };
  auto ops_of_create = [&](bool share, std::unique_ptr<Loader>* out) {
    LoaderOptions o = options(path, "global_shuffle");
    // (resident auto: the files are held in memory, read once through the
    // file table, whose opens are reads and not counted here; their sizes
    // come from the index too.)
    if (share) g_job->share_index(o);
    const uint64_t opens0 = detail::file_opens(), stats0 = detail::file_stats();
    auto loader = Loader::create(o);
    EXPECT_TRUE(loader.ok()) << loader.status();
    MetadataOps ops{detail::file_opens() - opens0, detail::file_stats() - stats0};
    if (loader.ok() && out) *out = std::move(*loader);
    return ops;
  };
  // Without it: every rank opens every file (the job: ranks x files). Its
  // identity is the fstat of that open: no stat by path after it.
  const MetadataOps plain = ops_of_create(false, nullptr);
  EXPECT_GE(plain.opens, kFiles);
  EXPECT_EQ(g_job->sum(plain.opens), static_cast<uint64_t>(g_job->size()) * plain.opens);
  // With it: rank 0 opens them, the others none; the job's opens are one rank's.
  std::unique_ptr<Loader> loader;
  const MetadataOps shared = ops_of_create(true, &loader);
  if (g_job->rank() == 0) {
    EXPECT_EQ(shared.opens, plain.opens);
  } else {
    EXPECT_EQ(shared.opens, 0u) << "rank " << g_job->rank();
    EXPECT_EQ(shared.stats, 0u) << "rank " << g_job->rank() << " stat'ed files it was given the index of";
  }
  EXPECT_EQ(g_job->sum(shared.opens), plain.opens);
  EXPECT_LE(g_job->sum(shared.stats), 2 * kFiles) << "the job's stats grow with its ranks";
  ASSERT_TRUE(loader);
  EXPECT_EQ(loader->num_samples(), kN);
  ASSERT_TRUE(loader->start_epoch(0).ok());
  const std::multiset<uint64_t> seen = gather_ids(read(*loader, -1));
  if (g_job->rank() == 0) expect_each_once(seen, "shared index");

  // A missing path fails on every rank with the root's error.
  LoaderOptions bad = options(path + "/missing", "sequential");
  g_job->share_index(bad);
  auto failed = Loader::create(bad);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(std::string(failed.status().message()).find("missing"), std::string::npos) << failed.status();
}

TEST(Reduce, JobSummaryIsTheReductionOfTheRanks) {
  const std::string path = dataset();
  auto loader = Loader::create(options(path, "global_shuffle")).value();
  for (uint64_t e = 0; e < 2; ++e) {
    EXPECT_TRUE(g_job->barrier().ok());
    EXPECT_TRUE(loader->start_epoch(e).ok());
    while (true) {
      auto b = loader->next();
      if (!b.ok() || !*b) break;
      {
        counters::ScopedTimer t(loader->counters());  // ranks compute for different times
        std::this_thread::sleep_for(std::chrono::microseconds(300 * (g_job->rank() + 1)));
      }
      EXPECT_TRUE(g_job->step_barrier(loader->counters()).ok());
    }
  }
  const counters::Snapshot mine = loader->counters_snapshot();
  auto bytes = g_job->gather(mine.serialize());
  auto job = g_job->reduce(mine);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(bytes.ok());
  if (g_job->rank() != 0) {
    EXPECT_EQ(job->to_json(), mine.to_json());  // the others get their own back
    return;
  }
  std::vector<counters::Snapshot> ranks;
  for (const std::string& s : *bytes) ranks.push_back(counters::Snapshot::deserialize(s).value());
  const int n = g_job->size();
  EXPECT_EQ(job->ranks, static_cast<uint32_t>(n));
  ASSERT_EQ(job->rank_totals.size(), static_cast<size_t>(n));
  using counters::Id;
  for (Id id : {Id::kSamples, Id::kBytesRead, Id::kIoOperations, Id::kBarrier, Id::kCompute, Id::kIoLatency}) {
    uint64_t value = 0, count = 0;
    std::map<uint16_t, uint64_t> hist;
    for (const auto& r : ranks) {
      value += r[id].value;
      count += r[id].count;
      for (const auto& [b, c] : r[id].dist.hist) hist[b] += c;
    }
    EXPECT_EQ((*job)[id].value, value) << counters::info(id).name;
    EXPECT_EQ((*job)[id].count, count) << counters::info(id).name;
    EXPECT_EQ((*job)[id].dist.hist, counters::Histogram(hist.begin(), hist.end())) << counters::info(id).name;
  }
  EXPECT_EQ((*job)[Id::kSamples].value, 2 * kN);
  EXPECT_EQ((*job)[Id::kBarrier].count, 2 * loader->batches_per_epoch() * n);  // one per step, epoch and rank
  ASSERT_EQ(job->epochs.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    double au = 0, au_min = 1e9, au_max = -1, sps = 0, wall = 0;
    for (const auto& r : ranks) {
      au += r.epochs[e].au_percent / n;
      au_min = std::min(au_min, r.epochs[e].au_percent);
      au_max = std::max(au_max, r.epochs[e].au_percent);
      sps += r.epochs[e].samples_per_s;
      wall = std::max(wall, r.epochs[e].wall_s);
    }
    EXPECT_NEAR(job->epochs[e].au_percent, au, 1e-9);
    EXPECT_DOUBLE_EQ(job->epochs[e].au_min_percent, au_min);
    EXPECT_DOUBLE_EQ(job->epochs[e].au_max_percent, au_max);
    EXPECT_NEAR(job->epochs[e].samples_per_s, sps, 1e-6);
    EXPECT_DOUBLE_EQ(job->epochs[e].wall_s, wall);
    EXPECT_EQ(job->epochs[e].samples, kN);
  }
}

TEST(Staging, CopiesMatchAndLaterEpochsReadThem) {
  // A private copy of the dataset: its sources are scrambled below.
  const std::string path = work_dir() + "/data_staging", stage = work_dir() + "/stage";
  if (g_job->rank() == 0) {
    fs::remove_all(stage);
    fs::remove_all(path);
    fs::copy(dataset(), path, fs::copy_options::recursive);
  } else {
    dataset();
  }
  EXPECT_TRUE(g_job->barrier().ok());
  LoaderOptions o = options(path, "global_shuffle");
  o.stage.dir = stage;
  auto loader = Loader::create(o).value();
  // What every epoch must hash to: each sample once, with its true bytes.
  uint64_t want = 0;
  for (uint64_t id = 0; id < kN; ++id)
    want += std::hash<std::string>()(expected_bytes(id)) * 0x9E3779B97F4A7C15ull + id;
  uint64_t hash[3] = {0, 0, 0};
  std::vector<uint64_t> ids[3];
  for (int e = 0; e < 3; ++e) {
    EXPECT_TRUE(loader->start_epoch(e).ok());
    ids[e] = read(*loader, -1, &hash[e]);  // byte-checked
    if (e == 0) {
      while (!loader->stats().stage.done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_TRUE(g_job->barrier().ok());  // every rank's copies are in place
      if (g_job->rank() == 0) {
        // Scramble the sources in place: from now on only the copies hold the data.
        for (const std::string& f : loader->index().files) {
          std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
          const std::string junk(fs::file_size(f), '\x5a');
          s.write(junk.data(), static_cast<std::streamsize>(junk.size()));
        }
      }
      EXPECT_TRUE(g_job->barrier().ok());
    }
  }
  const counters::Snapshot s = loader->counters_snapshot();
  for (int e = 0; e < 3; ++e) {
    const std::multiset<uint64_t> seen = gather_ids(ids[e]);
    const uint64_t h = g_job->sum(hash[e]);
    const uint64_t staged = g_job->sum(s.epochs[e].bytes_read_staged), read_bytes = g_job->sum(s.epochs[e].bytes_read);
    if (g_job->rank() != 0) continue;
    expect_each_once(seen, absl::StrCat("epoch ", e));
    EXPECT_EQ(h, want) << "epoch " << e;
    // (Epoch 0 may already find a copy another rank made as it began.)
    if (e > 0) EXPECT_EQ(staged, read_bytes) << "epoch " << e << ": every file has a copy on this node";
  }
  const uint64_t owned = (kFiles - static_cast<uint64_t>(g_job->rank()) + g_job->size() - 1) / g_job->size();
  EXPECT_EQ(loader->stats().stage.staged, owned);        // files rank, rank + W, ...
  EXPECT_EQ(loader->stats().files_read_staged, kFiles);  // its own and its neighbours' copies
}

// The job cache: every read of the files goes through a counting backend
// (JobCacheOptions::source); after the first epoch none may reach it, and
// every sample still has its true bytes.
class CountingBackend final : public IoBackend {
 public:
  CountingBackend(std::unique_ptr<IoBackend> inner, std::atomic<uint64_t>* bytes)
      : inner_(std::move(inner)), bytes_(bytes) {}
  absl::Status submit(std::span<const ReadRequest> requests) override {
    for (const ReadRequest& r : requests) bytes_->fetch_add(r.length);
    return inner_->submit(requests);
  }
  size_t reap(std::vector<ReadCompletion>& out, size_t min, std::chrono::nanoseconds timeout) override {
    return inner_->reap(out, min, timeout);
  }
  size_t in_flight() const override { return inner_->in_flight(); }
  std::string name() const override { return inner_->name(); }
  IoStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<IoBackend> inner_;
  std::atomic<uint64_t>* bytes_;
};

// Three epochs through a job cache with `ranks_per_node` (0: the ranks MPI
// finds on one machine, one node): every sample's bytes checked, the files
// read in epoch 0 only; the cache's stats.
mpi::JobCacheStats read_through_cache(int ranks_per_node) {
  const std::string path = dataset();
  LoaderOptions o = options(path, "global_shuffle");
  static std::atomic<uint64_t> from_files{0};
  from_files = 0;
  mpi::JobCacheOptions co;
  co.bytes_per_node = 8u << 20;
  co.ranks_per_node = ranks_per_node;
  co.source = [](std::shared_ptr<FileTable> files, IoOptions io) -> absl::StatusOr<std::unique_ptr<IoBackend>> {
    auto inner = make_io_backend(std::move(files), io);
    if (!inner.ok()) return inner.status();
    return std::unique_ptr<IoBackend>(std::make_unique<CountingBackend>(*std::move(inner), &from_files));
  };
  auto cache = mpi::JobCache::create(*g_job, co).value();
  EXPECT_TRUE(cache->attach(o).ok());
  EXPECT_EQ(cache->attach(o).code(), absl::StatusCode::kFailedPrecondition) << "one loader per cache";
  auto loader = Loader::create(o).value();
  uint64_t want = 0;
  for (uint64_t id = 0; id < kN; ++id)
    want += std::hash<std::string>()(expected_bytes(id)) * 0x9E3779B97F4A7C15ull + id;
  mpi::JobCacheStats after0;
  uint64_t files_after0 = 0;
  for (int e = 0; e < 3; ++e) {
    EXPECT_TRUE(g_job->barrier().ok());  // every rank has kept its part of the epoch before
    EXPECT_TRUE(loader->start_epoch(e).ok());
    uint64_t hash = 0;
    const std::vector<uint64_t> ids = read(*loader, -1, &hash);  // byte-checked
    const std::multiset<uint64_t> seen = gather_ids(ids);
    const uint64_t h = g_job->sum(hash);
    if (g_job->rank() == 0) {
      expect_each_once(seen, absl::StrCat("epoch ", e));
      EXPECT_EQ(h, want) << "epoch " << e;
    }
    if (e == 0) {
      after0 = cache->stats();
      files_after0 = from_files.load();
      EXPECT_GT(files_after0, 0u);
    }
  }
  EXPECT_EQ(from_files.load(), files_after0) << "no read of the files after epoch 0";
  const mpi::JobCacheStats st = cache->stats();
  EXPECT_EQ(st.bytes_read_source, after0.bytes_read_source) << "no read of the files after epoch 0";
  EXPECT_EQ(st.bytes_missed, 0u);
  EXPECT_EQ(st.held_bytes, st.dataset_bytes);
  EXPECT_EQ(st.bytes_kept, st.bytes_planned);
  const uint64_t kept = g_job->sum(st.bytes_kept);
  if (g_job->rank() == 0) EXPECT_EQ(kept, st.dataset_bytes) << "each extent held once in the job";
  loader.reset();
  EXPECT_TRUE(cache->close().ok());
  return st;
}

TEST(JobCache, LaterEpochsReadTheRanksMemoryNotTheFiles) {
  const mpi::JobCacheStats st = read_through_cache(2);
  EXPECT_EQ(st.nodes, (g_job->size() + 1) / 2);
  const uint64_t peers = g_job->sum(st.bytes_read_peers), node = g_job->sum(st.bytes_read_node);
  const uint64_t local = g_job->sum(st.bytes_read_local);
  if (g_job->rank() == 0) {
    EXPECT_GT(peers, 0u);
    EXPECT_GT(node, 0u);
    EXPECT_GT(local, 0u);
  }
}

TEST(JobCache, RanksOfOneNodeReadEachOthersSharesWithLoads) {
  const mpi::JobCacheStats st = read_through_cache(0);  // one machine: one node
  EXPECT_EQ(st.nodes, 1);
  EXPECT_EQ(st.node_loads, g_job->size() > 1);
  EXPECT_EQ(st.remote_gets, 0u) << "no MPI_Get within a node";
  EXPECT_EQ(st.bytes_read_peers, 0u);
  const uint64_t node = g_job->sum(st.bytes_read_node), local = g_job->sum(st.bytes_read_local);
  if (g_job->rank() == 0 && g_job->size() > 1) {
    EXPECT_GT(node, 0u);
    EXPECT_GT(local, 0u);
  }
}

// Elastic restart across two jobs: this one (4 ranks) reads 3 batches of
// epoch 2 and checkpoints; Elastic.ResumeOnThreeRanks (a 3-rank job) finishes it.
TEST(Elastic, CheckpointOnFourRanks) {
  if (g_job->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const std::string path = dataset();
  auto loader = Loader::create(options(path, "global_shuffle")).value();
  EXPECT_TRUE(loader->start_epoch(2).ok());
  const std::vector<uint64_t> ids = read(*loader, 3);
  EXPECT_EQ(ids.size(), 12u);
  const std::multiset<uint64_t> seen = gather_ids(ids);
  const std::string state = loader->state();
  auto states = g_job->gather(state);
  if (g_job->rank() == 0) {
    ASSERT_TRUE(states.ok());
    const std::vector<uint64_t> v(seen.begin(), seen.end());
    std::ofstream(work_dir() + "/elastic.ids", std::ios::binary) << encode_ids(v);
    std::ofstream(work_dir() + "/elastic.state", std::ios::binary) << (*states)[3];  // any rank's serves
  }
  EXPECT_TRUE(g_job->barrier().ok());
}

TEST(Elastic, ResumeOnThreeRanks) {
  if (g_job->size() != 3) GTEST_SKIP() << "needs 3 ranks (after Elastic.CheckpointOnFourRanks on 4)";
  const std::string path = dataset();
  std::ifstream f(work_dir() + "/elastic.state", std::ios::binary);
  const std::string state((std::istreambuf_iterator<char>(f)), {});
  EXPECT_FALSE(state.empty()) << "run Elastic.CheckpointOnFourRanks on 4 ranks first";
  auto loader = Loader::create(options(path, "global_shuffle")).value();
  EXPECT_TRUE(loader->restore(state).ok());
  EXPECT_TRUE(loader->start_epoch(2).ok());
  const std::vector<uint64_t> ids = read(*loader, -1);
  EXPECT_EQ(ids.size(), (kN - 48) / 3);  // equal shards of the rest
  const std::multiset<uint64_t> after = gather_ids(ids);
  if (g_job->rank() != 0) return;
  std::ifstream g(work_dir() + "/elastic.ids", std::ios::binary);
  const auto before = decode_ids(std::string((std::istreambuf_iterator<char>(g)), {}));
  EXPECT_EQ(before.size(), 48u);
  std::multiset<uint64_t> all(after);
  all.insert(before.begin(), before.end());
  expect_each_once(all, "4 ranks then 3");
}

// Non-root ranks print only their failures, prefixed with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
    }
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace dlfeed

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto job = dlfeed::mpi::Job::init();
  if (!job.ok()) {
    std::fprintf(stderr, "mpi_driver: %s\n", std::string(job.status().message()).c_str());
    return 1;
  }
  dlfeed::g_job = job->get();
  if ((*job)->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new dlfeed::RankFailurePrinter((*job)->rank()));
  }
  const int rc = RUN_ALL_TESTS();
  const uint64_t worst = (*job)->max(static_cast<uint64_t>(rc));
  job->reset();  // MPI_Finalize
  return static_cast<int>(worst);
}
