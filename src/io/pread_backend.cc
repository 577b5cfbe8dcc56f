// SPDX-License-Identifier: Apache-2.0
// pread backends: a pool of threads each doing blocking pread(), and the
// synchronous baseline that reads inside submit(). Both use ReadOp, so short
// reads, EINTR/EAGAIN and end of file behave exactly as with io_uring.

#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/thread_name.h"
#include "dlfeed/error.h"
#include "io/read_op.h"

namespace dlfeed::inline DLFEED_ABI::detail {
namespace {

class PreadBackend final : public IoBackend {
 public:
  PreadBackend(std::shared_ptr<FileTable> files, const IoOptions& options, uint32_t threads)
      : files_(std::move(files)), direct_(options.direct) {
    for (uint32_t i = 0; i < threads; ++i) {
      try {
        workers_.emplace_back([this, i] { work(i); });
      } catch (const std::system_error& e) {
        // The system gives no more threads (a process or memory limit): read with
        // those started, or synchronously without any; never abort.
        // Half of those started are kept: the rest leave room for the threads the
        // loader still starts (its engines, decode).
        const size_t keep = workers_.size() / 2;
        {
          std::lock_guard<std::mutex> lock(mu_);
          limit_ = keep;  // workers from `keep` on return
        }
        work_cv_.notify_all();
        for (size_t k = keep; k < workers_.size(); ++k) workers_[k].join();
        workers_.resize(keep);
        std::fprintf(stderr, "dlfeed: note: the system gave %u of %u pread threads (%s); reading with %zu\n", i,
                     threads, e.what(), keep);
        break;
      }
      detail::name_thread(workers_.back(), "dlfeed-pread");
    }
  }

  ~PreadBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      queue_.clear();  // not started: dropped
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();  // each finishes the read it is in
  }

  absl::Status submit(std::span<const ReadRequest> requests) override {
    DLFEED_RETURN_IF_ERROR(validate_requests(*files_, requests));
    StatsCounters::add(stats_.requests, requests.size());
    if (workers_.empty()) {  // sync: read now, queue the completions
      std::vector<ReadCompletion> done;
      done.reserve(requests.size());
      for (const ReadRequest& r : requests) done.push_back(execute(r));
      StatsCounters::add(stats_.completed_at_submit, requests.size());
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& c : done) ready_.push_back(std::move(c));
      in_flight_ += requests.size();
      return absl::OkStatus();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.insert(queue_.end(), requests.begin(), requests.end());
      in_flight_ += requests.size();
    }
    if (requests.size() == 1) {
      work_cv_.notify_one();
    } else {
      work_cv_.notify_all();
    }
    return absl::OkStatus();
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_completions, std::chrono::nanoseconds timeout) override {
    size_t got = 0;
    auto take = [&] {
      while (!ready_.empty()) {
        out.push_back(std::move(ready_.front()));
        ready_.pop_front();
        --in_flight_;
        ++got;
      }
    };
    std::unique_lock<std::mutex> lock(mu_);
    take();
    if (got >= min_completions || in_flight_ == 0 || timeout <= std::chrono::nanoseconds::zero()) {
      return got;
    }
    // Enough to return, or everything left is ready (no more will come).
    auto ready = [&] {
      return !ready_.empty() && (got + ready_.size() >= min_completions || ready_.size() == in_flight_);
    };
    if (timeout == std::chrono::nanoseconds::max()) {
      done_cv_.wait(lock, ready);
    } else {
      done_cv_.wait_for(lock, timeout, ready);
    }
    take();
    return got;
  }

  size_t in_flight() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return in_flight_;
  }

  std::string name() const override {
    return absl::StrCat(workers_.empty() ? "sync" : "thread_pool", direct_ ? "+direct" : "");
  }
  IoStats stats() const override { return stats_.snapshot(); }

 private:
  ReadCompletion execute(const ReadRequest& r) {
    ReadOp op;
    op.req = r;
    if (r.length == 0) return op.finish(nullptr, stats_);
    auto pin = files_->pin(r.file);
    if (!pin.ok()) return failed_completion(r, *files_, std::move(pin).status(), stats_);
    op.pin = *std::move(pin);
    op.prepare(direct_, &pool_);
    for (;;) {
      StatsCounters::add(stats_.reads);
      const auto at = static_cast<off_t>(op.next_offset());
      ssize_t n = op.scattered() ? ::preadv(op.pin.fd(), op.iov, op.next_iovecs(), at)
                                 : ::pread(op.pin.fd(), op.next_dest(), op.next_length(), at);
      int64_t res = n < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(n);
      ReadOp::Step step = op.on_result(res, *files_, stats_);
      if (step != ReadOp::Step::kAgain) break;
    }
    return op.finish(&pool_, stats_);
  }

  void work(size_t index) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stop_ || index >= limit_ || !queue_.empty(); });
      if (stop_ || index >= limit_) return;
      ReadRequest r = queue_.front();
      queue_.pop_front();
      lock.unlock();
      ReadCompletion c = execute(r);
      lock.lock();
      ready_.push_back(std::move(c));
      done_cv_.notify_one();
    }
  }

  std::shared_ptr<FileTable> files_;
  bool direct_;
  BouncePool pool_;
  StatsCounters stats_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<ReadRequest> queue_;
  std::deque<ReadCompletion> ready_;
  size_t in_flight_ = 0;
  bool stop_ = false;
  size_t limit_ = SIZE_MAX;           // workers with an index from here on return (the system gave too few threads)
  std::vector<std::thread> workers_;  // last: started after everything above exists
};

}  // namespace

std::unique_ptr<IoBackend> make_pread_backend(std::shared_ptr<FileTable> files, const IoOptions& options,
                                              uint32_t threads) {
  return std::make_unique<PreadBackend>(std::move(files), options, threads);
}

}  // namespace dlfeed::detail
