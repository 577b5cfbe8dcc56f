// SPDX-License-Identifier: Apache-2.0
// raw_read: the storage's own limit for a dataset's access pattern, as the
// yardstick for the loader (bench/loader_vs_device.py). A thin command line
// over dlfeed::raw_read (include/dlfeed/io/raw_read.h), the measurement
// `dlfeed calibrate` also makes: exactly the sample extents the loader would
// read, in the same order (the same strategy and seed), with no planning,
// decode or batching:
//
//   raw_read --mode io_uring --qd 32 --strategy global_shuffle DATA   # deep queue
//   raw_read --mode pread DATA                                       # one thread
//   raw_read --mode evict DATA      # only drop the files' cached pages
//   raw_read --strategy block_shuffle --block-size 64 --window 16 DATA
//
// Order flags as `dlfeed order`: --strategy, --seed (42), --epoch (0),
// --buffer-size, --block-size, --window.
//
// --evict (default on) drops the files' pages first (fdatasync, then
// posix_fadvise(DONTNEED): no root needed), so the read is cold. Prints one
// line of key=value pairs. Reads the whole order (no bound), unlike calibrate.
#include <cstdio>
#include <string>
#include <vector>

#include "dev/raw_read.h"
#include "dlfeed/format/format.h"
#include "dlfeed/order/order.h"

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "raw_read: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "io_uring", strategy = "global_shuffle", name;
  uint32_t qd = 32;
  uint64_t seed = 42, epoch = 0;
  dlfeed::OrderParams params;
  bool evict = true;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    try {
      if (s == "--mode")
        mode = value();
      else if (s == "--qd")
        qd = static_cast<uint32_t>(std::stoul(value()));
      else if (s == "--strategy")
        strategy = value();
      else if (s == "--seed")
        seed = std::stoull(value());
      else if (s == "--epoch")
        epoch = std::stoull(value());
      else if (s == "--buffer-size")
        params.buffer_size = std::stoull(value());
      else if (s == "--block-size")
        params.block_size = std::stoull(value());
      else if (s == "--window")
        params.window = std::stoull(value());
      else if (s == "--name")
        name = value();
      else if (s == "--no-evict")
        evict = false;
      else if (s.rfind("--", 0) == 0)
        return fail("unknown flag " + s);
      else
        paths.push_back(s);
    } catch (const std::exception&) {
      return fail("bad number after " + s);
    }
  }
  if (paths.empty()) return fail("give a dataset path");
  if (mode != "io_uring" && mode != "pread" && mode != "evict") {
    return fail("unknown --mode " + mode + " (io_uring, pread, evict)");
  }
  dlfeed::FormatOptions fo;
  fo.name = name;
  auto index = dlfeed::open_dataset(paths, fo);
  if (!index.ok()) return fail(std::string(index.status().message()));
  if (evict || mode == "evict") {
    if (auto st = dlfeed::evict_pages(index->files); !st.ok()) return fail(std::string(st.message()));
  }
  if (mode == "evict") {
    std::printf("evicted=%zu\n", index->files.size());
    return 0;
  }
  dlfeed::OrderSpec spec;
  spec.strategy = strategy;
  spec.seed = seed;
  spec.epoch = epoch;
  spec.params = params;
  auto ids = dlfeed::rank_order(dlfeed::FileLayout::of(*index), spec);
  if (!ids.ok()) return fail(std::string(ids.status().message()));
  dlfeed::RawReadOptions o;
  o.reader = mode == "pread" ? dlfeed::RawReader::kPread : dlfeed::RawReader::kIoUring;
  o.queue_depth = qd;
  auto r = dlfeed::raw_read(*index, *ids, o);
  if (!r.ok()) return fail(std::string(r.status().message()));
  std::printf("mode=%s qd=%u samples=%llu bytes=%llu seconds=%.4f mib_s=%.1f samples_s=%.0f\n", mode.c_str(),
              mode == "io_uring" ? qd : 1, static_cast<unsigned long long>(r->samples),
              static_cast<unsigned long long>(r->bytes), r->seconds, r->mib_per_s(), r->samples_per_s());
  return 0;
}
