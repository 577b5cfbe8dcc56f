// raw_read: the storage's own limit for a dataset's access pattern, as the
// yardstick for the loader (bench/loader_vs_device.py). It reads exactly the
// sample extents the loader would read, in the same order (the same strategy
// and seed), with no planning, decode or batching:
//
//   raw_read --mode io_uring --qd 32 --strategy global_shuffle DATA   # deep queue
//   raw_read --mode pread DATA                                       # one thread
//   raw_read --mode evict DATA      # only drop the files' cached pages
//
// --evict (default on) drops the files' pages first (fdatasync, then
// posix_fadvise(DONTNEED): no root needed), so the read is cold. Prints one
// line of key=value pairs.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dlfeed/batch/batch.h"
#include "dlfeed/format/format.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/io/io_backend.h"
#include "dlfeed/order/order.h"

namespace {

struct Args {
  std::string mode = "io_uring";
  uint32_t qd = 32;
  std::string strategy = "global_shuffle";
  uint64_t seed = 42;
  std::string name;
  bool evict = true;
  std::vector<std::string> paths;
};

bool evict_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  ::fdatasync(fd);  // dirty pages cannot be dropped
  const bool ok = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "raw_read: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (s == "--mode") a.mode = value();
    else if (s == "--qd") a.qd = static_cast<uint32_t>(std::stoul(value()));
    else if (s == "--strategy") a.strategy = value();
    else if (s == "--seed") a.seed = std::stoull(value());
    else if (s == "--name") a.name = value();
    else if (s == "--no-evict") a.evict = false;
    else if (s.rfind("--", 0) == 0) return fail("unknown flag " + s);
    else a.paths.push_back(s);
  }
  if (a.paths.empty()) return fail("give a dataset path");
  dlfeed::FormatOptions fo;
  fo.name = a.name;
  auto index = dlfeed::open_dataset(a.paths, fo);
  if (!index.ok()) return fail(std::string(index.status().message()));
  if (a.evict || a.mode == "evict") {
    for (const auto& f : index->files) {
      if (!evict_file(f)) return fail("cannot evict " + f);
    }
  }
  if (a.mode == "evict") {
    std::printf("evicted=%zu\n", index->files.size());
    return 0;
  }
  dlfeed::OrderSpec spec;
  spec.strategy = a.strategy;
  spec.seed = a.seed;
  auto ids = dlfeed::rank_order(dlfeed::FileLayout::of(*index), spec);
  if (!ids.ok()) return fail(std::string(ids.status().message()));

  auto files = std::make_shared<dlfeed::FileTable>();
  std::vector<uint32_t> fid;
  for (const auto& f : index->files) fid.push_back(files->add(f));
  std::vector<dlfeed::ReadRequest> reqs;
  uint64_t max_len = 0, total = 0;
  for (uint64_t id : *ids) {
    const dlfeed::SampleRef& r = index->samples[id];
    for (const dlfeed::Extent& e : r.extents) {
      reqs.push_back({fid[r.file], e.offset, e.length, nullptr, reqs.size()});
      max_len = std::max(max_len, e.length);
      total += e.length;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (a.mode == "pread") {
    dlfeed::ByteBuffer buf(max_len);
    std::vector<int> fds;
    for (const auto& f : index->files) fds.push_back(::open(f.c_str(), O_RDONLY));
    for (const auto& q : reqs) {
      uint64_t done = 0;
      while (done < q.length) {
        const ssize_t n = ::pread(fds[q.file], buf.data(), q.length - done, static_cast<off_t>(q.offset + done));
        if (n <= 0) return fail("pread failed");
        done += static_cast<uint64_t>(n);
      }
    }
    for (int fd : fds) ::close(fd);
  } else if (a.mode == "io_uring") {
    dlfeed::IoOptions io;
    io.kind = dlfeed::IoKind::kIoUring;
    io.queue_depth = a.qd;
    io.max_bytes_in_flight = 0;  // exactly qd reads in the kernel, whatever their size
    auto backend = dlfeed::make_io_backend(files, io);
    if (!backend.ok()) return fail(std::string(backend.status().message()));
    // One buffer per queue slot; keep the queue full.
    std::vector<dlfeed::ByteBuffer> bufs(a.qd, dlfeed::ByteBuffer(max_len));
    std::vector<uint32_t> free_slots;
    for (uint32_t s = 0; s < a.qd; ++s) free_slots.push_back(s);
    std::vector<dlfeed::ReadCompletion> done;
    size_t next = 0;
    while (next < reqs.size() || (*backend)->in_flight() > 0) {
      std::vector<dlfeed::ReadRequest> batch;
      while (next < reqs.size() && !free_slots.empty()) {
        dlfeed::ReadRequest q = reqs[next++];
        const uint32_t slot = free_slots.back();
        free_slots.pop_back();
        q.dest = bufs[slot].data();
        q.user_data = slot;
        batch.push_back(q);
      }
      if (!batch.empty()) {
        if (auto st = (*backend)->submit(batch); !st.ok()) return fail(std::string(st.message()));
      }
      done.clear();
      (*backend)->reap(done, 1, std::chrono::seconds(10));
      for (const auto& c : done) {
        if (!c.status.ok()) return fail(std::string(c.status.message()));
        free_slots.push_back(static_cast<uint32_t>(c.user_data));
      }
    }
  } else {
    return fail("unknown --mode " + a.mode + " (io_uring, pread, evict)");
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("mode=%s qd=%u samples=%zu bytes=%llu seconds=%.4f mib_s=%.1f samples_s=%.0f\n", a.mode.c_str(),
              a.mode == "io_uring" ? a.qd : 1, ids->size(), static_cast<unsigned long long>(total), secs,
              total / secs / 1048576.0, ids->size() / secs);
  return 0;
}
