// SPDX-License-Identifier: Apache-2.0
#include "faults.h"

#include <algorithm>
#include <cerrno>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "dlfeed/io/file_table.h"

namespace dlfeed::fault {

void scribble(std::byte* p, uint64_t n) {
  // XOR, not a fill: every byte differs from what was there, so a byte-exact
  // check cannot pass by accident. A scattered read has no one destination
  // (p null): its pieces are left as the read left them.
  if (p == nullptr) return;
  for (uint64_t i = 0; i < n; ++i) p[i] ^= std::byte{0x5a};
}

namespace {

// Bytes [from, length) of what request `r` read, wherever they went (its
// dest, or its pieces when scattered).
void scribble_request(const ReadRequest& r, uint64_t from) {
  if (r.piece_count == 0) {
    if (from < r.length) scribble(r.dest + from, r.length - from);
    return;
  }
  uint64_t at = 0;
  for (uint32_t k = 0; k < r.piece_count; at += r.pieces[k].length, ++k) {
    const uint64_t end = at + r.pieces[k].length;
    if (end <= from) continue;
    const uint64_t skip = from > at ? from - at : 0;
    scribble(r.pieces[k].dest + skip, r.pieces[k].length - skip);
  }
}

uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void add(std::atomic<uint64_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

double Faults::uniform() {
  const uint64_t k = draws_.fetch_add(1, std::memory_order_relaxed);
  return static_cast<double>(mix(spec_.seed * 0x100000001b3ull + k) >> 11) * 0x1.0p-53;
}

uint64_t Faults::below(uint64_t n) {
  const uint64_t k = draws_.fetch_add(1, std::memory_order_relaxed);
  return n == 0 ? 0 : mix(spec_.seed * 0x100000001b3ull + k) % n;
}

// The read-level faults: what the kernel "returned" for one read.
class Faults::ReadInjector final : public detail::ReadFaultInjector {
 public:
  explicit ReadInjector(Faults& f) : f_(f) {}
  int64_t on_read(const ReadRequest& req, uint64_t offset, std::byte* target, uint64_t length, bool direct,
                  int64_t res) override {
    (void)req;
    (void)offset;
    (void)length;
    const FaultSpec& s = f_.spec_;
    Counters& c = f_.counters_;
    add(c.reads);
    if (res <= 0) return res;  // real errors and end of file pass through
    if (f_.storm_left_.load(std::memory_order_relaxed) > 0 &&
        f_.storm_left_.fetch_sub(1, std::memory_order_relaxed) > 0) {
      add(c.eagain);
      scribble(target, static_cast<uint64_t>(res));
      return -EAGAIN;
    }
    if (s.eagain > 0 && f_.uniform() < s.eagain) {
      f_.storm_left_.store(s.storm_length, std::memory_order_relaxed);
      add(c.eagain);
      scribble(target, static_cast<uint64_t>(res));
      return -EAGAIN;
    }
    if (s.eintr > 0 && f_.uniform() < s.eintr) {
      add(c.eintr);
      scribble(target, static_cast<uint64_t>(res));
      return -EINTR;
    }
    if (s.read_eio > 0 && f_.uniform() < s.read_eio) {
      add(c.read_eio);
      scribble(target, static_cast<uint64_t>(res));
      return -EIO;
    }
    if (s.short_read > 0 && f_.uniform() < s.short_read) {
      // O_DIRECT reads are short only by whole blocks (a partial block means
      // end of file there).
      const uint64_t unit = direct ? detail::kDirectAlign : 1;
      const uint64_t units = static_cast<uint64_t>(res) / unit;
      if (units >= 2) {
        const int64_t keep = static_cast<int64_t>((1 + f_.below(units - 1)) * unit);
        add(c.short_reads);
        if (target != nullptr) scribble(target + keep, static_cast<uint64_t>(res - keep));
        return keep;
      }
    }
    return res;
  }

 private:
  Faults& f_;
};

namespace {

// Completion-level faults around a real backend. Requests are tracked by a
// slot put in user_data, so a completion can be changed knowing its request.
class FaultyBackend final : public IoBackend {
 public:
  FaultyBackend(std::unique_ptr<IoBackend> inner, std::shared_ptr<FileTable> files, Faults& faults)
      : inner_(std::move(inner)), files_(std::move(files)), faults_(faults) {
    fallback_reason_ = inner_->fallback_reason();
  }

  absl::Status submit(std::span<const ReadRequest> requests) override {
    std::vector<ReadRequest> tagged;
    tagged.reserve(requests.size());
    std::vector<uint32_t> taken;
    for (const ReadRequest& r : requests) {
      uint32_t slot;
      if (free_.empty()) {
        slot = static_cast<uint32_t>(reqs_.size());
        reqs_.push_back(r);
      } else {
        slot = free_.back();
        free_.pop_back();
        reqs_[slot] = r;
      }
      taken.push_back(slot);
      ReadRequest t = r;
      t.user_data = slot;
      tagged.push_back(t);
    }
    absl::Status st = inner_->submit(tagged);
    if (!st.ok()) {
      free_.insert(free_.end(), taken.begin(), taken.end());
      return st;
    }
    in_flight_ += requests.size();
    return absl::OkStatus();
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_completions, std::chrono::nanoseconds timeout) override {
    using Clock = std::chrono::steady_clock;
    const bool forever = timeout == std::chrono::nanoseconds::max();
    const Clock::time_point deadline = forever ? Clock::time_point::max() : Clock::now() + timeout;
    size_t got = 0;
    for (;;) {
      // Held completions whose delay is over.
      const Clock::time_point now = Clock::now();
      while (!held_.empty() && held_.front().first <= now) {
        out.push_back(std::move(held_.front().second));
        held_.pop_front();
        --in_flight_;
        ++got;
      }
      if (got >= min_completions || in_flight_ == 0) return got;
      std::vector<ReadCompletion> fresh;
      if (inner_->in_flight() > 0) {
        // Wake up in time for the next held completion.
        Clock::time_point until = deadline;
        if (!held_.empty()) until = std::min(until, held_.front().first);
        const auto wait = until == Clock::time_point::max()
                              ? std::chrono::nanoseconds::max()
                              : std::max(std::chrono::nanoseconds(0),
                                         std::chrono::duration_cast<std::chrono::nanoseconds>(until - Clock::now()));
        inner_->reap(fresh, 1, wait);
      } else if (!held_.empty()) {
        const Clock::time_point until = std::min(deadline, held_.front().first);
        std::this_thread::sleep_until(until);
      } else {
        return got;  // the inner backend has nothing more to give
      }
      for (ReadCompletion& c : fresh) {
        ReadCompletion changed = apply(std::move(c));
        if (faults_.spec().latency > 0 && faults_.uniform() < faults_.spec().latency) {
          add(faults_.counters().delayed);
          held_.emplace_back(Clock::now() + faults_.spec().latency_spike, std::move(changed));
          // Keep the queue ordered by release time (spikes all have the same length).
          continue;
        }
        out.push_back(std::move(changed));
        --in_flight_;
        ++got;
      }
      if (got >= min_completions) return got;
      if (Clock::now() >= deadline) return got;
    }
  }

  size_t in_flight() const override { return in_flight_; }
  std::string name() const override { return inner_->name(); }
  IoStats stats() const override { return inner_->stats(); }

 private:
  ReadCompletion apply(ReadCompletion c) {
    const uint32_t slot = static_cast<uint32_t>(c.user_data);
    const ReadRequest r = reqs_[slot];
    free_.push_back(slot);
    c.user_data = r.user_data;
    add(faults_.counters().completions);
    if (!c.status.ok()) return c;
    const FaultSpec& s = faults_.spec();
    if (s.eio > 0 && faults_.uniform() < s.eio) {
      add(faults_.counters().eio);
      scribble_request(r, 0);
      c.status = io_error(files_->path(r.file), r.offset, "read (injected)", EIO);
      c.bytes = 0;
    } else if (s.wrong_length > 0 && r.length > 0 && faults_.uniform() < s.wrong_length) {
      add(faults_.counters().wrong_length);
      // Shorter (the tail never written), or longer than asked.
      if (faults_.below(2) == 0) {
        c.bytes = faults_.below(r.length);
        scribble_request(r, c.bytes);
      } else {
        c.bytes = r.length + 1 + faults_.below(4096);
      }
    }
    return c;
  }

  std::unique_ptr<IoBackend> inner_;
  std::shared_ptr<FileTable> files_;
  Faults& faults_;
  std::vector<ReadRequest> reqs_;  // slot -> the caller's request
  std::vector<uint32_t> free_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, ReadCompletion>> held_;
  size_t in_flight_ = 0;
};

}  // namespace

Faults::Faults(FaultSpec spec) : spec_(spec), injector_(std::make_unique<ReadInjector>(*this)) {
  detail::set_read_fault_injector(injector_.get());
}

Faults::~Faults() { detail::set_read_fault_injector(nullptr); }

IoBackendFactory Faults::factory() {
  return [this](std::shared_ptr<FileTable> files, IoOptions options) -> absl::StatusOr<std::unique_ptr<IoBackend>> {
    auto inner = make_io_backend(files, options);
    if (!inner.ok()) return inner.status();
    return wrap(*std::move(inner), std::move(files));
  };
}

std::unique_ptr<IoBackend> Faults::wrap(std::unique_ptr<IoBackend> inner, std::shared_ptr<FileTable> files) {
  return std::make_unique<FaultyBackend>(std::move(inner), std::move(files), *this);
}

FaultCounts Faults::counts() const {
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  FaultCounts c;
  c.reads = ld(counters_.reads);
  c.short_reads = ld(counters_.short_reads);
  c.eintr = ld(counters_.eintr);
  c.eagain = ld(counters_.eagain);
  c.read_eio = ld(counters_.read_eio);
  c.completions = ld(counters_.completions);
  c.eio = ld(counters_.eio);
  c.wrong_length = ld(counters_.wrong_length);
  c.delayed = ld(counters_.delayed);
  return c;
}

}  // namespace dlfeed::fault
