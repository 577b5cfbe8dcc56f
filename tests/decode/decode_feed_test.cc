// SPDX-License-Identifier: Apache-2.0
// The decode stage's hand-off (src/decode/decode_feed.h) in a real oneTBB
// arena: a batch is decoded only once its reads landed, a batch whose reads
// are still out holds no worker (the one after it is decoded meanwhile, on an
// arena of one worker), batches are collated in hand-out order whatever
// order they were decoded in, the tokens bound the batches in flight, and a
// decode that throws is its batch's error, in its place; a batch read
// wholly into place (nothing to decode) is finished on the thread its reads
// complete on, without waking a worker.

#include "decode/decode_feed.h"

#include <gtest/gtest.h>

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace dlfeed::decode {
namespace {

using namespace std::chrono_literals;

// What the feed's stages saw, in order.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> decoded, collated;
  std::vector<absl::Status> errors;  // per collated batch

  void decode(batch::Work& w) {
    {
      std::lock_guard<std::mutex> lock(w.mu);
      EXPECT_TRUE(w.reads_done) << "batch " << w.index << " decoded before its reads landed";
    }
    std::lock_guard<std::mutex> lock(mu);
    decoded.push_back(w.index);
    cv.notify_all();
  }
  void collate(batch::Work& w) {
    std::lock_guard<std::mutex> lock(mu);
    collated.push_back(w.index);
    errors.push_back(w.error);
    cv.notify_all();
  }
  // Waits (up to 10 s) until `n` batches were decoded.
  bool wait_decoded(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 10s, [&] { return decoded.size() >= n; });
  }
};

std::vector<std::shared_ptr<batch::Work>> works(size_t n) {
  std::vector<std::shared_ptr<batch::Work>> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(std::make_shared<batch::Work>());
    out.back()->index = i;
    out.back()->known = {0};  // a field whose sizes decode finds: a worker decodes it
  }
  return out;
}

TEST(DecodeFeed, ABatchWaitingForItsReadsHoldsNoWorker) {
  tbb::task_arena arena(2, 1);  // one worker
  DecodeFeed feed(arena, 8);
  Seen seen;
  feed.begin([&](batch::Work& w) { seen.decode(w); }, [&](batch::Work& w) { seen.collate(w); });
  auto w = works(3);
  w[1]->reads_finished(absl::OkStatus());  // landed before it was handed over
  for (auto& x : w) {
    feed.wait_for_token();
    feed.hand(*x);
  }
  // Batch 0's reads are still out: the only worker decodes batch 1 meanwhile.
  ASSERT_TRUE(seen.wait_decoded(1)) << "the worker waited for batch 0's reads";
  w[2]->reads_finished(absl::OkStatus());  // as an engine's thread completes them
  ASSERT_TRUE(seen.wait_decoded(2));
  {
    std::lock_guard<std::mutex> lock(seen.mu);
    EXPECT_EQ(seen.decoded, (std::vector<uint64_t>{1, 2}));
    EXPECT_TRUE(seen.collated.empty()) << "collated ahead of batch 0";
  }
  w[0]->reads_finished(absl::OkStatus());
  feed.finish();
  EXPECT_EQ(seen.decoded, (std::vector<uint64_t>{1, 2, 0}));
  EXPECT_EQ(seen.collated, (std::vector<uint64_t>{0, 1, 2}));
}

TEST(DecodeFeed, ABatchReadIntoPlaceIsFinishedWhereItsReadsCompleteAndADecodedOneByAWorker) {
  tbb::task_arena arena(2, 1);
  DecodeFeed feed(arena, 8);
  std::mutex mu;
  std::vector<std::thread::id> where(2);
  feed.begin(
      [&](batch::Work& w) {
        std::lock_guard<std::mutex> lock(mu);
        where[w.index] = std::this_thread::get_id();
      },
      [](batch::Work&) {});
  auto w = works(2);
  w[0]->known = {1};
  w[0]->direct = {1, 1, 1};  // three samples, all read straight into the batch
  ASSERT_TRUE(w[0]->nothing_to_decode());
  ASSERT_FALSE(w[1]->nothing_to_decode());
  for (auto& x : w) feed.hand(*x);
  std::thread engine([&] {
    for (auto& x : w) x->reads_finished(absl::OkStatus());
  });
  const std::thread::id engine_id = engine.get_id();
  engine.join();
  feed.finish();
  EXPECT_EQ(where[0], engine_id) << "a batch with nothing to decode waited for a worker";
  EXPECT_NE(where[1], engine_id) << "a batch to decode was decoded on the engine's thread";
  EXPECT_NE(where[1], std::thread::id());
}

TEST(DecodeFeed, ManyBatchesOverSeveralWorkersAreCollatedInOrder) {
  tbb::task_arena arena(5, 1);
  DecodeFeed feed(arena, 6);
  Seen seen;
  feed.begin([&](batch::Work& w) { seen.decode(w); }, [&](batch::Work& w) { seen.collate(w); });
  auto w = works(200);
  // Reads land on another thread, each pair's second batch first.
  std::vector<batch::Work*> handed;
  std::mutex mu;
  std::condition_variable cv;
  std::thread engine([&] {
    for (size_t k = 0; k < w.size(); k += 2) {
      const size_t last = std::min(k + 2, w.size());
      std::vector<batch::Work*> pair;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return handed.size() >= last; });
        pair.assign(handed.begin() + static_cast<ptrdiff_t>(k), handed.begin() + static_cast<ptrdiff_t>(last));
      }
      for (size_t j = pair.size(); j-- > 0;) pair[j]->reads_finished(absl::OkStatus());
    }
  });
  for (auto& x : w) {
    feed.wait_for_token();
    feed.hand(*x);
    std::lock_guard<std::mutex> lock(mu);
    handed.push_back(x.get());
    cv.notify_all();
  }
  engine.join();
  feed.finish();
  ASSERT_EQ(seen.collated.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(seen.collated[i], i);
}

TEST(DecodeFeed, TokensBoundTheBatchesInFlight) {
  tbb::task_arena arena(3, 1);
  DecodeFeed feed(arena, 2);
  Seen seen;
  feed.begin([&](batch::Work& w) { seen.decode(w); }, [&](batch::Work& w) { seen.collate(w); });
  auto w = works(3);
  feed.wait_for_token();
  feed.hand(*w[0]);
  feed.wait_for_token();
  feed.hand(*w[1]);
  std::atomic<bool> got{false};
  std::thread source([&] {
    feed.wait_for_token();  // two in flight: waits until one is collated
    got = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(got) << "a third batch went in with two in flight and tokens 2";
  w[1]->reads_finished(absl::OkStatus());
  ASSERT_TRUE(seen.wait_decoded(1));
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(got) << "batch 1 decoded is not batch 1 collated: batch 0 is still out";
  w[0]->reads_finished(absl::OkStatus());
  source.join();
  EXPECT_TRUE(got);
  feed.hand(*w[2]);
  w[2]->reads_finished(absl::OkStatus());
  feed.finish();
  EXPECT_EQ(seen.collated, (std::vector<uint64_t>{0, 1, 2}));
}

TEST(DecodeFeed, ADecodeThatThrowsIsItsBatchsErrorInItsPlace) {
  tbb::task_arena arena(3, 1);
  DecodeFeed feed(arena, 4);
  Seen seen;
  feed.begin(
      [&](batch::Work& w) {
        if (w.index == 1) throw std::runtime_error("no memory for batch 1");
        seen.decode(w);
      },
      [&](batch::Work& w) { seen.collate(w); });
  auto w = works(3);
  for (auto& x : w) {
    x->reads_finished(absl::OkStatus());
    feed.wait_for_token();
    feed.hand(*x);
  }
  feed.finish();
  ASSERT_EQ(seen.collated, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_TRUE(seen.errors[0].ok());
  EXPECT_EQ(seen.errors[1], absl::InternalError("loader pipeline: no memory for batch 1"));
  EXPECT_TRUE(seen.errors[2].ok());
}

TEST(DecodeFeed, ACollateThatThrowsIsRethrownByFinishAfterTheRest) {
  tbb::task_arena arena(3, 1);
  DecodeFeed feed(arena, 4);
  Seen seen;
  feed.begin([&](batch::Work& w) { seen.decode(w); },
             [&](batch::Work& w) {
               if (w.index == 0) throw std::runtime_error("queue gone");
               seen.collate(w);
             });
  auto w = works(2);
  for (auto& x : w) {
    x->reads_finished(absl::OkStatus());
    feed.wait_for_token();
    feed.hand(*x);
  }
  EXPECT_THROW(feed.finish(), std::runtime_error);
  EXPECT_EQ(seen.collated, (std::vector<uint64_t>{1}));
  // The next epoch starts clean.
  feed.begin([&](batch::Work& w) { seen.decode(w); }, [&](batch::Work& w) { seen.collate(w); });
  auto more = works(1);
  more[0]->reads_finished(absl::OkStatus());
  feed.hand(*more[0]);
  EXPECT_NO_THROW(feed.finish());
  EXPECT_EQ(seen.collated, (std::vector<uint64_t>{1, 0}));
}

}  // namespace
}  // namespace dlfeed::decode
