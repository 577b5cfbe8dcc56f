// SPDX-License-Identifier: Apache-2.0
// compare_cpp: "dlfeed from C++" in the side-by-side comparison
// (bench/compare/compare.py). The same protocol as every Python runner there
// (bench/compare/runners.py): create the loader, read a few warm-up batches
// of epoch 0, wait for the read-ahead to settle, drop the files' cached pages
// when --cold, then time one whole epoch (1) from its start, touching one
// byte per 4 KiB of every sample of every field so no delivered byte goes
// unused. Prints one JSON line.
//
//   compare_cpp --fields records_0,labels --batch-size 32 --strategy global_shuffle --cold DATA
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dlfeed/loader.h"

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "compare_cpp: %s\n", msg.c_str());
  return 1;
}

bool evict_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  ::fdatasync(fd);
  const bool ok = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok;
}

uint64_t rss_kib() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "VmRSS:", 6) == 0) kib = std::strtoull(line + 6, nullptr, 10);
  }
  std::fclose(f);
  return kib;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  dlfeed::LoaderOptions o;
  o.order.seed = 42;
  bool cold = false;
  uint64_t warmup = 4;
  double settle_s = 1.0;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (s == "--fields")
      o.fields = split(value());
    else if (s == "--batch-size")
      o.batch_size = static_cast<uint32_t>(std::stoul(value()));
    else if (s == "--strategy")
      o.order.strategy = value();
    else if (s == "--seed")
      o.order.seed = std::stoull(value());
    else if (s == "--buffer-size")
      o.order.params.buffer_size = std::stoull(value());
    else if (s == "--block-size")
      o.order.params.block_size = std::stoull(value());
    else if (s == "--window")
      o.order.params.window = std::stoull(value());
    else if (s == "--threads")
      o.threads = static_cast<uint32_t>(std::stoul(value()));
    else if (s == "--prefetch")
      o.advanced.prefetch = value();
    else if (s == "--warmup-batches")
      warmup = std::stoull(value());
    else if (s == "--settle-s")
      settle_s = std::stod(value());
    else if (s == "--cold")
      cold = true;
    else if (s.rfind("--", 0) == 0)
      return fail("unknown flag " + s);
    else
      o.paths.push_back(s);
  }
  if (o.paths.empty()) return fail("give a dataset path");
  if (cold) o.resident = dlfeed::Mode::kOff;  // a cold epoch measures reads: held in memory, nothing would be read

  const auto t_create = std::chrono::steady_clock::now();
  auto created = dlfeed::Loader::create(o);
  if (!created.ok()) return fail(std::string(created.status().message()));
  std::unique_ptr<dlfeed::Loader> loader = std::move(*created);
  const double create_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_create).count();

  // Warm-up: the first batches of epoch 0 (threads, rings, pools start up).
  if (auto st = loader->start_epoch(0); !st.ok()) return fail(std::string(st.message()));
  for (uint64_t b = 0; b < warmup; ++b) {
    auto batch = loader->next();
    if (!batch.ok()) return fail(std::string(batch.status().message()));
    if (!*batch) break;
  }
  // Let the warm-up's read-ahead finish (no read in flight), so the eviction
  // below leaves nothing of it cached; the new epoch cancels what it holds.
  std::this_thread::sleep_for(std::chrono::duration<double>(settle_s));
  if (cold) {
    for (const auto& f : loader->index().files) {
      if (!evict_file(f)) return fail("cannot evict " + f);
    }
  }
  const uint64_t rss_before = rss_kib();

  uint64_t samples = 0, bytes = 0, touch = 0;
  const auto t0 = std::chrono::steady_clock::now();
  if (auto st = loader->start_epoch(1); !st.ok()) return fail(std::string(st.message()));
  while (true) {
    auto next = loader->next();
    if (!next.ok()) return fail(std::string(next.status().message()));
    const std::shared_ptr<const dlfeed::Batch>& b = *next;
    if (!b) break;
    samples += b->size();
    for (const auto& f : b->fields) {
      bytes += f.bytes.size();
      for (size_t i = 0; i < f.size(); ++i) {
        const std::span<const std::byte> s = f.sample(i);
        for (size_t k = 0; k < s.size(); k += 4096) touch += static_cast<uint8_t>(s[k]);
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "{\"system\": \"dlfeed_cpp\", \"samples\": %llu, \"bytes\": %llu, \"seconds\": %.6f, \"touch\": %llu, "
      "\"rss_before_kib\": %llu, \"create_s\": %.4f, \"io\": \"%s\"}\n",
      static_cast<unsigned long long>(samples), static_cast<unsigned long long>(bytes), secs,
      static_cast<unsigned long long>(touch), static_cast<unsigned long long>(rss_before), create_s,
      loader->stats().io_backend.c_str());
  return 0;
}
