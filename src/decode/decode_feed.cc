// SPDX-License-Identifier: Apache-2.0
#include "decode/decode_feed.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/exception_status.h"
#include "base/tbb.h"
#include "base/thread_name.h"

namespace dlfeed::inline DLFEED_ABI::decode {

DecodeFeed::DecodeFeed(tbb::task_arena& arena, size_t tokens)
    : arena_(&arena), tokens_(tokens == 0 ? 1 : tokens), decoded_(tokens_, nullptr) {}

void DecodeFeed::begin(std::function<void(batch::Work&)> decode, std::function<void(batch::Work&)> collate) {
  std::lock_guard<std::mutex> lock(mu_);
  decode_ = std::move(decode);
  collate_ = std::move(collate);
  handed_ = next_ = 0;
  thrown_ = nullptr;
}

void DecodeFeed::wait_for_token() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return handed_ - next_ < tokens_; });
}

void DecodeFeed::hand(batch::Work& w) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    w.handed = handed_++;
  }
  // On the thread that completes the reads (an engine's, or this one): the
  // decode goes to the arena's queue, and that thread goes on at once. The
  // task holds two plain pointers, written under the TSan handshake (libtbb
  // hands the task over where ThreadSanitizer cannot see it).
  w.when_read([this, work = &w] {
    // Nothing to decode (every sample read into place): the batch's few
    // microseconds of bookkeeping are done here; waking a worker for them
    // cost more (docs/performance.md, "The decode stage's hand-off").
    if (work->nothing_to_decode()) {
      run(*work);
      return;
    }
    detail::ProcessNamed named;  // a worker it starts is not named "dlfeed-io"
#if defined(__SANITIZE_THREAD__)
    std::lock_guard<std::mutex> lock(base::tsan_handshake_mutex());
#endif
    arena_.load(std::memory_order_acquire)->enqueue([this, work] {
      base::tsan_handshake();
      run(*work);
    });
  });
}

void DecodeFeed::run(batch::Work& w) {
  try {
    decode_(w);
  } catch (const std::exception& e) {
    w.error = base::exception_status("loader pipeline", e);
    w.batch.reset();
  } catch (...) {
    w.error = absl::InternalError("loader pipeline: an unknown exception in decode");
    w.batch.reset();
  }
  base::tsan_handshake();
  collate_in_order(w);
  base::tsan_handshake();
}

void DecodeFeed::collate_in_order(batch::Work& w) {
  std::unique_lock<std::mutex> lock(mu_);
  // At most `tokens` batches are in flight, so the slots of next ..
  // next + tokens - 1 are distinct.
  decoded_[w.handed % tokens_] = &w;
  if (collating_) return;  // the worker collating takes it (w may be gone once the lock is let go)
  collating_ = true;
  while (batch::Work* c = decoded_[next_ % tokens_]) {
    decoded_[next_ % tokens_] = nullptr;
    lock.unlock();
    std::exception_ptr thrown;
    try {
      collate_(*c);  // may drop the work
    } catch (...) {
      thrown = std::current_exception();
    }
    lock.lock();
    if (thrown && !thrown_) thrown_ = thrown;
    ++next_;
    cv_.notify_all();
  }
  collating_ = false;
}

void DecodeFeed::wait_all() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return next_ == handed_; });
}

void DecodeFeed::finish() {
  wait_all();
  base::tsan_handshake();
  std::exception_ptr thrown;
  {
    std::lock_guard<std::mutex> lock(mu_);
    thrown = std::exchange(thrown_, nullptr);
  }
  if (thrown) std::rethrow_exception(thrown);
}

}  // namespace dlfeed::decode
