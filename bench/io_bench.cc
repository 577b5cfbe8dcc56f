// SPDX-License-Identifier: Apache-2.0
// Random reads through each I/O backend: reads per second and bytes per
// second with `depth` reads kept in flight. Buffered runs read a 64 MiB file
// that is in the page cache after the first pass, so they measure the cost
// per read (syscalls, wake-ups, copies); O_DIRECT runs measure the device.
//
//   io_bench --benchmark_filter='RandomRead/.*'
// Arguments: backend (0 sync, 1 thread_pool, 2 io_uring), block bytes,
// depth (ring entries / threads / reads in flight), direct (0/1), files
// (io_uring: 1 registers the file with the ring, 0 passes its fd).
//
//   io_bench --benchmark_filter='RandomRead/backend:2/block:4096/depth:64/direct:0' --benchmark_repetitions=5

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/io/io_backend.h"

namespace {

constexpr uint64_t kFileSize = 64ull << 20;
constexpr size_t kReadsPerIteration = 256;

// The bench file, written once per process and removed at exit.
const std::string& bench_file() {
  static const std::string path = [] {
    std::string p =
        (std::filesystem::temp_directory_path() / absl::StrCat("dlfeed-io-bench-", ::getpid(), ".bin")).string();
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    std::vector<char> block(1 << 20);
    std::mt19937_64 rng(1);
    for (uint64_t at = 0; at < kFileSize; at += block.size()) {
      for (auto& c : block) c = static_cast<char>(rng());
      f.write(block.data(), static_cast<std::streamsize>(block.size()));
    }
    std::atexit([] { std::filesystem::remove(bench_file()); });
    return p;
  }();
  return path;
}

void BM_RandomRead(benchmark::State& state) {
  const auto kind =
      std::array{dlfeed::IoKind::kSync, dlfeed::IoKind::kThreadPool, dlfeed::IoKind::kIoUring}[state.range(0)];
  const uint64_t block = static_cast<uint64_t>(state.range(1));
  const auto depth = static_cast<uint32_t>(state.range(2));
  const bool direct = state.range(3) != 0;
  const bool registered = state.range(4) != 0;

  auto table = std::make_shared<dlfeed::FileTable>(dlfeed::FileTableOptions{.direct = direct});
  uint32_t file = table->add(bench_file());
  auto io = dlfeed::make_io_backend(
      table, {.kind = kind, .queue_depth = depth, .register_files = registered, .threads = depth, .direct = direct});
  if (!io.ok()) {
    state.SkipWithError(std::string(io.status().message()).c_str());
    return;
  }
  dlfeed::IoBackend& backend = **io;
  state.SetLabel(backend.name());

  std::vector<std::byte> buffers(depth * block);
  std::vector<uint32_t> free_slots;
  std::mt19937_64 rng(2);
  std::vector<dlfeed::ReadRequest> batch;
  std::vector<dlfeed::ReadCompletion> done;
  const uint64_t blocks = kFileSize / block;
  for (auto _ : state) {
    free_slots.clear();
    for (uint32_t s = 0; s < depth; ++s) free_slots.push_back(s);
    size_t issued = 0;
    size_t completed = 0;
    while (completed < kReadsPerIteration) {
      batch.clear();
      while (issued < kReadsPerIteration && !free_slots.empty()) {
        uint32_t slot = free_slots.back();
        free_slots.pop_back();
        batch.push_back({file, (rng() % blocks) * block, block, buffers.data() + slot * block, slot});
        ++issued;
      }
      if (!batch.empty() && !backend.submit(batch).ok()) {
        state.SkipWithError("submit failed");
        return;
      }
      done.clear();
      backend.reap(done, 1, std::chrono::nanoseconds::max());
      for (const auto& c : done) {
        if (!c.status.ok()) {
          state.SkipWithError(std::string(c.status.message()).c_str());
          return;
        }
        free_slots.push_back(static_cast<uint32_t>(c.user_data));
        ++completed;
      }
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kReadsPerIteration));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kReadsPerIteration * block));
  dlfeed::IoStats s = backend.stats();
  state.counters["submits_per_read"] =
      s.reads == 0 ? 0.0 : static_cast<double>(s.submit_calls) / static_cast<double>(s.reads);
}

BENCHMARK(BM_RandomRead)
    ->ArgNames({"backend", "block", "depth", "direct", "files"})
    ->ArgsProduct({{0, 1, 2}, {4096, 65536}, {1, 16, 64}, {0}, {1}})
    ->Args({2, 4096, 64, 0, 0})
    ->Args({2, 4096, 1, 0, 0})
    ->Args({0, 4096, 1, 1, 1})
    ->Args({1, 4096, 16, 1, 1})
    ->Args({2, 4096, 64, 1, 1})
    ->Args({2, 65536, 64, 1, 1})
    ->UseRealTime();

// FileTable::check_open_files (a loader's check at each epoch's start for
// files rewritten in place): 1024 descriptors open, among `registered`
// files (the others never opened).
//   io_bench --benchmark_filter='CheckOpenFiles' --benchmark_repetitions=5
void BM_CheckOpenFiles(benchmark::State& state) {
  const size_t open = 1024, registered = static_cast<size_t>(state.range(0));
  dlfeed::FileTable table({.max_open = open});
  const std::string dir = (std::filesystem::temp_directory_path() / absl::StrCat("dlfeed-ck-", ::getpid())).string();
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < open; ++i) {
    const std::string p = absl::StrCat(dir, "/f", i);
    std::ofstream(p) << "x";
    (void)table.pin(table.add(p));  // opened, then kept open unpinned
  }
  for (size_t i = open; i < registered; ++i)
    table.add(absl::StrCat(dir, "/never-", i), dlfeed::FileIdentity{1, 1, 1, 0});
  for (auto _ : state) benchmark::DoNotOptimize(table.check_open_files());
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_CheckOpenFiles)->ArgName("registered")->Arg(1024)->Arg(1000000)->Unit(benchmark::kMicrosecond);

}  // namespace
