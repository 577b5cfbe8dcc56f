// SPDX-License-Identifier: Apache-2.0
// Reliability under faults (docs/reliability.md): injected read faults
// (short reads, EINTR/EAGAIN storms, EIO, wrong-length completions, latency
// spikes), files truncated, deleted, replaced or rewritten while a loader
// reads them, more files than the descriptor limit, the memory budget under
// slow and fast consumers, and destruction at any point. Every epoch either
// delivers each sample exactly once with the generator's bytes or ends with
// an error naming a file and an offset; a watchdog turns a hang into a
// failure.

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "faults.h"
#include "format/test_util.h"
#include "gtest/gtest.h"
#include "harness.h"

namespace dlfeed::fault {
namespace {

using std::chrono::seconds;
using testing::scratch_dir;

// Generous: an epoch here takes milliseconds, a sanitizer build seconds.
constexpr seconds kHang{240};

#define EXPECT_CONTAINS(text, part)                          \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "'" << std::string(text) << "' does not contain '" << (part) << "'"

std::string label(const Dataset& d, IoKind io) { return absl::StrCat(d.c.name, "/", io_kind_name(io)); }

bool direct_io_works(const std::string& dir) {
  const std::string p = dir + "/.direct_probe";
  testing::write_all(p, std::string(4096, 'x'));
  const int fd = ::open(p.c_str(), O_RDONLY | O_DIRECT);
  if (fd >= 0) ::close(fd);
  std::filesystem::remove(p);
  return fd >= 0;
}

TEST(Faults, RetryableFaultsNeverChangeAByte) {
  // Short reads, EINTR, EAGAIN storms and late completions are all survivable:
  // every epoch must be complete and byte-exact, on every backend.
  const std::string root = scratch_dir();
  Faults faults({.short_read = 0.3,
                 .eintr = 0.1,
                 .eagain = 0.02,
                 .storm_length = 30,
                 .latency = 0.05,
                 .latency_spike = std::chrono::milliseconds(5),
                 .seed = 7});
  const bool direct = direct_io_works(root);
  for (const DatasetCase& c : standard_cases()) {
    const Dataset d = make_dataset(c, root, 5, 7);
    for (IoKind io : backends()) {
      for (bool odirect : {false, true}) {
        if (odirect && (!direct || c.name != "hdf5")) continue;  // one O_DIRECT case is enough
        for (const char* strategy : {"sequential", "global_shuffle"}) {
          LoaderOptions o = options_for(d);
          o.io.kind = io;
          o.io.direct = odirect;
          o.advanced.io_factory = faults.factory();
          o.order.strategy = strategy;
          auto loader = Loader::create(o);
          ASSERT_TRUE(loader.ok()) << loader.status();
          for (uint64_t epoch = 0; epoch < 2; ++epoch) {
            Watchdog dog(kHang, label(d, io));
            EpochResult r = run_epoch(**loader, d, epoch);
            EXPECT_TRUE(r.error.ok()) << label(d, io) << " " << strategy << ": " << r.error;
            EXPECT_EQ(verdict(r, **loader, d, epoch), "") << label(d, io) << " " << strategy;
          }
        }
      }
    }
  }
  // The faults happened (else this test proves nothing).
  const FaultCounts n = faults.counts();
  EXPECT_GT(n.short_reads, 100u);
  EXPECT_GT(n.eintr, 20u);
  EXPECT_GT(n.eagain, 20u);
  EXPECT_GT(n.delayed, 20u);
  EXPECT_EQ(n.fatal(), 0u);
}

TEST(Faults, FatalFaultsEndTheEpochNamingFileAndOffset) {
  // EIO from the read, EIO completions and wrong-length completions, mixed
  // with the retryable faults: an epoch is exact or ends in an error naming
  // a file and an offset, never with a wrong sample; the next epoch starts
  // clean.
  const std::string root = scratch_dir();
  Faults faults({.short_read = 0.2,
                 .eintr = 0.05,
                 .eagain = 0.01,
                 .read_eio = 0.01,
                 .eio = 0.01,
                 .wrong_length = 0.01,
                 .latency = 0.05,
                 .latency_spike = std::chrono::milliseconds(3),
                 .seed = 11});
  uint64_t errors = 0, complete = 0;
  std::set<std::string> kinds;
  for (const DatasetCase& c : standard_cases()) {
    const Dataset d = make_dataset(c, root, 5, 7);
    for (IoKind io : backends()) {
      LoaderOptions o = options_for(d);
      o.io.kind = io;
      o.advanced.io_factory = faults.factory();
      o.order.strategy = "file_shuffle";
      auto loader = Loader::create(o).value();
      for (uint64_t epoch = 0; epoch < 8; ++epoch) {
        Watchdog dog(kHang, label(d, io));
        EpochResult r = run_epoch(*loader, d, epoch);
        EXPECT_EQ(verdict(r, *loader, d, epoch), "") << label(d, io) << " epoch " << epoch;
        if (r.error.ok()) {
          ++complete;
          continue;
        }
        ++errors;
        const std::string msg(r.error.message());
        if (msg.find("Input/output error") != std::string::npos) kinds.insert("eio");
        if (msg.find("a completion reporting") != std::string::npos) kinds.insert("wrong_length");
      }
    }
  }
  const FaultCounts n = faults.counts();
  EXPECT_GT(n.read_eio + n.eio, 0u);
  EXPECT_GT(n.wrong_length, 0u);
  EXPECT_GT(errors, 10u);
  EXPECT_GT(complete, 10u);
  EXPECT_EQ(kinds, (std::set<std::string>{"eio", "wrong_length"}));
}

TEST(Faults, EachFatalFaultAloneGivesItsOwnClearError) {
  const std::string root = scratch_dir();
  const Dataset d = make_dataset(standard_cases()[3], root, 3, 5);  // hdf5
  struct Case {
    FaultSpec spec;
    const char* says;
  };
  const Case cases[] = {
      {{.read_eio = 1}, "read failed: Input/output error"},
      {{.eio = 1}, "read (injected) failed: Input/output error"},
      {{.wrong_length = 1}, "bytes read, found a completion reporting"},
      // Past the retry limit (1000 per request) EAGAIN is an error too.
      {{.eagain = 1, .storm_length = 1u << 30}, "Resource temporarily unavailable"},
  };
  for (const Case& k : cases) {
    for (IoKind io : backends()) {
      Faults faults(k.spec);
      LoaderOptions o = options_for(d);
      o.io.kind = io;
      o.advanced.io_factory = faults.factory();
      auto loader = Loader::create(o).value();
      Watchdog dog(kHang, label(d, io));
      EpochResult r = run_epoch(*loader, d, 0);
      ASSERT_FALSE(r.error.ok()) << k.says << " " << label(d, io);
      EXPECT_TRUE(r.ids.empty());
      EXPECT_CONTAINS(r.error.message(), k.says);
      EXPECT_EQ(verdict(r, *loader, d, 0), "");
    }
  }
}

// Files changed under a running loader. One descriptor at a time and no
// read-ahead, so the changed file is opened again after the change.
TEST(Faults, FilesChangedWhileReadingGiveAnErrorNeverWrongData) {
  const std::string root = scratch_dir();
  enum class Change { kTruncate, kDelete, kReplace, kReplaceSameBytes, kRewriteInPlace, kAppend };
  const std::map<Change, const char*> names = {{Change::kTruncate, "truncate"},
                                               {Change::kDelete, "delete"},
                                               {Change::kReplace, "replace"},
                                               {Change::kReplaceSameBytes, "replace with the same bytes"},
                                               {Change::kRewriteInPlace, "rewrite in place"},
                                               {Change::kAppend, "append"}};
  int n = 0;
  for (const DatasetCase& c : {standard_cases()[0], standard_cases()[3], standard_cases()[5]}) {
    for (IoKind io : backends()) {
      for (const auto& [change, name] : names) {
        const Dataset d = make_dataset(c, absl::StrCat(root, "/", n++), 5, 7);
        // Another dataset of the same shape and layout, different bytes.
        const Dataset other = make_dataset(c, absl::StrCat(root, "/", n++), 5, 7, d.shape, d.seed + 1);
        LoaderOptions o = options_for(d);
        o.io.kind = io;
        o.advanced.max_open_files = 1;
        o.advanced.prefetch = "off";
        auto loader = Loader::create(o).value();
        const std::string victim = d.files[4];  // read in the last two batches
        auto change_file = [&](uint64_t batch) {
          if (batch != 1) return;
          const std::string tmp = victim + ".new";
          switch (change) {
            case Change::kTruncate: ASSERT_EQ(::truncate(victim.c_str(), 64), 0); break;
            case Change::kDelete: std::filesystem::remove(victim); break;
            case Change::kReplace:
              std::filesystem::copy_file(other.files[4], tmp);
              std::filesystem::rename(tmp, victim);
              break;
            case Change::kReplaceSameBytes:
              std::filesystem::copy_file(victim, tmp);
              std::filesystem::rename(tmp, victim);
              break;
            case Change::kRewriteInPlace: {
              const std::string bytes = testing::read_all(other.files[4]);
              std::FILE* f = std::fopen(victim.c_str(), "r+b");
              ASSERT_NE(f, nullptr);
              ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
              std::fclose(f);
              break;
            }
            case Change::kAppend: {
              std::FILE* f = std::fopen(victim.c_str(), "ab");
              ASSERT_NE(f, nullptr);
              std::fputs("appended", f);
              std::fclose(f);
              break;
            }
          }
        };
        Watchdog dog(kHang, label(d, io));
        EpochResult r = run_epoch(*loader, d, 0, change_file);
        EXPECT_EQ(verdict(r, *loader, d, 0), "") << label(d, io) << " " << name;
        // The file is read after the change, so the change must be noticed:
        // content from another file is never handed out as this one's.
        ASSERT_FALSE(r.error.ok()) << label(d, io) << " " << name << ": the change went unnoticed";
        EXPECT_CONTAINS(r.error.message(), victim);
        if (change == Change::kReplace || change == Change::kRewriteInPlace || change == Change::kReplaceSameBytes ||
            change == Change::kAppend) {
          EXPECT_CONTAINS(r.error.message(), "replaced or modified while being read");
        }
        EXPECT_LT(r.ids.size(), 35u);
      }
    }
  }
}

TEST(Faults, AFileChangedWhileItsDescriptorIsOpenIsStillReadRightOrFails) {
  // With the descriptor open (no eviction), a file renamed over or deleted
  // keeps its old inode: the loader reads the old bytes, which are the
  // indexed ones. A truncation is the same inode changed in place: the next
  // epoch's start names the file (FileTable::check_open_files).
  const std::string root = scratch_dir();
  int n = 0;
  for (IoKind io : backends()) {
    for (int change = 0; change < 3; ++change) {
      const Dataset d = make_dataset(standard_cases()[0], absl::StrCat(root, "/", n++), 3, 8);
      const Dataset other = make_dataset(standard_cases()[0], absl::StrCat(root, "/", n++), 3, 8, d.shape, d.seed + 1);
      LoaderOptions o = options_for(d);
      o.io.kind = io;
      o.advanced.prefetch = "off";
      auto loader = Loader::create(o).value();
      Watchdog dog(kHang, label(d, io));
      // Epoch 0 opens every file (the table keeps them open); epoch 1 reads
      // them after the change.
      ASSERT_EQ(verdict(run_epoch(*loader, d, 0), *loader, d, 0), "");
      const std::string victim = d.files[2];
      if (change == 0) {
        std::filesystem::copy_file(other.files[2], victim + ".new");
        std::filesystem::rename(victim + ".new", victim);
      } else if (change == 1) {
        std::filesystem::remove(victim);
      } else {
        ASSERT_EQ(::truncate(victim.c_str(), 100), 0);
      }
      EpochResult r = run_epoch(*loader, d, 1);
      EXPECT_EQ(verdict(r, *loader, d, 1), "") << io_kind_name(io) << " change " << change;
      if (change < 2) {
        EXPECT_TRUE(r.error.ok()) << r.error;
      }  // the old inode, read right
      if (change == 2) {
        EXPECT_FALSE(r.error.ok());
        EXPECT_CONTAINS(r.error.message(), "changed in place");
      }
    }
  }
}

TEST(Limits, MoreFilesThanTheDescriptorLimitAllows) {
  const std::string root = scratch_dir();
  std::vector<Dataset> sets = {make_dataset(standard_cases()[0], root, 300, 2),
                               make_dataset(standard_cases()[3], root, 300, 2)};
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  struct rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(count_fds() + 64);  // far fewer than 300
  ASSERT_LT(low.rlim_cur, 300u);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  for (const Dataset& d : sets) {
    for (IoKind io : backends()) {
      LoaderOptions o = options_for(d);
      o.io.kind = io;
      o.order.strategy = "global_shuffle";  // every batch touches new files
      auto loader = Loader::create(o);
      ASSERT_TRUE(loader.ok()) << loader.status();
      Watchdog dog(kHang, label(d, io));
      for (uint64_t epoch = 0; epoch < 2; ++epoch) {
        EpochResult r = run_epoch(**loader, d, epoch);
        EXPECT_TRUE(r.error.ok()) << label(d, io) << ": " << r.error;
        EXPECT_EQ(verdict(r, **loader, d, epoch), "") << label(d, io);
      }
      EXPECT_LT(static_cast<rlim_t>(count_fds()), low.rlim_cur);
    }
  }
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
}

TEST(Limits, MemoryBudgetHoldsForSlowAndFastConsumers) {
  // 256 KiB samples (batch buffers are mapped and unmapped, so resident
  // memory follows them), a deep look-ahead that only the budget stops, and
  // late completions; the consumer is fast (drops each batch at once) or
  // slow (sleeps and keeps the last two).
  const std::string root = scratch_dir();
  DatasetCase c = standard_cases()[3];  // hdf5, contiguous: read straight into the batch
  const Dataset d = make_dataset(c, root, 8, 12, Shape{256, 256}, 3);
  const uint64_t batch_bytes = 4 * (256 * 256 * 4 + 8);
  Faults faults({.latency = 0.1, .latency_spike = std::chrono::milliseconds(2)});
  for (IoKind io : backends()) {
    for (bool slow : {false, true}) {
      LoaderOptions o = options_for(d);
      o.io.kind = io;
      o.advanced.io_factory = faults.factory();
      o.advanced.prefetch = "depth:64";
      o.memory_budget = 5 * batch_bytes;
      auto loader = Loader::create(o).value();
      Watchdog dog(kHang, label(d, io));
      const uint64_t rss0 = resident_bytes();
      uint64_t rss_peak = rss0;
      for (uint64_t epoch = 0; epoch < 2; ++epoch) {
        ASSERT_TRUE(loader->start_epoch(epoch).ok());
        std::vector<std::shared_ptr<const Batch>> kept;
        uint64_t n = 0;
        while (auto b = loader->next().value()) {
          n += b->size();
          if (slow) {
            std::this_thread::sleep_for(std::chrono::milliseconds(3));
            kept.push_back(b);
            if (kept.size() > 2) kept.erase(kept.begin());
          }
          rss_peak = std::max(rss_peak, resident_bytes());
        }
        EXPECT_EQ(n, 96u);
      }
      EXPECT_LE(loader->stats().peak_in_flight_bytes, o.memory_budget) << label(d, io) << (slow ? " slow" : " fast");
      // Resident memory, measured outside the loader, follows the budget
      // (plus room for the process's own noise); sanitizers keep freed memory.
      if (!sanitized()) {
        EXPECT_LT(rss_peak - rss0, o.memory_budget + (16u << 20)) << label(d, io) << (slow ? " slow" : " fast");
      }
    }
  }
}

// Prefetch off (the shipped policy answers), but once armed, the next admit() call the planner makes
// says it has begun and then takes 100 ms to answer.
class SlowToAnswerPolicy final : public prefetch::PrefetchPolicy {
 public:
  std::string name() const override { return "slow-to-answer off"; }
  bool admit(const prefetch::InFlight& now, uint64_t next_bytes) const override {
    if (armed_.exchange(false)) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        asked_ = true;
      }
      cv_.notify_all();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return off_->admit(now, next_bytes);
  }
  void arm() const { armed_ = true; }
  void wait_until_asked() const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return asked_; });
    asked_ = false;
  }

 private:
  const std::unique_ptr<prefetch::PrefetchPolicy> off_ = prefetch::make_off_policy();
  mutable std::atomic<bool> armed_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable bool asked_ = false;
};

TEST(Limits, AnEpochCancelledWhileThePlannerDecidesNeverHangs) {
  // The planner decides whether to wait (asking the policy) each time a
  // batch is taken or dropped. An epoch cancelled while it decides (here by
  // starting the next one) must still stop it: a stop set between its test
  // and its wait was once lost, and the cancel's join waited for ever.
  const std::string root = scratch_dir();
  const Dataset d = make_dataset(standard_cases()[0], root, 2, 16, Shape{4}, 13);  // npz, stored
  auto policy = std::make_shared<SlowToAnswerPolicy>();
  LoaderOptions o = options_for(d);
  o.advanced.prefetch_policy = policy;
  auto loader = Loader::create(o).value();
  Watchdog dog(kHang, d.c.name);
  for (uint64_t epoch = 0; epoch < 5; ++epoch) {
    ASSERT_TRUE(loader->start_epoch(epoch).ok());  // cancels the previous epoch, mid-decision
    auto b = loader->next();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_NE(*b, nullptr);
    policy->arm();
    b->reset();  // dropping the batch wakes the planner, which asks the policy
    policy->wait_until_asked();
  }
  // Read through the policy: a whole epoch, every sample once.
  const EpochResult r = run_epoch(*loader, d, 9);
  EXPECT_EQ(verdict(r, *loader, d, 9), "");
}

TEST(Limits, ALoaderDestroyedAtAnyPointLeavesNoThreadOrDescriptor) {
  const std::string root = scratch_dir();
  const Dataset d = make_dataset(standard_cases()[4], root, 6, 20);  // hdf5 chunked
  {  // lazily created process-wide state (oneTBB, the io_uring probe) first
    LoaderOptions o = options_for(d);
    auto warm = Loader::create(o).value();
    run_epoch(*warm, d, 0);
  }
  ASSERT_EQ(settled_dlfeed_threads(), 0);
  const int fds = count_fds();
  enum Point {
    kCreated,
    kStarted,
    kMidEpoch,
    kInALatencySpike,
    kAfterError,
    kAfterEpoch,
    kRestorePending,
    kKeepingEverything,
    kPoints
  };
  Faults faults({});
  for (IoKind io : backends()) {
    for (int point = 0; point < kPoints; ++point) {
      FaultSpec spec;
      if (point == kInALatencySpike) spec = {.latency = 1, .latency_spike = std::chrono::milliseconds(200)};
      if (point == kAfterError) spec = {.eio = 0.2};
      faults.set_spec(spec);
      LoaderOptions o = options_for(d);
      o.io.kind = io;
      o.advanced.io_factory = faults.factory();
      if (point == kKeepingEverything) o.memory_budget = 4096;
      Watchdog dog(kHang, absl::StrCat(label(d, io), " point ", point));
      auto loader = Loader::create(o).value();
      std::vector<std::shared_ptr<const Batch>> kept;
      switch (point) {
        case kCreated: break;
        case kStarted:
        case kInALatencySpike: ASSERT_TRUE(loader->start_epoch(0).ok()); break;
        case kMidEpoch:
          ASSERT_TRUE(loader->start_epoch(0).ok());
          for (int i = 0; i < 3; ++i) kept.push_back(loader->next().value());
          break;
        case kAfterError: {
          bool failed = false;
          for (uint64_t e = 0; e < 10 && !failed; ++e) failed = !run_epoch(*loader, d, e).error.ok();
          ASSERT_TRUE(failed);
          break;
        }
        case kAfterEpoch: ASSERT_TRUE(run_epoch(*loader, d, 0).error.ok()); break;
        case kRestorePending: {
          ASSERT_TRUE(loader->start_epoch(1).ok());
          kept.push_back(loader->next().value());
          const std::string state = loader->state();
          ASSERT_TRUE(loader->restore(state).ok());
          break;
        }
        case kKeepingEverything:
          ASSERT_TRUE(loader->start_epoch(0).ok());
          while (auto b = loader->next().value()) kept.push_back(b);
          EXPECT_EQ(kept.size(), 30u);
          break;
      }
      loader.reset();
      // Batches kept past their loader stay valid and exact.
      for (const auto& b : kept) {
        ASSERT_NE(b, nullptr);
        EXPECT_EQ(testing::to_string(b->fields[0].sample(0)),
                  testing::expected_sample(d.seed, b->sample_ids[0], d.dtype, d.shape));
      }
      kept.clear();
      EXPECT_EQ(settled_dlfeed_threads(), 0) << label(d, io) << " point " << point;
      EXPECT_EQ(count_fds(), fds) << label(d, io) << " point " << point;
    }
  }
}

}  // namespace
}  // namespace dlfeed::fault
