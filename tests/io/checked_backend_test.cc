// SPDX-License-Identifier: Apache-2.0
// make_checked_backend: what a backend from AdvancedOptions::io_factory returns
// is held to the IoBackend contract. A scripted backend breaks it in each way
// (wrong byte counts, completions for no request, duplicates, lost requests).

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "dlfeed/io/file_table.h"
#include "dlfeed/io/io_backend.h"
#include "gtest/gtest.h"

namespace dlfeed {
namespace {

#define EXPECT_CONTAINS(text, part)                          \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "'" << std::string(text) << "' does not contain '" << (part) << "'"

// Completes each request as `script` says: bytes reported (or -1: the
// request's length), repeated `copies` times (0: lost).
class ScriptedBackend final : public IoBackend {
 public:
  struct Step {
    int64_t bytes = -1;
    int copies = 1;
    bool stray = false;  // also emit a completion with a user_data never submitted
  };
  explicit ScriptedBackend(std::deque<Step> script) : script_(std::move(script)) {}
  absl::Status submit(std::span<const ReadRequest> requests) override {
    for (const ReadRequest& r : requests) {
      Step s = script_.empty() ? Step{} : script_.front();
      if (!script_.empty()) script_.pop_front();
      for (int i = 0; i < s.copies; ++i) {
        ready_.push_back({r.user_data, absl::OkStatus(), s.bytes < 0 ? r.length : static_cast<uint64_t>(s.bytes)});
      }
      if (s.stray) ready_.push_back({0xdeadbeefull << 8, absl::OkStatus(), r.length});
    }
    return absl::OkStatus();
  }
  size_t reap(std::vector<ReadCompletion>& out, size_t, std::chrono::nanoseconds) override {
    size_t n = ready_.size();
    for (auto& c : ready_) out.push_back(c);
    ready_.clear();
    return n;
  }
  size_t in_flight() const override { return ready_.size(); }
  std::string name() const override { return "scripted"; }
  IoStats stats() const override { return {}; }

 private:
  std::deque<Step> script_;
  std::vector<ReadCompletion> ready_;
};

struct Outcome {
  std::vector<ReadCompletion> done;
  size_t left = 0;
};

Outcome run(std::deque<ScriptedBackend::Step> script, size_t n) {
  auto files = std::make_shared<FileTable>();
  const uint32_t f = files->add("/data/shard-7.npz");
  auto io = make_checked_backend(std::make_unique<ScriptedBackend>(std::move(script)), files);
  std::vector<std::byte> buf(100 * n);
  std::vector<ReadRequest> reqs;
  for (size_t i = 0; i < n; ++i) reqs.push_back({f, 1000 * (i + 1), 100, buf.data() + 100 * i, 40 + i});
  EXPECT_TRUE(io->submit(reqs).ok());
  EXPECT_EQ(io->in_flight(), n);
  Outcome r;
  for (int i = 0; i < 3 && io->in_flight() > 0; ++i) io->reap(r.done, n, std::chrono::milliseconds(1));
  r.left = io->in_flight();
  return r;
}

TEST(CheckedBackend, KeptContractPassesThroughUnchanged) {
  Outcome r = run({}, 3);
  ASSERT_EQ(r.done.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(r.done[i].status.ok());
    EXPECT_EQ(r.done[i].bytes, 100u);
    EXPECT_EQ(r.done[i].user_data, 40 + i);  // the caller's user_data back
  }
  EXPECT_EQ(r.left, 0u);
}

TEST(CheckedBackend, WrongByteCountsBecomeErrorsNamingFileAndOffset) {
  Outcome r = run({{.bytes = 99}, {.bytes = 101}, {}}, 3);
  ASSERT_EQ(r.done.size(), 3u);
  EXPECT_EQ(r.done[0].user_data, 40u);
  EXPECT_FALSE(r.done[0].status.ok());
  EXPECT_EQ(r.done[0].bytes, 0u);
  EXPECT_CONTAINS(r.done[0].status.message(),
                  "/data/shard-7.npz: at offset 1000: expected 100 bytes read, found a completion reporting 99 bytes "
                  "from the scripted backend");
  EXPECT_CONTAINS(r.done[1].status.message(),
                  "at offset 2000: expected 100 bytes read, found a completion reporting 101");
  EXPECT_TRUE(r.done[2].status.ok());
}

TEST(CheckedBackend, StrayAndDuplicateCompletionsAreDropped) {
  Outcome r = run({{.copies = 2}, {.stray = true}}, 2);
  ASSERT_EQ(r.done.size(), 2u);  // one per request, no more
  EXPECT_EQ(r.done[0].user_data, 40u);
  EXPECT_EQ(r.done[1].user_data, 41u);
  EXPECT_TRUE(r.done[0].status.ok());
  EXPECT_TRUE(r.done[1].status.ok());
}

TEST(CheckedBackend, LostRequestsFailInsteadOfHanging) {
  Outcome r = run({{}, {.copies = 0}, {}}, 3);
  ASSERT_EQ(r.done.size(), 3u);
  EXPECT_EQ(r.left, 0u);
  const ReadCompletion* lost = nullptr;
  for (const auto& c : r.done) {
    if (c.user_data == 41) lost = &c;
  }
  ASSERT_NE(lost, nullptr);
  EXPECT_CONTAINS(lost->status.message(),
                  "/data/shard-7.npz: at offset 2000: expected a completion for the read of 100 bytes, found none: the "
                  "scripted backend dropped the request");
}

}  // namespace
}  // namespace dlfeed
