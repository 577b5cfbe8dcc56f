// SPDX-License-Identifier: Apache-2.0
#include "pipeline/pipeline.h"

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/exception_status.h"
#include "base/tbb.h"
#include "base/thread_name.h"
#include "decode/decode_feed.h"

namespace dlfeed::inline DLFEED_ABI::pipeline {

namespace {
// oneTBB's workers are one process-wide pool: its size is fixed when the
// first arena starts (the default: the cores less one), and a later arena
// asking for more gets only what is left ("The number of workers is
// currently limited to 1"). So that each loader's arena gets the threads it
// was made with, whatever others live, the pool is sized here to the sum of
// every live arena's workers (at least oneTBB's default), through one
// global_control replaced as loaders come and go.
struct WorkerPool {
  std::mutex mu;
  uint64_t workers = 0;  // of live arenas: `threads` each (the thread that runs the epoch is outside them)
  std::unique_ptr<tbb::global_control> control;
  size_t allowed = 0;

  void change(int64_t delta) {
    std::lock_guard<std::mutex> lock(mu);
    workers = static_cast<uint64_t>(static_cast<int64_t>(workers) + delta);
    const size_t dflt = static_cast<size_t>(std::max(1, tbb::info::default_concurrency()));
    const size_t want = std::max(dflt, static_cast<size_t>(workers) + 1);
    if (workers == 0) {
      control.reset();  // no loader: oneTBB's own default again
      allowed = 0;
      return;
    }
    if (want == allowed) return;
    // The smallest of live controls applies: the new one is made first, so
    // growing takes effect when the old one goes.
    auto next = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, want);
    control = std::move(next);
    allowed = want;
  }
};
WorkerPool& worker_pool() {
  static WorkerPool* pool = new WorkerPool;  // never destroyed: loaders may outlive static destruction
  return *pool;
}
}  // namespace

namespace {
// The arena's lazy initialization allocates inside libtbb; doing it under
// the handshake makes it visible to ThreadSanitizer before another loader's
// pipeline thread reads what it made.
void initialize_under_handshake(tbb::task_arena& arena) {
  base::note_tbb_started();
#if defined(__SANITIZE_THREAD__)
  std::lock_guard<std::mutex> lock(base::tsan_handshake_mutex());
#endif
  arena.initialize();
}
}  // namespace

// `threads` workers decode; the one slot kept for a thread from outside is
// the pipeline thread's, which joins only to spread copies (parallel()).
struct Pipeline::Arena {
  explicit Arena(uint32_t threads) : width(threads), arena(static_cast<int>(threads) + 1, 1) {}
  uint32_t width;  // its decode workers
  tbb::task_arena arena;
};

Pipeline::Pipeline(uint32_t threads) : serial_(base::tbb_unusable()), threads_(serial_ ? 1u : std::max(1u, threads)) {
  base::watch_forks();
  if (serial_) return;  // no arena, no feed: run() takes every epoch in turn
  worker_pool().change(static_cast<int64_t>(threads_));
  arenas_.resize(threads_ + 1);
  arenas_[threads_] = std::make_unique<Arena>(threads_);
  current_.store(arenas_[threads_].get(), std::memory_order_release);
  feed_ = std::make_unique<decode::DecodeFeed>(arenas_[threads_]->arena, std::clamp<size_t>(threads_ * 2 + 8, 4, 64));
}

Pipeline::~Pipeline() {
  if (serial_) return;
  feed_.reset();  // waits for every batch handed over: no task is left in any arena
  arenas_.clear();
  worker_pool().change(-static_cast<int64_t>(threads_));
}

void Pipeline::set_width(uint32_t width) {
  if (serial_) return;
  width = std::clamp(width, 1u, threads_);
  std::lock_guard<std::mutex> lock(arenas_mu_);
  std::unique_ptr<Arena>& a = arenas_[width];
  if (a == nullptr) {
    a = std::make_unique<Arena>(width);
    initialize_under_handshake(a->arena);
  }
  current_.store(a.get(), std::memory_order_release);
  feed_->set_arena(a->arena);
}

uint32_t Pipeline::width() const { return serial_ ? 1u : current().width; }

void Pipeline::parallel(size_t n, const std::function<void(size_t)>& body) {
  if (serial_) {
    for (size_t i = 0; i < n; ++i) body(i);
    return;
  }
  // The loop's body is made before the handshake below and handed to
  // parallel_for itself (which keeps a reference to it and calls it), so a
  // worker reads nothing of it before its own handshake: the call reads the
  // capture only after. libtbb's own hand-off of the task is not
  // instrumented; a closure made after the handshake, or a std::cref whose
  // pointer the worker reads before calling, looks unordered to TSan (a
  // worker's first read then races with older writes at that stack address).
  const auto each = [&body](size_t i) {
    base::tsan_handshake();
    body(i);
    base::tsan_handshake();
  };
  tbb::task_arena& arena = current().arena;
  initialize_under_handshake(arena);
  base::tsan_handshake();
  detail::ProcessNamed named;  // a worker it starts is not named after this thread
  // Isolated: while it waits, the calling thread (the pipeline's source
  // stage, say) takes none of the pipeline's other tasks.
  arena.execute([&] {
    tbb::this_task_arena::isolate([&] { tbb::parallel_for(size_t(0), n, each, tbb::simple_partitioner()); });
  });
  base::tsan_handshake();
}

void Pipeline::decode_counted(const decode::Decoder& decoder, batch::Work& w) {
  const uint32_t now = decoding_.fetch_add(1, std::memory_order_relaxed) + 1;
  uint32_t peak = peak_decoding_.load(std::memory_order_relaxed);
  while (now > peak && !peak_decoding_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
  struct Done {
    std::atomic<uint32_t>& n;
    ~Done() { n.fetch_sub(1, std::memory_order_relaxed); }
  } done{decoding_};
  decoder.decode(w);
}

bool Pipeline::run(plan::Lookahead& source, const decode::Decoder& decoder, batch::Collator& collator,
                   const std::atomic<bool>& stop, bool in_turn, const std::function<bool()>& then) {
  // Only epochs that use oneTBB count: a child forked during one in turn
  // without it (serial_) may run pipelines.
  base::RunningEpoch running(!serial_);
  bool threw = false;
  try {
    if (in_turn || serial_) {
      while (batch::Work* w = source.next()) {
        decoder.decode(*w);
        std::shared_ptr<batch::Work> keep = std::move(w->self);
        if (stop) break;
        collator.collate(*w);
      }
    } else {
      run_stages(source, decoder, collator, stop);
    }
  } catch (const std::exception& e) {
    source.drop();
    collator.fail(base::exception_status("loader pipeline", e));
    threw = true;
  }
  source.drop();
  const bool chained = !threw && then && !stop && then();
  // Every task of the epoch done before the consumer hears that it ended:
  // a fork() right after its last batch is not one inside a pipeline (unless
  // the next epoch follows at once).
  if (!chained) running.end();
  collator.end(chained);
  return chained;
}

void Pipeline::run_stages(plan::Lookahead& source, const decode::Decoder& decoder, batch::Collator& collator,
                          const std::atomic<bool>& stop) {
  initialize_under_handshake(current().arena);
  // This thread plans, waits for admission and issues the reads, outside the
  // arena; the workers decode a batch once its reads are done and collate in
  // order (decode_feed.h).
  decode::DecodeFeed& feed = *feed_;
  feed.begin([this, &decoder](batch::Work& w) { decode_counted(decoder, w); },
             [&collator, &stop](batch::Work& w) {
               std::shared_ptr<batch::Work> keep = std::move(w.self);
               if (!stop) collator.collate(w);
             });
  base::tsan_handshake();
  try {
    for (;;) {
      feed.wait_for_token();
      batch::Work* w = source.next();
      if (w == nullptr) break;
      feed.hand(*w);
    }
  } catch (...) {
    source.drop();
    try {
      feed.finish();  // the batches handed over still reference the stages
    } catch (...) {}
    throw;
  }
  feed.finish();
}

}  // namespace dlfeed::pipeline
