// SPDX-License-Identifier: Apache-2.0
// The IoBackend contract, enforced around a backend dlfeed did not make
// (AdvancedOptions::io_factory). Every request gets a slot; the inner backend
// sees the slot (with a generation, so a late duplicate cannot hit a reused
// slot) as user_data, and each completion is checked against its request
// before the caller's user_data is put back.

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/io/io_backend.h"

namespace dlfeed::inline DLFEED_ABI {
namespace {

class CheckedBackend final : public IoBackend {
 public:
  CheckedBackend(std::unique_ptr<IoBackend> inner, std::shared_ptr<FileTable> files)
      : inner_(std::move(inner)), files_(std::move(files)) {
    fallback_reason_ = inner_->fallback_reason();
  }

  absl::Status submit(std::span<const ReadRequest> requests) override {
    tagged_.clear();
    for (const ReadRequest& r : requests) {
      const uint32_t slot = take_slot();
      slots_[slot].req = r;
      slots_[slot].live = true;
      ReadRequest t = r;
      t.user_data = tag(slot);
      tagged_.push_back(t);
    }
    absl::Status st = inner_->submit(tagged_);
    if (!st.ok()) {  // accepted none: give the slots back
      for (const ReadRequest& t : tagged_) release(slot_of(t.user_data));
      return st;
    }
    live_ += requests.size();
    return absl::OkStatus();
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_completions, std::chrono::nanoseconds timeout) override {
    got_.clear();
    if (inner_->in_flight() > 0) inner_->reap(got_, min_completions, timeout);
    size_t appended = 0;
    for (ReadCompletion& c : got_) {
      const uint32_t slot = slot_of(c.user_data);
      if (slot >= slots_.size() || !slots_[slot].live || tag(slot) != c.user_data) {
        ++violations_;  // a completion for no request in flight: nothing to attribute it to
        continue;
      }
      const ReadRequest& r = slots_[slot].req;
      c.user_data = r.user_data;
      // A checksum from a backend of the caller's is not relied on: without
      // one, the CRC is taken from the bytes in dest (ReadRequest::checksum).
      c.has_crc32c = false;
      if (c.status.ok() && c.bytes != r.length) {
        ++violations_;
        c.status = format_error(
            files_->path(r.file), r.offset, absl::StrCat(r.length, " bytes read"),
            absl::StrCat("a completion reporting ", c.bytes, " bytes from the ", inner_->name(), " backend"));
        c.bytes = 0;
      }
      release(slot);
      --live_;
      out.push_back(std::move(c));
      ++appended;
    }
    // The inner backend has nothing in flight but requests are still open:
    // it lost them. Fail them rather than let the caller wait forever.
    if (live_ > 0 && inner_->in_flight() == 0) {
      for (uint32_t slot = 0; slot < slots_.size(); ++slot) {
        if (!slots_[slot].live) continue;
        const ReadRequest& r = slots_[slot].req;
        ++violations_;
        out.push_back({r.user_data,
                       format_error(files_->path(r.file), r.offset,
                                    absl::StrCat("a completion for the read of ", r.length, " bytes"),
                                    absl::StrCat("none: the ", inner_->name(), " backend dropped the request")),
                       0});
        ++appended;
        release(slot);
        --live_;
      }
    }
    return appended;
  }

  size_t in_flight() const override { return live_; }
  void cancel() override { inner_->cancel(); }
  std::string name() const override { return inner_->name(); }
  IoStats stats() const override {
    IoStats s = inner_->stats();
    s.errors += violations_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  struct Slot {
    ReadRequest req;
    uint32_t generation = 0;
    bool live = false;
  };
  uint64_t tag(uint32_t slot) const { return (uint64_t{slots_[slot].generation} << 32) | slot; }
  static uint32_t slot_of(uint64_t user_data) { return static_cast<uint32_t>(user_data); }
  uint32_t take_slot() {
    if (free_.empty()) {
      slots_.emplace_back();
      return static_cast<uint32_t>(slots_.size() - 1);
    }
    const uint32_t s = free_.back();
    free_.pop_back();
    return s;
  }
  void release(uint32_t slot) {
    slots_[slot].live = false;
    ++slots_[slot].generation;
    free_.push_back(slot);
  }

  std::unique_ptr<IoBackend> inner_;
  std::shared_ptr<FileTable> files_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  std::vector<ReadRequest> tagged_;
  std::vector<ReadCompletion> got_;
  size_t live_ = 0;
  std::atomic<uint64_t> violations_{0};  // stats() may be read from any thread
};

}  // namespace

std::unique_ptr<IoBackend> make_checked_backend(std::unique_ptr<IoBackend> inner, std::shared_ptr<FileTable> files) {
  return std::make_unique<CheckedBackend>(std::move(inner), std::move(files));
}

}  // namespace dlfeed
