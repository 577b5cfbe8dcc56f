// SPDX-License-Identifier: Apache-2.0
#include "base/tbb.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dlfeed::inline DLFEED_ABI::base {

#if defined(__SANITIZE_THREAD__)
std::mutex& tsan_handshake_mutex() {
  static std::mutex mu;
  return mu;
}
#endif

namespace {
std::atomic<int> g_running{0};    // epochs running (their oneTBB tasks live) in this process
std::atomic<int> g_inherited{0};  // in a child of fork(): those of the parent at the fork
int g_parent_pid = 0;
std::atomic<bool> g_tbb_started{false};  // work was handed to oneTBB in this process (or an ancestor)
std::atomic<bool> g_tbb_gone{false};     // forked after that: oneTBB's workers are not in this process
}  // namespace

void watch_forks() {
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork(nullptr, nullptr, [] {
      g_parent_pid = static_cast<int>(::getppid());
      // A child of a child keeps its ancestor's broken TBB state too.
      g_inherited.store(g_inherited.load() + g_running.exchange(0));
      if (g_tbb_started.load()) g_tbb_gone.store(true);
    });
  });
}

bool tbb_unusable() { return g_tbb_gone.load(std::memory_order_relaxed); }

void note_tbb_started() {
  if (g_tbb_started.load(std::memory_order_relaxed)) return;
  watch_forks();
  g_tbb_started.store(true);
}

absl::Status fork_check() {
  const int n = g_inherited.load();
  if (n == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "loader: this process (pid ", ::getpid(), ") was forked from pid ", g_parent_pid, " while ", n,
      " dlfeed epoch(s) were running there, and oneTBB's threads do not survive fork(): start worker processes "
      "with the spawn or forkserver method (torch: DataLoader(..., multiprocessing_context=\"spawn\")), or "
      "before the parent iterates, or after its loaders finished their epoch or were closed"));
}

RunningEpoch::RunningEpoch(bool counts) : on_(counts) {
  if (on_) g_running.fetch_add(1);
}

void RunningEpoch::end() {
  if (std::exchange(on_, false)) g_running.fetch_sub(1);
}

}  // namespace dlfeed::base
