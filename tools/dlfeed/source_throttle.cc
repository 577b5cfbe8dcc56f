// SPDX-License-Identifier: Apache-2.0
// --source-throttle (source_throttle.h): each read takes its turn on a link of
// the job's bandwidth (a clock shared through /dev/shm) and completes when
// its turn ends or its latency has passed, whichever is later.
#include "source_throttle.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dlfeed/io/file_table.h"

namespace dlfeed::cli {
namespace {

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // one clock for every process of the machine
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The word every rank's reads take turns on.
class SharedClock {
 public:
  explicit SharedClock(const std::string& path) {
    if (path.empty()) return;
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return;
    if (::ftruncate(fd, 64) == 0) {
      void* p = ::mmap(nullptr, 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) mapped_ = static_cast<std::atomic<uint64_t>*>(p);
    }
    ::close(fd);
  }
  ~SharedClock() {
    if (mapped_ != nullptr) ::munmap(mapped_, 64);
  }
  SharedClock(const SharedClock&) = delete;
  SharedClock& operator=(const SharedClock&) = delete;
  std::atomic<uint64_t>& word() { return mapped_ != nullptr ? *mapped_ : local_; }

 private:
  std::atomic<uint64_t>* mapped_ = nullptr;
  std::atomic<uint64_t> local_{0};
};

class ThrottledBackend final : public IoBackend {
 public:
  ThrottledBackend(std::unique_ptr<IoBackend> inner, SourceThrottle t, std::shared_ptr<SharedClock> clock,
                   std::shared_ptr<FileTable> files)
      : inner_(std::move(inner)), t_(std::move(t)), clock_(std::move(clock)), files_(std::move(files)) {}

  absl::Status submit(std::span<const ReadRequest> requests) override {
    const uint64_t now = now_ns();
    tagged_.assign(requests.begin(), requests.end());
    const uint64_t first = next_tag_;
    for (ReadRequest& r : tagged_) {
      uint64_t due = now;
      if (t_.local_prefix.empty() || !absl::StartsWith(files_->path(r.file), t_.local_prefix)) {
        const auto cost = static_cast<uint64_t>(static_cast<double>(r.length) / t_.bytes_per_s * 1e9);
        std::atomic<uint64_t>& busy = clock_->word();
        uint64_t prev = busy.load(std::memory_order_relaxed), end = 0;
        do {
          end = std::max(prev, now) + cost;
        } while (!busy.compare_exchange_weak(prev, end, std::memory_order_relaxed));
        due = std::max(end, now + t_.latency_ns);
      }
      // Tags of our own: the caller's user_data need not be unique.
      due_[next_tag_] = {r.user_data, due};
      r.user_data = next_tag_++;
    }
    absl::Status st = inner_->submit(tagged_);
    if (!st.ok()) {
      for (uint64_t tag = first; tag < next_tag_; ++tag) due_.erase(tag);
    }
    return st;
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_completions, std::chrono::nanoseconds timeout) override {
    const uint64_t deadline =
        timeout == std::chrono::nanoseconds::max() ? UINT64_MAX : now_ns() + static_cast<uint64_t>(timeout.count());
    size_t n = 0;
    while (true) {
      got_.clear();
      inner_->reap(got_, 0, std::chrono::nanoseconds::zero());
      for (ReadCompletion& c : got_) held_.push_back(std::move(c));
      const uint64_t now = now_ns();
      uint64_t next = UINT64_MAX;
      for (auto it = held_.begin(); it != held_.end();) {
        const auto d = due_.find(it->user_data);
        if (d == due_.end() || d->second.second <= now) {
          if (d != due_.end()) {
            it->user_data = d->second.first;
            due_.erase(d);
          }
          out.push_back(std::move(*it));
          it = held_.erase(it);
          ++n;
        } else {
          next = std::min(next, d->second.second);
          ++it;
        }
      }
      if (n >= min_completions || in_flight() == 0 || now >= deadline) return n;
      // Wait for the next due read (or poll the inner backend for more).
      const uint64_t until = std::min({next, deadline, now + 200'000});
      std::this_thread::sleep_for(std::chrono::nanoseconds(until > now ? until - now : 0));
    }
  }

  size_t in_flight() const override { return inner_->in_flight() + held_.size(); }
  void cancel() override { inner_->cancel(); }
  std::string name() const override { return inner_->name() + "+throttled"; }
  IoStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<IoBackend> inner_;
  SourceThrottle t_;
  std::shared_ptr<SharedClock> clock_;
  std::shared_ptr<FileTable> files_;
  absl::flat_hash_map<uint64_t, std::pair<uint64_t, uint64_t>> due_;  // tag -> (user_data, when it may complete)
  uint64_t next_tag_ = 0;
  std::vector<ReadRequest> tagged_;
  std::deque<ReadCompletion> held_;
  std::vector<ReadCompletion> got_;
};

absl::StatusOr<uint64_t> parse_latency(absl::string_view s) {
  struct Unit {
    const char* suffix;
    double ns;
  };
  for (const Unit& u : {Unit{"ns", 1}, Unit{"us", 1e3}, Unit{"ms", 1e6}, Unit{"s", 1e9}}) {
    if (absl::EndsWith(s, u.suffix)) {
      double v = 0;
      // Finite and at most an hour: beyond, the nanoseconds would not fit
      // (1e20s read as no latency at all).
      if (absl::SimpleAtod(s.substr(0, s.size() - std::strlen(u.suffix)), &v) && std::isfinite(v) && v >= 0 &&
          v * u.ns <= 3600e9) {
        return static_cast<uint64_t>(v * u.ns);
      }
      break;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("'", s, "' is not a latency from 0 to 1 hour (e.g. 500us, 1ms)"));
}

}  // namespace

absl::StatusOr<SourceThrottle> parse_source_throttle(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(absl::StripAsciiWhitespace(text), ':');
  SourceThrottle t;
  std::string bw = absl::AsciiStrToUpper(parts[0]);
  if (!bw.empty() && bw.back() == 'B') bw.pop_back();
  double mult = 1;
  if (!bw.empty()) {
    const char u = bw.back();
    mult = u == 'K' ? 1024.0 : u == 'M' ? 1048576.0 : u == 'G' ? 1073741824.0 : u == 'T' ? 1099511627776.0 : 1;
    if (mult != 1) bw.pop_back();
  }
  double v = 0;
  // A bandwidth from 1 B/s to 1 PB/s: NaN waited forever, and rates past
  // these bounds overflowed a read's cost in nanoseconds (no throttle).
  if (parts.size() > 2 || !absl::SimpleAtod(bw, &v) || !std::isfinite(v * mult) || v * mult < 1 || v * mult > 1e15) {
    return absl::InvalidArgumentError(absl::StrCat("--source-throttle '", text,
                                                   "': expected BANDWIDTH[:LATENCY], the bandwidth from 1 B/s to "
                                                   "1 PB/s, e.g. 200M or 200M:1ms"));
  }
  t.bytes_per_s = v * mult;
  if (parts.size() == 2) {
    absl::StatusOr<uint64_t> lat = parse_latency(parts[1]);
    if (!lat.ok()) return absl::InvalidArgumentError(absl::StrCat("--source-throttle: ", lat.status().message()));
    t.latency_ns = *lat;
  }
  return t;
}

IoBackendFactory throttled_factory(const SourceThrottle& t, IoBackendFactory inner) {
  auto clock = std::make_shared<SharedClock>(t.shared_path);
  return [t, clock, inner = std::move(inner)](std::shared_ptr<FileTable> files,
                                              IoOptions io) -> absl::StatusOr<std::unique_ptr<IoBackend>> {
    absl::StatusOr<std::unique_ptr<IoBackend>> b = inner ? inner(files, io) : make_io_backend(files, io);
    if (!b.ok()) return b.status();
    return std::unique_ptr<IoBackend>(std::make_unique<ThrottledBackend>(*std::move(b), t, clock, std::move(files)));
  };
}

}  // namespace dlfeed::cli
