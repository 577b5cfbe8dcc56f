// SPDX-License-Identifier: Apache-2.0
// The node-local cache's choice by next use (ObjectUses, PieceCache::set_uses):
// once full, a piece is kept in place of the one used last when it is used
// before it, never otherwise; pieces are checked by what they read back.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "dlfeed/io/object_store.h"
#include "s3/cache.h"
#include "s3/client.h"

namespace dlfeed::s3::detail {
namespace {

constexpr uint64_t kPiece = kObjectCachePiece;

TEST(ObjectUses, NextUseIsTheFirstStepFromByPieceAndEpochThenTheNextEpochs) {
  ObjectUses u({"s3://b/a", "s3://b/c"}, /*epoch=*/2, /*batches=*/6);
  u.add(0, 10, 100, 0);          // piece 0 of a at batch 0
  u.add(0, kPiece - 10, 20, 3);  // pieces 0 and 1 of a at batch 3
  u.add(1, 5 * kPiece, 1, 1);    // piece 5 of c at batch 1
  u.add(0, 10, 100, 3);          // the same batch again: one use
  u.finish();
  EXPECT_EQ(u.size(), 4u);
  EXPECT_TRUE(u.reads("s3://b/a"));
  EXPECT_FALSE(u.reads("s3://b/x"));
  const uint64_t start = ObjectUses::step(2, 0);
  EXPECT_EQ(u.next_use("s3://b/a", 0, start), ObjectUses::step(2, 0));
  EXPECT_EQ(u.next_use("s3://b/a", 0, start + 1), ObjectUses::step(2, 3));
  EXPECT_EQ(u.next_use("s3://b/a", 0, ObjectUses::step(2, 3)), ObjectUses::step(2, 3));
  // No use left this epoch: where it was first used, one epoch (6 batches) on.
  EXPECT_EQ(u.next_use("s3://b/a", 0, ObjectUses::step(2, 4)), ObjectUses::step(2, 6));
  EXPECT_EQ(u.next_use("s3://b/a", 1, ObjectUses::step(2, 4)), ObjectUses::step(2, 9));
  EXPECT_EQ(u.next_use("s3://b/a", 1, start), ObjectUses::step(2, 3));
  EXPECT_EQ(u.next_use("s3://b/c", 5, start), ObjectUses::step(2, 1));
  // A piece or object the epoch never uses.
  EXPECT_EQ(u.next_use("s3://b/c", 4, start), ObjectUses::kNever);
  EXPECT_EQ(u.next_use("s3://b/x", 0, start), ObjectUses::kNever);
  // A step of an earlier epoch: from the start of this one; of a later one (or unknown): none.
  EXPECT_EQ(u.next_use("s3://b/a", 0, ObjectUses::step(1, 7)), ObjectUses::step(2, 0));
  EXPECT_EQ(u.next_use("s3://b/a", 0, ObjectUses::step(3, 0)), ObjectUses::kNever);
  EXPECT_EQ(u.next_use("s3://b/a", 0, ObjectUses::kNever), ObjectUses::kNever);
  // Batches past 2^32 - 1 are the last one, in step() as in add().
  EXPECT_EQ(ObjectUses::step(2, uint64_t{1} << 40), ObjectUses::step(2, 0xffffffffu));
}

// Objects of one piece each, their bytes their number.
ObjectInfo object(int i) { return {"s3://b/o" + std::to_string(i), 1000, "\"e" + std::to_string(i) + "\""}; }
std::vector<std::byte> bytes_of(int i) { return std::vector<std::byte>(1000, std::byte(i)); }

class PieceCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(DLFEED_TEST_TMPDIR) + "/s3_cache_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
  }
  std::shared_ptr<PieceCache> open(uint64_t pieces) {
    ObjectCacheOptions o;
    o.dir = dir_;
    o.max_bytes = pieces * 1004;  // room for `pieces` pieces (bytes and CRC)
    absl::StatusOr<std::shared_ptr<PieceCache>> c = PieceCache::open(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  }
  // Whether object i reads back from the cache, and with its own bytes.
  static bool holds(PieceCache& c, int i) {
    std::vector<std::byte> got(1000);
    if (!c.read(object(i), 0, got)) return false;
    EXPECT_EQ(got, bytes_of(i)) << "object " << i;
    return true;
  }
  std::string dir_;
};

TEST_F(PieceCacheTest, FullItKeepsAPieceUsedSoonerInPlaceOfTheOneUsedLast) {
  std::shared_ptr<PieceCache> c = open(2);
  // Epoch 0: o0 at batches 0 and 5, o1 at 1 and 2, o2 at 3 and 4.
  std::vector<std::string> urls;
  for (int i = 0; i < 3; ++i) urls.push_back(object(i).url);
  auto uses = std::make_shared<ObjectUses>(urls, 0, 6);
  for (auto [o, b] : {std::pair{0, 0}, {0, 5}, {1, 1}, {1, 2}, {2, 3}, {2, 4}}) uses->add(o, 0, 1000, b);
  uses->finish();
  c->set_uses(uses);
  const uint64_t let_go = counters().cache_let_go.load();
  c->keep(object(0), 0, bytes_of(0), ObjectUses::step(0, 0));
  c->keep(object(1), 0, bytes_of(1), ObjectUses::step(0, 1));
  EXPECT_TRUE(holds(*c, 0));
  EXPECT_TRUE(holds(*c, 1));
  // Full at batch 2: o2 (next at 4 after batch 3) would go in place of o0 (next at 5).
  EXPECT_TRUE(c->wants(object(2), 0, 1000, ObjectUses::step(0, 2)));
  std::vector<std::byte> got(1000);
  ASSERT_TRUE(c->read(object(1), 0, got, ObjectUses::step(0, 2)));  // o1's last use
  // At batch 3 o2 goes in place of o1, which has no use left, not of o0 (next at 5).
  c->keep(object(2), 0, bytes_of(2), ObjectUses::step(0, 3));
  EXPECT_TRUE(holds(*c, 2));
  EXPECT_EQ(counters().cache_let_go.load() - let_go, 1u);
  EXPECT_TRUE(holds(*c, 0));
  EXPECT_FALSE(holds(*c, 1));
  // o1 fetched for batch 5 is used next in the next epoch (batch 1 + 6), after o0 (5) and o2 (4).
  EXPECT_FALSE(c->wants(object(1), 0, 1000, ObjectUses::step(0, 5)));
  // Without uses (or once they are let go) nothing is let go.
  uses.reset();
  c->keep(object(1), 0, bytes_of(1), ObjectUses::step(0, 1));
  EXPECT_FALSE(holds(*c, 1));
  EXPECT_EQ(counters().cache_let_go.load() - let_go, 1u);
}

TEST_F(PieceCacheTest, PiecesFoundAtOpenAreRankedAndLetGo) {
  {
    std::shared_ptr<PieceCache> c = open(2);
    c->keep(object(0), 0, bytes_of(0));
    c->keep(object(1), 0, bytes_of(1));
  }
  std::shared_ptr<PieceCache> c = open(2);  // a new run: its folder full
  auto uses = std::make_shared<ObjectUses>(std::vector<std::string>{object(0).url, object(1).url, object(2).url}, 4, 3);
  uses->add(2, 0, 1000, 0);
  uses->add(1, 0, 1000, 1);
  uses->add(0, 0, 1000, 2);
  uses->finish();
  c->set_uses(uses);
  // o2 is used next one epoch on (batch 3), after o0 (2) and o1 (1): not kept in place of either.
  EXPECT_FALSE(c->wants(object(2), 0, 1000, ObjectUses::step(4, 0)));
  c->keep(object(2), 0, bytes_of(2), ObjectUses::step(4, 0));
  EXPECT_FALSE(holds(*c, 2));
  EXPECT_TRUE(holds(*c, 0));
  EXPECT_TRUE(holds(*c, 1));
}

TEST_F(PieceCacheTest, PiecesKeptForAnEarlierPhaseGoFirstAndRoomIsCountedOnce) {
  std::shared_ptr<PieceCache> c = open(2);
  std::vector<std::string> urls;
  for (int i = 0; i < 4; ++i) urls.push_back(object(i).url);
  // Epoch 0 uses o0 and o1 twice each; epoch 1 uses o2 and o3 twice each (a curriculum's phases).
  auto phase = [&](uint64_t epoch, int a, int b) {
    auto u = std::make_shared<ObjectUses>(urls, epoch, 2);
    for (uint64_t batch = 0; batch < 2; ++batch) {
      u->add(static_cast<uint32_t>(a), 0, 1000, batch);
      u->add(static_cast<uint32_t>(b), 0, 1000, batch);
    }
    u->finish();
    return u;
  };
  auto first = phase(0, 0, 1);
  c->set_uses(first);
  c->keep(object(0), 0, bytes_of(0), ObjectUses::step(0, 0));
  c->keep(object(1), 0, bytes_of(1), ObjectUses::step(0, 0));
  auto second = phase(1, 2, 3);
  c->set_uses(second);
  // o0 and o1 are not used this epoch: o2 and o3 take their places.
  EXPECT_TRUE(c->wants(object(2), 0, 1000, ObjectUses::step(1, 0)));
  c->keep(object(2), 0, bytes_of(2), ObjectUses::step(1, 0));
  c->keep(object(3), 0, bytes_of(3), ObjectUses::step(1, 0));
  EXPECT_TRUE(holds(*c, 2));
  EXPECT_TRUE(holds(*c, 3));
  EXPECT_FALSE(holds(*c, 0));
  EXPECT_EQ(c->used(), 2u * 1004);
  // A piece removed by another process (o2's or o3's, the first found) and kept again takes its room once.
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
    if (e.path().filename() == "0") {
      std::filesystem::remove(e.path());
      break;
    }
  }
  const int gone = holds(*c, 2) ? 3 : 2;
  EXPECT_FALSE(holds(*c, gone));
  c->keep(object(gone), 0, bytes_of(gone), ObjectUses::step(1, 1));
  EXPECT_TRUE(holds(*c, gone));
  EXPECT_EQ(c->used(), 2u * 1004);
}

}  // namespace
// The folder of a version (one file: its id) whose id says another: the
// first read in this process finds it damaged, removes its pieces (their
// room back) and writes the id again; a folder removed under the cache
// (by another process) is made again once a piece cannot be written.
TEST_F(PieceCacheTest, ADamagedIdIsWrittenAgainAndAFolderRemovedIsMadeAgain) {
  {
    std::shared_ptr<PieceCache> c = open(2);
    c->keep(object(0), 0, bytes_of(0));
    c->keep(object(1), 0, bytes_of(1));
  }
  std::shared_ptr<PieceCache> c = open(2);  // both found, full
  std::filesystem::path id0, id1;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    std::ifstream f(e.path() / "id");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    (text.find(object(0).url + "\n") != std::string::npos ? id0 : id1) = e.path() / "id";
  }
  ASSERT_FALSE(id0.empty());
  ASSERT_FALSE(id1.empty());
  std::ofstream(id0) << "dlfeed object cache 2\nsomething else\n\"x\"\n1000\n";
  const uint64_t damaged = counters().cache_damaged.load();
  EXPECT_FALSE(holds(*c, 0));  // its piece removed, its room back
  EXPECT_EQ(counters().cache_damaged.load() - damaged, 1u);
  c->keep(object(2), 0, bytes_of(2));  // fits where o0 was
  EXPECT_TRUE(holds(*c, 2));
  EXPECT_TRUE(holds(*c, 1));
  c->keep(object(0), 0, bytes_of(0));  // full: not kept
  EXPECT_FALSE(holds(*c, 0));
  // o1's folder removed by another process: its room comes back once the
  // piece is found gone, and the folder is made again.
  std::filesystem::remove_all(id1.parent_path());
  c->keep(object(1), 0, bytes_of(1));  // finds it gone (room back); cannot write it: no folder
  c->keep(object(1), 0, bytes_of(1));  // the folder made again
  EXPECT_TRUE(holds(*c, 1));
  EXPECT_TRUE(holds(*c, 2));
  EXPECT_LE(c->used(), 2u * 1004);
}

}  // namespace dlfeed::s3::detail
