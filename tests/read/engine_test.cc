// SPDX-License-Identifier: Apache-2.0
// The I/O engine (src/read/engine.h): the spreading rule on given loads, the
// busy meter on a given clock, and an engine reading a real file through a
// real backend (pieces, one callback per batch, errors).

#include "read/engine.h"

#include <algorithm>
#include <filesystem>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/io/file_table.h"
#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed::detail {
namespace {

using Load = Spreader::Load;

TEST(Spreader, OneEngineTakesEverything) {
  Spreader s;
  const std::vector<Load> one = {{1000, 1000}};
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(s.pick(one, i, false), 0u);
  EXPECT_EQ(s.pick(one, 3, true), 0u);
}

TEST(Spreader, SpreadsOnlyWhenTheFirstIsBusyWithCacheHits) {
  Spreader s;
  // Busy but waiting on the device (few hits): one ring.
  EXPECT_EQ(s.pick(std::vector<Load>{{1000, 100}, {0, 0}}, 1, false), 0u);
  // Many hits but idle half the time: one ring.
  EXPECT_EQ(s.pick(std::vector<Load>{{700, 1000}, {0, 0}}, 1, false), 0u);
  EXPECT_FALSE(s.spreading());
  // Just at both thresholds: round robin by batch index.
  const std::vector<Load> hot = {{Spreader::kOnBusy, Spreader::kOnHits}, {0, 0}, {0, 0}};
  EXPECT_EQ(s.pick(hot, 4, false), 1u);
  EXPECT_TRUE(s.spreading());
  EXPECT_EQ(s.pick(hot, 5, false), 2u);
  EXPECT_EQ(s.pick(hot, 6, false), 0u);
}

TEST(Spreader, KeepsSpreadingUntilTheEnginesTogetherAreIdleOrMissing) {
  Spreader s;
  ASSERT_EQ(s.pick(std::vector<Load>{{900, 950}, {0, 0}}, 1, false), 1u);
  // Spread out, each is less busy than the first was alone; together they
  // are busy half a thread with half their reads hits: stay.
  EXPECT_EQ(s.pick(std::vector<Load>{{250, 500}, {250, 0}}, 3, false), 1u);
  EXPECT_TRUE(s.spreading());
  // Together under half a thread: back to one.
  EXPECT_EQ(s.pick(std::vector<Load>{{249, 1000}, {250, 1000}}, 3, false), 0u);
  EXPECT_FALSE(s.spreading());
  ASSERT_EQ(s.pick(std::vector<Load>{{900, 950}, {0, 0}}, 1, false), 1u);
  // Reads that wait on the device: back to one.
  EXPECT_EQ(s.pick(std::vector<Load>{{800, 499}, {800, 100}}, 1, false), 0u);
}

TEST(Spreader, AlwaysSpreadsWhenAskedTo) {
  Spreader s;
  EXPECT_EQ(s.pick(std::vector<Load>{{0, 0}, {0, 0}}, 3, true), 1u);
  EXPECT_EQ(s.pick(std::vector<Load>{{0, 0}, {0, 0}}, 4, true), 0u);
}

TEST(BusyMeter, MeasuresWindowsOfAtLeastFiveMilliseconds) {
  BusyMeter m;
  m.start(/*wall=*/1'000'000, /*cpu=*/500);
  EXPECT_FALSE(m.due(1'000'000 + BusyMeter::kWindowNs - 1));
  EXPECT_FALSE(m.update(1'000'000 + BusyMeter::kWindowNs - 1, 4'000'000, 10, 10)) << "window still open";
  EXPECT_EQ(m.busy_permille(), 0u);
  // 10 ms of wall time, 2.5 ms of it on a CPU; 40 of 50 reads were hits.
  EXPECT_TRUE(m.update(11'000'000, 500 + 2'500'000, 50, 40));
  EXPECT_EQ(m.busy_permille(), 250u);
  EXPECT_EQ(m.hits_permille(), 800u);
  // The next window counts only its own reads; none: no hit share.
  EXPECT_TRUE(m.update(21'000'000, 500 + 12'500'000, 50, 40));
  EXPECT_EQ(m.busy_permille(), 1000u);
  EXPECT_EQ(m.hits_permille(), 0u);
  EXPECT_TRUE(m.update(31'000'000, 500 + 12'500'000, 60, 50));
  EXPECT_EQ(m.busy_permille(), 0u);
  EXPECT_EQ(m.hits_permille(), 1000u);
}

TEST(BusyMeter, ClampsToOneThread) {
  BusyMeter m;
  m.start(0, 0);
  EXPECT_TRUE(m.update(10'000'000, 30'000'000, 0, 0));
  EXPECT_EQ(m.busy_permille(), 1000u);
}

// A file of `size` bytes whose byte k is k * 7 mod 251.
std::string make_file(const std::string& dir, uint64_t size) {
  std::string bytes(size, '\0');
  for (uint64_t k = 0; k < size; ++k) bytes[k] = static_cast<char>(k * 7 % 251);
  const std::string path = dir + "/data.bin";
  testing::write_all(path, bytes);
  return path;
}

// `got` holds make_file's bytes from `offset` on.
::testing::AssertionResult has_file_bytes(const std::vector<std::byte>& got, uint64_t offset) {
  for (uint64_t k = 0; k < got.size(); ++k) {
    if (got[k] != std::byte((offset + k) * 7 % 251)) {
      return ::testing::AssertionFailure() << "byte " << k << " of a read at offset " << offset;
    }
  }
  return ::testing::AssertionSuccess();
}

// The engine's stats once it counts `requests` requests (or after 5 s).
IoStats stats_after(const IoEngine& e, uint64_t requests) {
  for (int k = 0; k < 5000 && e.stats().requests < requests; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return e.stats();
}

struct Rig {
  std::shared_ptr<FileTable> files = std::make_shared<FileTable>();
  counters::Counters counters;
  uint32_t id = 0;
  explicit Rig(const std::string& path) { id = files->add(path); }
  std::unique_ptr<IoEngine> engine(uint64_t max_piece, uint32_t number = 0, uint64_t split_above = 0,
                                   uint64_t split_piece = 0, uint64_t split_piece_cold = 0,
                                   IoKind kind = IoKind::kThreadPool) {
    IoOptions o;
    o.kind = kind;
    auto b = make_io_backend(files, o);
    EXPECT_TRUE(b.ok()) << b.status();
    return std::make_unique<IoEngine>(std::move(*b), &counters, max_piece, number, split_above, split_piece,
                                      split_piece_cold);
  }
};

// Submits batch `b` (its reads and crcs set; done is set here), lets go of
// it (the engine keeps it until done) and waits for the one callback.
absl::Status run_batch(IoEngine& e, std::shared_ptr<ReadBatch> b, int* calls = nullptr) {
  auto p = std::make_shared<std::promise<absl::Status>>();
  auto f = p->get_future();
  auto n = std::make_shared<int>(0);
  b->done = [p, n](const absl::Status& s) {
    if ((*n)++ == 0) p->set_value(s);
  };
  e.submit(b);
  b.reset();
  if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready) return absl::DeadlineExceededError("hang");
  absl::Status s = f.get();
  if (calls != nullptr) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    *calls = *n;
  }
  return s;
}

// The same for a batch of `reads`.
absl::Status run_batch(IoEngine& e, std::vector<ReadRequest> reads, int* calls = nullptr) {
  auto b = std::make_shared<ReadBatch>();
  b->reads = std::move(reads);
  return run_batch(e, std::move(b), calls);
}

TEST(IoEngine, ReadsABatchInPiecesAndCallsBackOnce) {
  const std::string dir = testing::scratch_dir();
  Rig rig(make_file(dir, 100'000));
  auto engine = rig.engine(/*max_piece=*/4096);
  std::vector<std::byte> a(50'000), b(123);
  int calls = 0;
  absl::Status s =
      run_batch(*engine, {{rig.id, 1000, a.size(), a.data(), 0}, {rig.id, 99'877, b.size(), b.data(), 0}}, &calls);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(has_file_bytes(a, 1000));
  ASSERT_TRUE(has_file_bytes(b, 99'877));
  const IoStats st = stats_after(*engine, 14);
  EXPECT_EQ(st.requests, 13u + 1u) << "50,000 bytes in pieces of 4096, then one small read";
  EXPECT_EQ(st.bytes, 50'123u);
}

// CoalesceOptions::split_above: a read longer than it goes in split_piece
// pieces, a read up to it whole (max_piece still caps both).
TEST(IoEngine, ReadsLongerThanSplitAboveGoInSplitPieces) {
  const std::string dir = testing::scratch_dir();
  Rig rig(make_file(dir, 100'000));
  auto engine = rig.engine(/*max_piece=*/1 << 20, 0, /*split_above=*/20'000, /*split_piece=*/8192);
  std::vector<std::byte> a(50'000), b(20'000);
  absl::Status s = run_batch(*engine, {{rig.id, 1000, a.size(), a.data(), 0}, {rig.id, 60'000, b.size(), b.data(), 0}});
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(has_file_bytes(a, 1000));
  ASSERT_TRUE(has_file_bytes(b, 60'000));
  const IoStats st = stats_after(*engine, 8);
  EXPECT_EQ(st.requests, 7u + 1u) << "50,000 bytes in pieces of 8192, then 20,000 (not above) whole";
  EXPECT_EQ(st.bytes, 70'000u);
}

// Before the engine has seen its reads hit the page cache (a fresh engine:
// cold until a window says otherwise) it splits in split_piece_cold pieces;
// once a window of reads was all hits (the sync backend's reads complete at
// submit), in split_piece pieces.
TEST(IoEngine, SplitsInColdPiecesUntilItsReadsHitTheCache) {
  const std::string dir = testing::scratch_dir();
  Rig rig(make_file(dir, 100'000));
  auto engine = rig.engine(/*max_piece=*/1 << 20, 0, /*split_above=*/20'000, /*split_piece=*/8192,
                           /*split_piece_cold=*/4096, IoKind::kSync);
  std::vector<std::byte> a(50'000);
  ASSERT_TRUE(run_batch(*engine, {{rig.id, 1000, a.size(), a.data(), 0}}).ok());
  ASSERT_TRUE(has_file_bytes(a, 1000));
  EXPECT_EQ(stats_after(*engine, 13).requests, 13u) << "50,000 bytes in cold pieces of 4096";
  std::this_thread::sleep_for(std::chrono::nanoseconds(BusyMeter::kWindowNs + 1'000'000));
  std::fill(a.begin(), a.end(), std::byte{0});
  ASSERT_TRUE(run_batch(*engine, {{rig.id, 1000, a.size(), a.data(), 0}}).ok());
  ASSERT_TRUE(has_file_bytes(a, 1000));
  EXPECT_EQ(stats_after(*engine, 20).requests, 20u) << "then in warm pieces of 8192: 7 more";
}

TEST(BusyMeter, LastHitsOutlastWindowsWithoutReads) {
  BusyMeter m;
  m.start(0, 0);
  EXPECT_EQ(m.last_hits_permille(), 0u) << "nothing known: cold";
  EXPECT_TRUE(m.update(10'000'000, 0, 100, 99));
  EXPECT_EQ(m.last_hits_permille(), 990u);
  EXPECT_TRUE(m.update(20'000'000, 0, 100, 99)) << "an idle window (between epochs)";
  EXPECT_EQ(m.hits_permille(), 0u);
  EXPECT_EQ(m.last_hits_permille(), 990u);
  EXPECT_TRUE(m.update(30'000'000, 0, 200, 149));
  EXPECT_EQ(m.last_hits_permille(), 500u);
}

TEST(IoEngine, AFailedReadFailsItsBatchAfterEveryReadIsBack) {
  const std::string dir = testing::scratch_dir();
  const std::string path = make_file(dir, 1000);
  Rig rig(path);
  auto engine = rig.engine(0);
  std::vector<std::byte> a(100), b(100);
  absl::Status s = run_batch(*engine, {{rig.id, 0, a.size(), a.data(), 0}, {rig.id, 950, b.size(), b.data(), 0}});
  ASSERT_FALSE(s.ok()) << "a read past the end of the file";
  EXPECT_NE(std::string(s.message()).find(path), std::string::npos) << s;
  EXPECT_EQ(a[99], std::byte(99 * 7 % 251)) << "the good read still landed";
  // The engine goes on serving.
  EXPECT_TRUE(run_batch(*engine, {{rig.id, 0, a.size(), a.data(), 0}}).ok());
}

// Reads asking for their checksum get it in ReadBatch::crcs, by read index,
// before done(); one the engine issues in pieces (longer than split_above)
// and one not asking get none.
TEST(IoEngine, ChecksumsReachTheBatchByReadIndex) {
  const std::string dir = testing::scratch_dir();
  Rig rig(make_file(dir, 100'000));
  auto engine = rig.engine(/*max_piece=*/1 << 20, 0, /*split_above=*/30'000, /*split_piece=*/8192);
  std::vector<std::byte> a(20'000), b(50'000), c(777);
  auto batch = std::make_shared<ReadBatch>();
  batch->reads = {{rig.id, 1000, a.size(), a.data(), 0, true},
                  {rig.id, 30'000, b.size(), b.data(), 0, true},
                  {rig.id, 90'000, c.size(), c.data(), 0, false}};
  batch->crcs.assign(3, 0);
  batch->crc_known.assign(3, 0);
  ASSERT_TRUE(run_batch(*engine, batch).ok());  // written before done(), read after it here
  ASSERT_TRUE(has_file_bytes(a, 1000));
  ASSERT_TRUE(has_file_bytes(b, 30'000));
  EXPECT_EQ(batch->crc_known, (std::vector<uint8_t>{1, 0, 0}))
      << "the 50,000-byte read went in pieces; the last did not ask";
  EXPECT_EQ(batch->crcs[0], crc32c(a.data(), a.size()));
}

TEST(IoEngine, AnEmptyBatchCompletesAtOnce) {
  const std::string dir = testing::scratch_dir();
  Rig rig(make_file(dir, 10));
  auto engine = rig.engine(0);
  EXPECT_TRUE(run_batch(*engine, std::vector<ReadRequest>{}).ok());
}

// The sync backend, noting each request it is given (file, offset, whether
// handed off) in submit order.
struct Seen {
  uint32_t file = 0;
  uint64_t offset = 0;
  bool hand_off = false;
  bool operator==(const Seen&) const = default;
};
class Recording : public IoBackend {
 public:
  Recording(std::unique_ptr<IoBackend> inner, std::vector<Seen>* seen) : inner_(std::move(inner)), seen_(seen) {}
  absl::Status submit(std::span<const ReadRequest> requests) override {
    for (const ReadRequest& r : requests) seen_->push_back({r.file, r.offset, r.hand_off});
    return inner_->submit(requests);
  }
  size_t reap(std::vector<ReadCompletion>& out, size_t min_completions, std::chrono::nanoseconds timeout) override {
    return inner_->reap(out, min_completions, timeout);
  }
  size_t in_flight() const override { return inner_->in_flight(); }
  std::string name() const override { return inner_->name(); }
  IoStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<IoBackend> inner_;
  std::vector<Seen>* seen_;
};

// A batch's large reads (at least large_above, in large_piece pieces) of two
// or more files go to the backend after its other reads, in turns of 8 MiB
// (IoEngine::kInterleaveBytes) from each file, a file's large reads one
// stream in their order; every byte lands where it belongs. Large reads of
// one file only keep their order.
TEST(IoEngine, InterleavesTheLargeReadsOfABatchAcrossItsFilesInTurnsOfEightMebibytes) {
  constexpr uint64_t kMiB = 1 << 20, kPiece = 2 * kMiB;
  const std::string dir = testing::scratch_dir();
  std::filesystem::create_directories(dir + "/two");
  Rig rig(make_file(dir, 60 * kMiB));
  const uint32_t f1 = rig.id, f2 = rig.files->add(make_file(dir + "/two", 30 * kMiB));
  std::vector<Seen> seen;
  IoOptions o;
  o.kind = IoKind::kSync;
  auto inner = make_io_backend(rig.files, o);
  ASSERT_TRUE(inner.ok()) << inner.status();
  IoEngine engine(std::make_unique<Recording>(std::move(*inner), &seen), &rig.counters, /*max_piece=*/0, 0,
                  /*split_above=*/0, 0, 0, /*large_above=*/4 * kMiB, /*large_piece=*/kPiece);
  // f1: a small read, 20 MiB (10 pieces) and 11 MiB (6, the last of 1 MiB);
  // f2: 12 MiB (6 pieces), then a small read last.
  std::vector<std::byte> small1(4096), a(20 * kMiB), b(12 * kMiB), c(11 * kMiB), small2(100);
  const uint64_t at_small1 = 25 * kMiB, at_a = 0, at_b = 2 * kMiB, at_c = 40 * kMiB, at_small2 = 29 * kMiB;
  ASSERT_TRUE(run_batch(engine, {{f1, at_small1, small1.size(), small1.data(), 0},
                                 {f1, at_a, a.size(), a.data(), 0},
                                 {f2, at_b, b.size(), b.data(), 0},
                                 {f1, at_c, c.size(), c.data(), 0},
                                 {f2, at_small2, small2.size(), small2.data(), 0}})
                  .ok());
  ASSERT_TRUE(has_file_bytes(small1, at_small1));
  ASSERT_TRUE(has_file_bytes(a, at_a));
  ASSERT_TRUE(has_file_bytes(b, at_b));
  ASSERT_TRUE(has_file_bytes(c, at_c));
  ASSERT_TRUE(has_file_bytes(small2, at_small2));
  // The files' streams of pieces: f1 a then c, f2 b.
  std::vector<Seen> s1, s2;
  for (uint64_t at = 0; at < a.size(); at += kPiece) s1.push_back({f1, at_a + at, true});
  for (uint64_t at = 0; at < c.size(); at += kPiece) s1.push_back({f1, at_c + at, true});
  for (uint64_t at = 0; at < b.size(); at += kPiece) s2.push_back({f2, at_b + at, true});
  std::vector<Seen> want = {{f1, at_small1, false}, {f2, at_small2, false}};
  for (size_t k = 0; k < s1.size(); k += 4) {
    want.insert(want.end(), s1.begin() + static_cast<ptrdiff_t>(k),
                s1.begin() + static_cast<ptrdiff_t>(std::min(k + 4, s1.size())));
    if (k < s2.size()) {
      want.insert(want.end(), s2.begin() + static_cast<ptrdiff_t>(k),
                  s2.begin() + static_cast<ptrdiff_t>(std::min(k + 4, s2.size())));
    }
  }
  ASSERT_EQ(seen.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_TRUE(seen[k] == want[k]) << "request " << k << ": file " << seen[k].file << " offset " << seen[k].offset
                                    << ", wanted file " << want[k].file << " offset " << want[k].offset;
  }
  // One file's large reads: as they came.
  seen.clear();
  ASSERT_TRUE(run_batch(engine, {{f1, at_a, a.size(), a.data(), 0},
                                 {f1, at_small1, small1.size(), small1.data(), 0},
                                 {f1, at_c, c.size(), c.data(), 0}})
                  .ok());
  want.clear();
  for (uint64_t at = 0; at < a.size(); at += kPiece) want.push_back({f1, at_a + at, true});
  want.push_back({f1, at_small1, false});
  for (uint64_t at = 0; at < c.size(); at += kPiece) want.push_back({f1, at_c + at, true});
  EXPECT_TRUE(seen == want);
}

TEST(EngineSet, SpreadsRoundTheEnginesWhenAskedAndAddsTheirStats) {
  const std::string dir = testing::scratch_dir();
  Rig rig(make_file(dir, 8192));
  EngineSet set(/*spread_always=*/true);
  set.add(rig.engine(0, 0));
  set.add(rig.engine(0, 1));
  std::vector<std::byte> buf(4096);
  for (uint64_t index = 0; index < 6; ++index) {
    auto b = std::make_shared<ReadBatch>();
    b->reads = {{rig.id, index * 100, 100, buf.data(), 0}};
    auto p = std::make_shared<std::promise<absl::Status>>();
    auto f = p->get_future();
    b->done = [p](const absl::Status& s) { p->set_value(s); };
    set.submit(index, std::move(b));
    ASSERT_TRUE(f.get().ok());
  }
  EXPECT_EQ(set.batches_spread(), 3u) << "odd batch indices went to the second engine";
  // Each engine publishes its backend's stats after the completions it reaped.
  for (int k = 0; k < 5000 && set.stats().requests < 6; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(set.stats().requests, 6u);
  EXPECT_EQ(set.stats().bytes, 600u);
}

}  // namespace
}  // namespace dlfeed::detail
