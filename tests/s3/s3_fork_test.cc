// SPDX-License-Identifier: Apache-2.0
// A child of fork() never inherits the s3 state's mutexes locked: fork()
// waits until no thread holds them (a DataLoader worker forked while the
// parent's loader reads would otherwise hang at its first request).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dlfeed/s3/s3.h"
#include "s3/cache.h"
#include "s3/client.h"

namespace dlfeed::s3::detail {
namespace {

using namespace std::chrono_literals;

// Forks while another thread holds `m`; the child takes `m` once and exits
// 0. The holder lets go after `hold`, or (hold 0) only once fork() has
// returned. Whether the child ended within `wait` (it is killed otherwise).
bool child_takes_mutex_held_at_fork(std::mutex& m, std::chrono::milliseconds hold, std::chrono::milliseconds wait) {
  std::atomic<bool> held{false}, forked{false};
  std::thread t([&] {
    std::lock_guard<std::mutex> lock(m);
    held = true;
    if (hold.count() > 0) {
      std::this_thread::sleep_for(hold);
    } else {
      while (!forked) std::this_thread::yield();
    }
  });
  while (!held) std::this_thread::yield();
  const pid_t pid = ::fork();
  if (pid == 0) {
    m.lock();
    m.unlock();
    // Straight to the kernel: under TSan, _exit would report the parent's
    // thread (never joined here) as leaked and exit with its code.
    ::syscall(SYS_exit_group, 0);
  }
  forked = true;
  t.join();
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return false;
    }
    std::this_thread::sleep_for(10ms);
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(S3Fork, AGuardedMutexIsNeverInheritedLocked) {
  std::mutex m;
  fork_guard(&m);
  // fork() waits for the holder (200 ms) to let go.
  EXPECT_TRUE(child_takes_mutex_held_at_fork(m, 200ms, 10s)) << "the child hung on a mutex locked at fork()";
  fork_unguard(&m);
}

TEST(S3Fork, UnguardedTheChildWouldHang) {  // what the guard is for: the same fork, no guard
  std::mutex m;
  EXPECT_FALSE(child_takes_mutex_held_at_fork(m, 0ms, 1s));  // held through the fork: it never ends
}

TEST(S3Fork, AStoreIsGuardedUntilAnotherReplacesIt) {
  ASSERT_TRUE(install().ok());
  const size_t with_one = fork_guarded();
  EXPECT_GE(with_one, 2u) << "the pacer and the store";
  ASSERT_TRUE(install().ok());  // the first store let go: its mutex no longer guarded
  EXPECT_EQ(fork_guarded(), with_one);
}

TEST(S3Fork, APieceCacheIsGuardedForItsLifetime) {
  const size_t before = fork_guarded();
  ObjectCacheOptions o;
  o.dir = std::string(DLFEED_TEST_TMPDIR) + "/s3_fork_cache";
  {
    absl::StatusOr<std::shared_ptr<PieceCache>> cache = PieceCache::open(o);
    ASSERT_TRUE(cache.ok()) << cache.status();
    EXPECT_EQ(fork_guarded(), before + 2);  // its folders' and its ranks' mutexes
  }
  EXPECT_EQ(fork_guarded(), before);
}

}  // namespace
}  // namespace dlfeed::s3::detail
