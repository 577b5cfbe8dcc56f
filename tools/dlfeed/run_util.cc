// SPDX-License-Identifier: Apache-2.0
#include "run_util.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>

#include <unistd.h>

namespace dlfeed::cli {

uint64_t hash_bytes(std::span<const std::byte> b, uint64_t seed) {
  uint64_t h = seed ^ (b.size() * 0x9E3779B97F4A7C15ull);
  size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    uint64_t v;
    std::memcpy(&v, b.data() + i, 8);
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  if (i < b.size()) std::memcpy(&tail, b.data() + i, b.size() - i);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  return h ^ (h >> 31);
}

uint64_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const bool ok = std::fscanf(f, "%llu %llu", &size, &resident) == 2;
  std::fclose(f);
  return ok ? resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

namespace {
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

extern "C" void on_interrupt(int) { interrupted.store(true, std::memory_order_relaxed); }
}  // namespace

void catch_interrupt() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_RESTART;  // once; system calls go on
  ::sigaction(SIGINT, &sa, nullptr);
}

bool interrupt_requested() { return interrupted.load(std::memory_order_relaxed); }

}  // namespace dlfeed::cli
