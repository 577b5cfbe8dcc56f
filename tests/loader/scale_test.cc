// SPDX-License-Identifier: Apache-2.0
// The loader at scale, without MPI: several Loader objects in one process
// stand for the ranks. Elastic restarts (a checkpoint at W ranks resumed at
// W' ranks) and node-local staging (LoaderOptions::stage).
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/loader.h"
#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed {
namespace {

using testing::read_all;
using testing::scratch_dir;
namespace fs = std::filesystem;

constexpr uint64_t kSeed = 9;
constexpr uint64_t kFiles = 8, kPerFile = 15, kN = kFiles * kPerFile;  // 120: divisible by 2, 3, 4
const Shape kShape{4, 3};

std::string make_dataset(const std::string& root) {
  auto written = testing::write_generated(
      testing::dataset_spec(root + "/data", FileFormat::kNpz, kFiles, kPerFile, kShape, DType::f32(), kSeed));
  EXPECT_TRUE(written.ok()) << written.status();
  return root + "/data";
}

std::string expected_bytes(uint64_t id) { return testing::expected_sample(kSeed, id, DType::f32(), kShape); }

LoaderOptions options(const std::string& path, const std::string& strategy, uint32_t rank, uint32_t world) {
  LoaderOptions o;
  o.paths = {path};
  o.fields = {"x"};
  o.batch_size = 4;
  o.threads = 2;
  o.order.strategy = strategy;
  o.order.seed = 21;
  o.order.rank = rank;
  o.order.world_size = world;
  o.order.params.block_size = 5;
  o.order.params.window = 3;
  o.order.params.buffer_size = 20;
  return o;
}

// Appends up to `batches` batches (all when negative) of the running epoch to
// `ids`, checking every sample's bytes.
void read_batches(Loader& l, int batches, std::vector<uint64_t>& ids) {
  for (int b = 0; batches < 0 || b < batches; ++b) {
    auto batch = l.next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    if (!*batch) return;
    for (size_t i = 0; i < (*batch)->size(); ++i) {
      const uint64_t id = (*batch)->sample_ids[i];
      ids.push_back(id);
      const auto data = (*batch)->fields[0].sample(i);
      ASSERT_EQ(std::string(reinterpret_cast<const char*>(data.data()), data.size()), expected_bytes(id))
          << "sample " << id;
    }
  }
}

std::vector<std::unique_ptr<Loader>> ranks(const std::string& path, const std::string& strategy, uint32_t world,
                                           bool drop_last = false) {
  std::vector<std::unique_ptr<Loader>> out;
  for (uint32_t r = 0; r < world; ++r) {
    LoaderOptions o = options(path, strategy, r, world);
    o.order.drop_last = drop_last;
    auto l = Loader::create(o);
    EXPECT_TRUE(l.ok()) << l.status();
    out.push_back(*std::move(l));
  }
  return out;
}

const char* const kStrided[] = {"sequential",    "file_shuffle",   "buffered_shuffle",
                                "block_shuffle", "global_shuffle", "global_feistel"};

TEST(Elastic, FourRanksCheckpointedResumeOnThreeThenTwoWithEverySampleOnce) {
  const std::string path = make_dataset(scratch_dir());
  for (const char* strategy : kStrided) {
    SCOPED_TRACE(strategy);
    const uint64_t epoch = 3;
    std::multiset<uint64_t> seen;
    // 4 ranks, 3 batches of 4 each: the job consumed global positions [0, 48).
    auto four = ranks(path, strategy, 4);
    std::vector<std::string> states;
    for (auto& l : four) {
      ASSERT_TRUE(l->start_epoch(epoch).ok());
      std::vector<uint64_t> ids;
      read_batches(*l, 3, ids);
      seen.insert(ids.begin(), ids.end());
      states.push_back(l->state());
    }
    four.clear();
    // 3 ranks, from rank 2's state (any rank's serves): 72 left, 24 each.
    auto three = ranks(path, strategy, 3);
    std::vector<std::string> states3;
    for (size_t r = 0; r < three.size(); ++r) {
      ASSERT_TRUE(three[r]->restore(states[2]).ok());
      ASSERT_TRUE(three[r]->start_epoch(epoch).ok());
      std::vector<uint64_t> ids;
      read_batches(*three[r], 2, ids);  // 8 each: consumed [0, 72)
      EXPECT_EQ(ids.size(), 8u);
      seen.insert(ids.begin(), ids.end());
      states3.push_back(three[r]->state());
    }
    // Rank 0's and rank 3's states resume the same way as rank 2's.
    {
      auto a = ranks(path, strategy, 3), b = ranks(path, strategy, 3);
      ASSERT_TRUE(a[1]->restore(states[0]).ok());
      ASSERT_TRUE(b[1]->restore(states[3]).ok());
      // A state taken right after the restore (before its epoch starts) keeps where it resumes, the
      // global start included: a third loader resumes the same way.
      auto c = ranks(path, strategy, 3);
      ASSERT_TRUE(c[1]->restore(b[1]->state()).ok());
      ASSERT_TRUE(a[1]->start_epoch(epoch).ok());
      ASSERT_TRUE(b[1]->start_epoch(epoch).ok());
      ASSERT_TRUE(c[1]->start_epoch(epoch).ok());
      std::vector<uint64_t> ia, ib, ic;
      read_batches(*a[1], -1, ia);
      read_batches(*b[1], -1, ib);
      read_batches(*c[1], -1, ic);
      EXPECT_EQ(ia.size(), 24u);
      EXPECT_EQ(ia, ib);
      EXPECT_EQ(ic, ia);
    }
    three.clear();
    // 2 ranks, from the 3-rank job's state: 48 left, 24 each.
    auto two = ranks(path, strategy, 2);
    for (auto& l : two) {
      ASSERT_TRUE(l->restore(states3[0]).ok());
      ASSERT_TRUE(l->start_epoch(epoch).ok());
      std::vector<uint64_t> ids;
      read_batches(*l, -1, ids);
      EXPECT_EQ(ids.size(), 24u);
      seen.insert(ids.begin(), ids.end());
      // The next epoch is whole again.
      std::vector<uint64_t> next;
      ASSERT_TRUE(l->start_epoch(epoch + 1).ok());
      read_batches(*l, -1, next);
      EXPECT_EQ(next.size(), kN / 2);
    }
    ASSERT_EQ(seen.size(), kN);
    for (uint64_t id = 0; id < kN; ++id) EXPECT_EQ(seen.count(id), 1u) << "sample " << id;
  }
}

TEST(Elastic, SameRankAndWorldStillResumesExactly) {
  const std::string path = make_dataset(scratch_dir());
  auto a = ranks(path, "global_shuffle", 3);
  ASSERT_TRUE(a[1]->start_epoch(0).ok());
  std::vector<uint64_t> head, rest, all;
  read_batches(*a[1], 2, head);
  const std::string st = a[1]->state();
  auto b = ranks(path, "global_shuffle", 3);
  ASSERT_TRUE(b[1]->restore(st).ok());
  ASSERT_TRUE(b[1]->start_epoch(0).ok());
  read_batches(*b[1], -1, rest);
  head.insert(head.end(), rest.begin(), rest.end());
  auto c = ranks(path, "global_shuffle", 3);
  ASSERT_TRUE(c[1]->start_epoch(0).ok());
  read_batches(*c[1], -1, all);
  EXPECT_EQ(head, all);
}

TEST(Elastic, UnevenRemaindersPadOrDropAsAWholeEpochWould) {
  const std::string path = make_dataset(scratch_dir());
  for (bool drop_last : {true, false}) {
    SCOPED_TRACE(drop_last ? "drop_last" : "padding");
    std::multiset<uint64_t> seen;
    auto four = ranks(path, "global_shuffle", 4, drop_last);
    std::string state;
    for (auto& l : four) {
      ASSERT_TRUE(l->start_epoch(0).ok());
      std::vector<uint64_t> ids;
      read_batches(*l, 3, ids);
      seen.insert(ids.begin(), ids.end());
      state = l->state();
    }
    // 72 left on 7 ranks: 10 each with drop_last (2 dropped), 11 with padding
    // (5 repeats of the global order's first positions, read before).
    auto seven = ranks(path, "global_shuffle", 7, drop_last);
    std::vector<uint64_t> after;
    for (auto& l : seven) {
      ASSERT_TRUE(l->restore(state).ok());
      ASSERT_TRUE(l->start_epoch(0).ok());
      std::vector<uint64_t> ids;
      read_batches(*l, -1, ids);
      EXPECT_EQ(ids.size(), drop_last ? 10u : 11u);
      after.insert(after.end(), ids.begin(), ids.end());
    }
    OrderSpec spec = options(path, "global_shuffle", 0, 1).order;
    auto global = rank_order(FileLayout::uniform(kFiles, kPerFile), spec).value();  // the epoch's global order
    std::multiset<uint64_t> repeats;
    for (uint64_t id : after) {
      if (seen.count(id)) repeats.insert(id);
      seen.insert(id);
    }
    if (drop_last) {
      EXPECT_TRUE(repeats.empty());
      EXPECT_EQ(seen.size(), kN - 2);
      EXPECT_EQ(seen.count(global[kN - 1]) + seen.count(global[kN - 2]), 0u);  // the last two positions
    } else {
      EXPECT_EQ(repeats, std::multiset<uint64_t>(global.begin(), global.begin() + 5));
      EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()).size(), kN);
    }
  }
}

TEST(Elastic, LocalShuffleCannotChangeWorldMidEpoch) {
  const std::string path = make_dataset(scratch_dir());
  auto four = ranks(path, "local_shuffle", 4);
  const std::string at_start = four[0]->state();  // nothing read yet
  ASSERT_TRUE(four[0]->start_epoch(0).ok());
  std::vector<uint64_t> ids;
  read_batches(*four[0], 1, ids);
  auto three = ranks(path, "local_shuffle", 3);
  const absl::Status st = three[0]->restore(four[0]->state());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("partitions samples by rank"), std::string::npos) << st;
  EXPECT_NE(st.message().find("saved by rank 0 of 4, restored on rank 0 of 3"), std::string::npos) << st;
  // At an epoch boundary any world size may take over.
  EXPECT_TRUE(three[0]->restore(at_start).ok());
  // Another strategy's state is refused whatever the world size.
  auto other = ranks(path, "global_shuffle", 3);
  EXPECT_EQ(other[0]->restore(at_start).code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- staging

// Polls the loader's stager until it is done (it copies in the background).
void wait_staged(const Loader& l) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!l.stats().stage.done && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(l.stats().stage.done) << "staging did not finish";
}

TEST(Staging, SameBatchesAsWithoutAndLaterEpochsReadTheCopies) {
  const std::string root = scratch_dir();
  const std::string path = make_dataset(root);
  LoaderOptions plain = options(path, "global_shuffle", 0, 1);
  LoaderOptions staged = plain;
  staged.stage.dir = root + "/stage";
  auto ref = Loader::create(plain).value();
  auto l = Loader::create(staged).value();
  for (uint64_t e = 0; e < 3; ++e) {
    std::vector<uint64_t> a, b;
    ASSERT_TRUE(ref->start_epoch(e).ok());
    ASSERT_TRUE(l->start_epoch(e).ok());
    read_batches(*ref, -1, a);
    read_batches(*l, -1, b);  // byte-checked
    EXPECT_EQ(a, b) << "epoch " << e;
    if (e == 0) wait_staged(*l);
  }
  const counters::Snapshot s = l->counters_snapshot();
  ASSERT_EQ(s.epochs.size(), 3u);
  EXPECT_EQ(s.epochs[0].bytes_read_staged, 0u);  // nothing was staged when epoch 0 began
  EXPECT_GT(s.epochs[0].bytes_read, 0u);
  for (int e : {1, 2}) {
    EXPECT_EQ(s.epochs[e].bytes_read_staged, s.epochs[e].bytes_read) << "epoch " << e;
    EXPECT_EQ(s.epochs[e].bytes_staged, 0u);
  }
  const LoaderStats st = l->stats();
  EXPECT_EQ(st.stage.files, kFiles);  // one rank owns every file
  EXPECT_EQ(st.stage.staged, kFiles);
  EXPECT_EQ(st.files_read_staged, kFiles);
  EXPECT_EQ(s[counters::Id::kStageCopied].value, st.stage.bytes_copied);
  EXPECT_EQ(st.stage.bytes_copied, st.stage.bytes_staged);
  // Every copy is the source's bytes.
  for (const std::string& f : l->index().files) {
    struct stat st {};
    ASSERT_EQ(::stat(f.c_str(), &st), 0);
    const std::string copy =
        staging::Stager::find_copy(root + "/stage", {f, fs::file_size(f), detail::identity_of(st)});
    ASSERT_FALSE(copy.empty()) << f;
    EXPECT_EQ(read_all(copy), read_all(f)) << f;
  }
  EXPECT_NE(s.summary_table().find("staging, epoch 1: read "), std::string::npos) << s.summary_table();
}

// Overwrites every byte of a file in place (same inode, same size), so a
// reader still holding the old file would see the damage.
void scramble(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  const std::string junk(fs::file_size(path), '\x5a');
  f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
}

TEST(Staging, LaterEpochsReallyReadTheCopiesOnEveryBackend) {
  std::vector<IoKind> kinds{IoKind::kSync, IoKind::kThreadPool};
  if (io_uring_available().ok()) kinds.push_back(IoKind::kIoUring);
  for (IoKind io : kinds) {
    const std::string root = scratch_dir() + "/" + std::string(io_kind_name(io));
    const std::string path = make_dataset(root);
    LoaderOptions o = options(path, "global_shuffle", 0, 1);
    o.io.kind = io;
    o.stage.dir = root + "/stage";
    auto l = Loader::create(o).value();
    std::vector<uint64_t> ids;
    ASSERT_TRUE(l->start_epoch(0).ok());
    read_batches(*l, -1, ids);  // the files are open now (and registered with a ring)
    wait_staged(*l);
    for (const std::string& f : l->index().files) scramble(f);
    ids.clear();
    ASSERT_TRUE(l->start_epoch(1).ok());
    read_batches(*l, -1, ids);  // byte-checked: only the copies still hold the data
    EXPECT_EQ(ids.size(), kN) << io_kind_name(io);
  }
}

TEST(Staging, FourRanksSharingAFolderReadEveryonesCopies) {
  const std::string root = scratch_dir();
  const std::string path = make_dataset(root);
  std::vector<std::unique_ptr<Loader>> rs;
  for (uint32_t r = 0; r < 4; ++r) {
    LoaderOptions o = options(path, "global_shuffle", r, 4);
    o.stage.dir = root + "/stage";
    rs.push_back(Loader::create(o).value());
  }
  std::multiset<uint64_t> epoch0, epoch1;
  std::vector<uint64_t> ids;
  for (auto& l : rs) {
    ASSERT_TRUE(l->start_epoch(0).ok());
    ids.clear();
    read_batches(*l, -1, ids);
    epoch0.insert(ids.begin(), ids.end());
    EXPECT_EQ(l->stats().stage.files, kFiles / 4);  // files r, r+4
  }
  for (auto& l : rs) wait_staged(*l);
  for (auto& l : rs) {
    ASSERT_TRUE(l->start_epoch(1).ok());
    ids.clear();
    read_batches(*l, -1, ids);
    epoch1.insert(ids.begin(), ids.end());
    EXPECT_EQ(l->stats().files_read_staged, kFiles);                   // its own 2 and the others' 6
    const counters::EpochReport e = l->counters_snapshot().epochs[1];  // a copy: the snapshot is a temporary
    EXPECT_EQ(e.bytes_read_staged, e.bytes_read);
  }
  for (const auto* seen : {&epoch0, &epoch1}) {
    ASSERT_EQ(seen->size(), kN);
    EXPECT_EQ(std::set<uint64_t>(seen->begin(), seen->end()).size(), kN);
  }
}

TEST(Staging, FilesOverTheLimitAreReadFromTheSource) {
  const std::string root = scratch_dir();
  const std::string path = make_dataset(root);
  LoaderOptions o = options(path, "global_shuffle", 0, 1);
  o.stage.dir = root + "/stage";
  auto probe = Loader::create(options(path, "global_shuffle", 0, 1)).value();
  const uint64_t file_size = fs::file_size(probe->index().files[0]);
  o.stage.limit_bytes = 3 * file_size;  // DLIO files here are equal-sized
  auto l = Loader::create(o).value();
  std::vector<uint64_t> a, b;
  ASSERT_TRUE(l->start_epoch(0).ok());
  read_batches(*l, -1, a);
  wait_staged(*l);
  ASSERT_TRUE(l->start_epoch(1).ok());
  read_batches(*l, -1, b);
  EXPECT_EQ(std::set<uint64_t>(b.begin(), b.end()).size(), kN);
  const LoaderStats st = l->stats();
  EXPECT_EQ(st.stage.staged, 3u);
  EXPECT_EQ(st.stage.skipped_limit, kFiles - 3);
  EXPECT_EQ(st.files_read_staged, 3u);
  const counters::EpochReport e = l->counters_snapshot().epochs[1];
  EXPECT_GT(e.bytes_read_staged, 0u);
  EXPECT_LT(e.bytes_read_staged, e.bytes_read);
}

TEST(Staging, LocalShuffleRanksStageAndReadOnlyTheirOwnFiles) {
  const std::string root = scratch_dir();
  const std::string path = make_dataset(root);
  for (uint32_t r = 0; r < 2; ++r) {
    LoaderOptions o = options(path, "local_shuffle", r, 2);
    o.stage.dir = root + "/stage";
    auto l = Loader::create(o).value();
    std::vector<uint64_t> ids;
    ASSERT_TRUE(l->start_epoch(0).ok());
    read_batches(*l, -1, ids);
    wait_staged(*l);
    ASSERT_TRUE(l->start_epoch(1).ok());
    read_batches(*l, -1, ids);
    EXPECT_EQ(l->stats().stage.staged, kFiles / 2);
    EXPECT_EQ(l->stats().files_read_staged, kFiles / 2);  // rank 1 does not pick up rank 0's copies
    const counters::EpochReport e = l->counters_snapshot().epochs[1];
    EXPECT_EQ(e.bytes_read_staged, e.bytes_read);
    for (uint64_t id : ids) EXPECT_EQ((id / kPerFile) % 2, r) << "sample " << id;
  }
}

}  // namespace
}  // namespace dlfeed
