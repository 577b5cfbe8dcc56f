// SPDX-License-Identifier: Apache-2.0
// The machine's own read rate for whole files, as a plain program gets it:
// N threads each take the next file, pread it whole in pieces into a buffer
// of its own that was touched beforehand, and take the next. Each thread's
// buffer holds --ring-mib MiB (default 256, at least one file): the next
// file goes after the last, wrapping around, as a loader fills the slots of
// its batches, so a small file is not copied into the same cache-hot bytes
// again and again. No dlfeed code, no planning, no decode.
// bench/large_samples.py sets dlfeed against it.
//
//   build/bench/pread_yardstick [--threads N] [--piece BYTES] [--rounds R] [--ring-mib M] FILE...
//
// Prints one JSON line: the bytes of one pass over the files, each round's
// seconds and GB/s, and the median GB/s. --threads 0 (the default): as many
// threads as the CPUs the process may run on.
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Free {
  void operator()(char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, Free>;

int usage() {
  std::fprintf(stderr, "usage: pread_yardstick [--threads N] [--piece BYTES] [--rounds R] [--ring-mib M] FILE...\n");
  return 2;
}

// One pass: every file read whole by one of the threads. Returns seconds, or
// a negative value when a read failed (the message is on stderr).
double one_pass(const std::vector<std::string>& files, const std::vector<uint64_t>& sizes, std::vector<Buffer>& buffers,
                uint64_t cap, uint64_t piece) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto work = [&](size_t t) {
    uint64_t used = 0;  // where in the ring the next file goes
    for (size_t i = next++; i < files.size(); i = next++) {
      if (used + sizes[i] > cap) used = 0;
      char* buf = buffers[t].get() + used;
      used += (sizes[i] + 4095) / 4096 * 4096;
      const int fd = ::open(files[i].c_str(), O_RDONLY);
      if (fd < 0) {
        std::fprintf(stderr, "pread_yardstick: open %s: %s\n", files[i].c_str(), std::strerror(errno));
        failed = true;
        return;
      }
      for (uint64_t at = 0; at < sizes[i];) {
        const ssize_t n = ::pread(fd, buf + at, std::min(piece, sizes[i] - at), static_cast<off_t>(at));
        if (n <= 0) {
          std::fprintf(stderr, "pread_yardstick: pread %s at %llu: %s\n", files[i].c_str(),
                       static_cast<unsigned long long>(at), n < 0 ? std::strerror(errno) : "end of file");
          failed = true;
          break;
        }
        at += static_cast<uint64_t>(n);
      }
      ::close(fd);
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t t = 0; t < buffers.size(); ++t) threads.emplace_back(work, t);
  for (auto& th : threads) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return failed ? -1.0 : s;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned threads = 0;
  uint64_t piece = 8ull << 20;
  int rounds = 5;
  uint64_t ring = 256ull << 20;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--threads" || a == "--piece" || a == "--rounds" || a == "--ring-mib") && i + 1 < argc) {
      const unsigned long long v = std::strtoull(argv[++i], nullptr, 10);
      if (a == "--threads") threads = static_cast<unsigned>(v);
      if (a == "--piece") piece = v;
      if (a == "--rounds") rounds = static_cast<int>(v);
      if (a == "--ring-mib") ring = v << 20;
    } else if (a.rfind("--", 0) == 0) {
      return usage();
    } else {
      files.push_back(a);
    }
  }
  if (files.empty() || piece == 0 || rounds < 1) return usage();
  if (threads == 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    threads = sched_getaffinity(0, sizeof(set), &set) == 0 ? static_cast<unsigned>(CPU_COUNT(&set)) : 1;
  }
  std::vector<uint64_t> sizes;
  uint64_t total = 0, largest = 0;
  for (const auto& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) {
      std::fprintf(stderr, "pread_yardstick: stat %s: %s\n", f.c_str(), std::strerror(errno));
      return 1;
    }
    sizes.push_back(static_cast<uint64_t>(st.st_size));
    total += sizes.back();
    largest = std::max(largest, sizes.back());
  }
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(files.size())));
  // Page-aligned buffers (the kernel's copy to an unaligned destination is
  // slower on some CPUs; dlfeed's batch buffers are page-aligned too),
  // touched beforehand: the pass times the reads, not page faults.
  const uint64_t cap = (std::max<uint64_t>({largest, ring, 1}) + 4095) / 4096 * 4096;
  std::vector<Buffer> buffers;
  for (unsigned t = 0; t < threads; ++t) {
    buffers.emplace_back(static_cast<char*>(std::aligned_alloc(4096, cap)));
    if (!buffers.back()) {
      std::fprintf(stderr, "pread_yardstick: out of memory for %u buffers of %llu bytes\n", threads,
                   static_cast<unsigned long long>(cap));
      return 1;
    }
    std::memset(buffers.back().get(), 1, cap);
  }
  std::vector<double> secs;
  for (int r = 0; r < rounds; ++r) {
    const double s = one_pass(files, sizes, buffers, cap, piece);
    if (s < 0) return 1;
    secs.push_back(s);
  }
  std::vector<double> rates;
  for (double s : secs) rates.push_back(total / s / 1e9);
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  std::printf("{\"bytes\": %llu, \"threads\": %u, \"piece\": %llu, \"ring\": %llu, \"gb_per_s\": [",
              static_cast<unsigned long long>(total), threads, static_cast<unsigned long long>(piece),
              static_cast<unsigned long long>(cap));
  for (size_t i = 0; i < rates.size(); ++i) std::printf("%s%.3f", i ? ", " : "", rates[i]);
  std::printf("], \"median_gb_per_s\": %.3f}\n", sorted[sorted.size() / 2]);
  return 0;
}
