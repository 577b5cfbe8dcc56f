// SPDX-License-Identifier: Apache-2.0
// Private: what every stage that hands work to oneTBB shares: the TSan
// handshake, and the bookkeeping that keeps a forked child out of a oneTBB
// pool it did not inherit.
#pragma once

#include <mutex>

#include "absl/status/status.h"
#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::base {

// oneTBB's own synchronization is inside libtbb, which ThreadSanitizer does
// not see; in TSan builds every task body passes through one mutex at its
// start and end (and the threads that spawn and join the tasks do too), so
// the happens-before edges TBB provides are visible to the checker.
// Elsewhere it compiles to nothing.
#if defined(__SANITIZE_THREAD__)
std::mutex& tsan_handshake_mutex();
inline void tsan_handshake() { std::lock_guard<std::mutex> lock(tsan_handshake_mutex()); }
#else
inline void tsan_handshake() {}
#endif

/// OK, or why this process cannot run a pipeline: it was forked while
/// pipelines were running in its parent. oneTBB's threads and locks do not
/// survive fork(), and a pipeline started in such a child crashes inside
/// libtbb (a torch DataLoader's fork workers after the parent iterated).
absl::Status fork_check();

/// True in a child of fork() whose parent (or an ancestor before it) had
/// started oneTBB's workers: the child inherits the pool's bookkeeping but
/// none of its threads, so work queued to an arena would wait forever.
/// Pipelines made in such a process run every stage in turn on their own
/// thread and never call into oneTBB (a DataLoader worker forked after the
/// parent finished an epoch decodes there, on one thread).
bool tbb_unusable();
/// Called before work is handed to oneTBB: from then on a child forked from
/// this process knows that oneTBB's workers may have started here.
void note_tbb_started();
/// Installs (once) the fork handler that keeps the two above true in a child.
void watch_forks();

/// While one lives, an epoch whose tasks run in oneTBB is running in this
/// process: a child forked meanwhile fails fork_check().
class RunningEpoch {
 public:
  explicit RunningEpoch(bool counts);
  ~RunningEpoch() { end(); }
  RunningEpoch(const RunningEpoch&) = delete;
  RunningEpoch& operator=(const RunningEpoch&) = delete;
  /// Ends it early (before the end of the epoch is handed out).
  void end();

 private:
  bool on_;
};

}  // namespace dlfeed::base
