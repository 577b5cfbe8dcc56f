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
#include <mutex>
#include <thread>

#include "dlfeed/s3/s3.h"
#include "s3/client.h"

namespace dlfeed::s3::detail {
namespace {

using namespace std::chrono_literals;

// Forks while another thread holds `m` for `hold`; the child takes `m` once
// and exits 0. Whether the child ended within `wait` (it is killed otherwise).
bool child_takes_mutex_held_at_fork(std::mutex& m, std::chrono::milliseconds hold, std::chrono::milliseconds wait) {
  std::atomic<bool> held{false};
  std::thread t([&] {
    std::lock_guard<std::mutex> lock(m);
    held = true;
    std::this_thread::sleep_for(hold);
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
  EXPECT_TRUE(child_takes_mutex_held_at_fork(m, 200ms, 10s)) << "the child hung on a mutex locked at fork()";
  fork_unguard(&m);
}

TEST(S3Fork, UnguardedTheChildWouldHang) {  // what the guard is for: the same fork, no guard
  std::mutex m;
  EXPECT_FALSE(child_takes_mutex_held_at_fork(m, 200ms, 1s));  // hung: it never ends
}

TEST(S3Fork, TheStoreAndThePacerAreGuarded) {
  const size_t before = fork_guarded();
  ASSERT_TRUE(install().ok());
  // The pacer (once per process) and the store installed now, at least.
  EXPECT_GE(fork_guarded(), before + 1);
  EXPECT_GE(fork_guarded(), 2u);
}

}  // namespace
}  // namespace dlfeed::s3::detail
