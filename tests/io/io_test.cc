// SPDX-License-Identifier: Apache-2.0
// I/O backends: every backend (sync, thread_pool, io_uring) reads random
// extents of generated files byte for byte, many in flight, with O_DIRECT at
// unaligned offsets, past EOF and missing files as error completions, more
// files than the fd cap, and destruction with reads in flight.

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>
#include "../../src/read/read_op.h"  // ReadOp's step, unit-tested below
#include "absl/strings/str_cat.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/io/io_backend.h"
#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed {
namespace {

// EXPECT_CONTAINS(text, part) without gmock.
#define EXPECT_CONTAINS(text, part)                          \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "'" << std::string(text) << "' does not contain '" << (part) << "'"
using std::chrono::milliseconds;

// Byte `o` of generated file `f`: a hash, so a read from the wrong offset or
// file never matches by accident.
std::byte content(uint32_t f, uint64_t o) {
  uint64_t z = (uint64_t{f} << 40) + (o >> 3) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<std::byte>((z >> ((o & 7) * 8)) & 0xff);
}

std::string write_file(const std::string& dir, uint32_t f, uint64_t size) {
  std::string path = absl::StrCat(dir, "/file-", f, ".bin");
  std::string bytes(size, '\0');
  for (uint64_t o = 0; o < size; ++o) bytes[o] = static_cast<char>(content(f, o));
  testing::write_all(path, bytes);
  return path;
}

::testing::AssertionResult matches(uint32_t f, uint64_t offset, const std::byte* got, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    if (got[i] != content(f, offset + i)) {
      return ::testing::AssertionFailure()
             << "file " << f << " offset " << offset + i << " (byte " << i << " of the extent at " << offset << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Reaps until nothing is in flight; fails (rather than hangs) after 10 s.
std::vector<ReadCompletion> reap_all(IoBackend& io) {
  std::vector<ReadCompletion> out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (io.in_flight() > 0) {
    io.reap(out, 1, milliseconds(100));
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << io.name() << ": still " << io.in_flight() << " in flight after 10 s";
      break;
    }
  }
  return out;
}

// Threads of this process that are ours (io_uring's kernel workers, named
// iou-*, come and go on their own).
int user_threads() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(absl::StrCat("/proc/self/task/", e->d_name, "/comm"));
    std::string name;
    if (!std::getline(comm, name)) continue;  // exited meanwhile
    if (name.rfind("iou-", 0) != 0) ++n;
  }
  closedir(d);
  return n;
}

// Whether O_DIRECT works for files in `dir` (tmpfs and some overlays refuse).
bool direct_io_works(const std::string& dir) {
  std::string path = write_file(dir, 999, 8192);
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) return false;
  void* buf = std::aligned_alloc(4096, 4096);
  ssize_t n = ::pread(fd, buf, 4096, 4096);
  std::free(buf);
  ::close(fd);
  return n == 4096;
}

struct BackendCase {
  IoKind kind;
  const char* name;
};

class IoTest : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    if (GetParam().kind == IoKind::kIoUring) {
      absl::Status s = io_uring_available();
      if (!s.ok()) GTEST_SKIP() << "io_uring unavailable here: " << s.message();
    }
    dir_ = testing::scratch_dir();
  }

  std::unique_ptr<IoBackend> make(std::shared_ptr<FileTable> table, IoOptions opts = {}) {
    opts.kind = GetParam().kind;
    auto io = make_io_backend(std::move(table), opts);
    EXPECT_TRUE(io.ok()) << io.status();
    return io.ok() ? *std::move(io) : nullptr;
  }

  std::string dir_;
};

TEST_P(IoTest, RandomExtentsReadBackExactly) {
  auto table = std::make_shared<FileTable>();
  const std::vector<uint64_t> sizes = {1 << 20, 300000, 4097};
  for (uint32_t f = 0; f < sizes.size(); ++f) ASSERT_EQ(table->add(write_file(dir_, f, sizes[f])), f);
  auto io = make(table, {.queue_depth = 16, .threads = 3});
  ASSERT_TRUE(io);

  std::mt19937_64 rng(7);
  const int n = 400;
  std::vector<ReadRequest> reqs(n);
  std::vector<std::vector<std::byte>> bufs(n);
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) {
    uint32_t f = rng() % sizes.size();
    uint64_t off = rng() % sizes[f];
    uint64_t len = rng() % std::min<uint64_t>(sizes[f] - off + 1, 70000);
    if (i % 50 == 0) off = 0, len = sizes[f];  // whole file
    if (i % 50 == 1) len = sizes[f] - off;     // up to EOF exactly
    if (i % 50 == 2) len = 0;                  // empty
    bufs[i].assign(len + 1, std::byte{0xEE});  // +1: a guard byte
    reqs[i] = {f, off, len, bufs[i].data(), static_cast<uint64_t>(i)};
    total += len;
  }
  // Batches of uneven sizes, reaping a little between them.
  std::vector<ReadCompletion> done;
  for (size_t at = 0, b = 1; at < reqs.size(); at += b, b = b * 3 % 97 + 1) {
    size_t m = std::min(b, reqs.size() - at);
    ASSERT_TRUE(io->submit(std::span(reqs).subspan(at, m)).ok());
    io->reap(done, 0, milliseconds(0));
  }
  auto rest = reap_all(*io);
  done.insert(done.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
  ASSERT_EQ(done.size(), reqs.size());
  std::vector<int> seen(n, 0);
  for (const auto& c : done) {
    ASSERT_LT(c.user_data, reqs.size());
    const ReadRequest& r = reqs[c.user_data];
    ++seen[c.user_data];
    ASSERT_TRUE(c.status.ok()) << c.status;
    EXPECT_EQ(c.bytes, r.length);
    EXPECT_TRUE(matches(r.file, r.offset, r.dest, r.length)) << io->name();
    EXPECT_EQ(bufs[c.user_data][r.length], std::byte{0xEE}) << "wrote past the extent";
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), n) << "each request completes exactly once";
  IoStats s = io->stats();
  EXPECT_EQ(s.requests, uint64_t(n));
  EXPECT_EQ(s.completions, uint64_t(n));
  EXPECT_EQ(s.errors, 0u);
  EXPECT_EQ(s.bytes, total);
  EXPECT_GE(s.device_bytes, total);
  EXPECT_EQ(io->in_flight(), 0u);
}

TEST_P(IoTest, ManyInFlight) {
  auto table = std::make_shared<FileTable>();
  const uint64_t size = 1 << 20;
  table->add(write_file(dir_, 0, size));
  table->add(write_file(dir_, 1, size));
  IoOptions opts{.queue_depth = 16, .threads = 4};
  auto io = make(table, opts);
  ASSERT_TRUE(io);
  const size_t n = opts.queue_depth * 4 * 4;  // 256 at once
  std::vector<std::byte> buf(n * 4096);
  std::vector<ReadRequest> reqs;
  for (size_t i = 0; i < n; ++i) {
    uint32_t f = i % 2;
    uint64_t off = (i * 7919 * 61) % (size - 4096);
    reqs.push_back({f, off, 4096, buf.data() + i * 4096, i});
  }
  ASSERT_TRUE(io->submit(reqs).ok());
  EXPECT_EQ(io->in_flight(), n);
  auto done = reap_all(*io);
  ASSERT_EQ(done.size(), n);
  for (const auto& c : done) {
    ASSERT_TRUE(c.status.ok()) << c.status;
    const ReadRequest& r = reqs[c.user_data];
    ASSERT_TRUE(matches(r.file, r.offset, r.dest, r.length));
  }
  if (GetParam().kind == IoKind::kIoUring) {
    // Batched: far fewer submit syscalls than reads.
    EXPECT_LT(io->stats().submit_calls, n / 2);
  }
}

// Reads of a file in the page cache complete inside submit() for io_uring
// (the kernel copies on the submitting thread) and for sync; the thread pool
// completes none there. The loader spreads batches over its engines by this.
TEST_P(IoTest, PageCacheHitsCountAsCompletedAtSubmit) {
  auto table = std::make_shared<FileTable>();
  const uint64_t size = 1 << 20;
  table->add(write_file(dir_, 0, size));  // just written: in the page cache
  auto io = make(table, {.queue_depth = 64, .threads = 2});
  ASSERT_TRUE(io);
  std::vector<std::byte> buf(size);
  std::vector<ReadRequest> reqs;
  for (uint64_t i = 0; i < 64; ++i) reqs.push_back({0, i * 4096 * 3, 4096, buf.data() + i * 4096, i});
  ASSERT_TRUE(io->submit(reqs).ok());
  auto done = reap_all(*io);
  ASSERT_EQ(done.size(), reqs.size());
  for (const auto& c : done) ASSERT_TRUE(c.status.ok()) << c.status;
  const IoStats st = io->stats();
  switch (GetParam().kind) {
    case IoKind::kSync: EXPECT_EQ(st.completed_at_submit, 64u); break;
    case IoKind::kThreadPool: EXPECT_EQ(st.completed_at_submit, 0u); break;
    default:
      EXPECT_GE(st.completed_at_submit, 32u) << "cached 4 KiB reads should complete inline";
      EXPECT_LE(st.completed_at_submit, st.reads);
  }
}

// Large reads: at most max_bytes_in_flight of them in the kernel at once
// (always at least one), and every byte still lands where it should.
TEST_P(IoTest, BytesInFlightAreCapped) {
  if (GetParam().kind != IoKind::kIoUring) GTEST_SKIP() << "the cap is io_uring's";
  auto table = std::make_shared<FileTable>();
  const uint64_t size = 4 << 20;
  table->add(write_file(dir_, 0, size));
  const uint64_t len = 64 << 10;
  std::vector<std::byte> buf(size);
  std::vector<ReadRequest> reqs;
  for (uint64_t i = 0; i < size / len; ++i) reqs.push_back({0, i * len, len, buf.data() + i * len, i});
  for (uint64_t cap : {uint64_t{100} << 10, uint64_t{1}, uint64_t{0}}) {
    IoOptions opts{.queue_depth = 64, .max_bytes_in_flight = cap};
    auto io = make(table, opts);
    ASSERT_TRUE(io);
    ASSERT_TRUE(io->submit(reqs).ok());
    auto done = reap_all(*io);
    ASSERT_EQ(done.size(), reqs.size());
    for (const auto& c : done) ASSERT_TRUE(c.status.ok()) << c.status;
    ASSERT_TRUE(matches(0, 0, buf.data(), size));
    const uint64_t peak = io->stats().peak_bytes_in_kernel;
    if (cap == 0) {
      EXPECT_GT(peak, len) << "no cap: many reads in the ring at once";
    } else {
      EXPECT_EQ(peak, std::max(cap / len, uint64_t{1}) * len) << "cap " << cap;
    }
  }
}

// A few files are registered with the ring (reads by index, IOSQE_FIXED_FILE)
// and stay open; many files, or register_files = false, keep the fd cache.
TEST_P(IoTest, SmallDatasetsUseRegisteredFiles) {
  if (GetParam().kind != IoKind::kIoUring) GTEST_SKIP() << "registered files are io_uring's";
  for (bool want : {true, false}) {
    auto table = std::make_shared<FileTable>(FileTableOptions{.max_open = 8});
    for (uint32_t f = 0; f < 4; ++f) table->add(write_file(dir_, f, 10000));
    std::vector<std::byte> buf(4 * 5000);
    std::vector<ReadRequest> reqs;
    for (uint32_t f = 0; f < 4; ++f) reqs.push_back({f, 1000 + f, 5000, buf.data() + f * 5000, f});
    auto io = make(table, {.register_files = want});
    ASSERT_TRUE(io);
    EXPECT_EQ(io->name(), want ? "io_uring+files" : "io_uring");
    for (int round = 0; round < 2; ++round) {  // the second round reuses the registrations
      ASSERT_TRUE(io->submit(reqs).ok());
      auto done = reap_all(*io);
      ASSERT_EQ(done.size(), 4u);
      for (const auto& c : done) ASSERT_TRUE(c.status.ok()) << c.status;
      for (uint32_t f = 0; f < 4; ++f) ASSERT_TRUE(matches(f, 1000 + f, buf.data() + f * 5000, 5000));
    }
    // Registered files are held open until the backend goes.
    if (want) EXPECT_EQ(table->stats().open_now, 4u);
    io.reset();
  }
  // More files than half the fd cap: not registered.
  auto table = std::make_shared<FileTable>(FileTableOptions{.max_open = 8});
  for (uint32_t f = 0; f < 5; ++f) table->add(write_file(dir_, f, 100));
  auto io = make(table);
  ASSERT_TRUE(io);
  EXPECT_EQ(io->name(), "io_uring");
}

TEST_P(IoTest, ReapReturnsWhenNothingIsInFlight) {
  auto table = std::make_shared<FileTable>();
  table->add(write_file(dir_, 0, 100));
  auto io = make(table);
  ASSERT_TRUE(io);
  std::vector<ReadCompletion> out;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(io->reap(out, 5, std::chrono::nanoseconds::max()), 0u);  // must not block
  std::byte b[10];
  ReadRequest r{0, 5, 10, b, 42};
  ASSERT_TRUE(io->submit({&r, 1}).ok());
  // Asks for more than will ever come: returns once the one is done.
  EXPECT_EQ(io->reap(out, 5, std::chrono::nanoseconds::max()), 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].user_data, 42u);
  EXPECT_TRUE(matches(0, 5, b, 10));
}

TEST_P(IoTest, PastEndOfFileIsAnErrorCompletion) {
  auto table = std::make_shared<FileTable>();
  std::string path = write_file(dir_, 0, 10000);
  table->add(path);
  auto io = make(table);
  ASSERT_TRUE(io);
  std::vector<std::byte> a(2000), b(100), c(500);
  std::vector<ReadRequest> reqs = {{0, 9000, 2000, a.data(), 1},  // 1000 available
                                   {0, 20000, 100, b.data(), 2},  // none
                                   {0, 9500, 500, c.data(), 3}};  // fine: ends at EOF
  ASSERT_TRUE(io->submit(reqs).ok());
  auto done = reap_all(*io);
  ASSERT_EQ(done.size(), 3u);
  for (const auto& d : done) {
    if (d.user_data == 3) {
      EXPECT_TRUE(d.status.ok()) << d.status;
      EXPECT_TRUE(matches(0, 9500, c.data(), 500));
      continue;
    }
    ASSERT_FALSE(d.status.ok());
    std::string msg(d.status.message());
    EXPECT_CONTAINS(msg, path);
    if (d.user_data == 1) {
      EXPECT_CONTAINS(msg, "at offset 9000");
      EXPECT_CONTAINS(msg, "expected 2000 bytes");
      EXPECT_CONTAINS(msg, "only 1000 bytes");
    } else {
      EXPECT_CONTAINS(msg, "at offset 20000");
      EXPECT_CONTAINS(msg, "only 0 bytes");
    }
    EXPECT_CONTAINS(msg, "file shrank?");
  }
  EXPECT_EQ(io->stats().errors, 2u);
}

TEST_P(IoTest, MissingFileIsAnErrorCompletion) {
  auto table = std::make_shared<FileTable>();
  table->add(write_file(dir_, 0, 100));
  std::string missing = dir_ + "/no-such-file.bin";
  uint32_t m = table->add(missing);
  auto io = make(table);
  ASSERT_TRUE(io);
  std::byte x[10], y[10];
  std::vector<ReadRequest> reqs = {{m, 0, 10, x, 1}, {0, 0, 10, y, 2}};
  ASSERT_TRUE(io->submit(reqs).ok());
  auto done = reap_all(*io);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& d : done) {
    if (d.user_data == 2) {
      EXPECT_TRUE(d.status.ok());
    } else {
      EXPECT_EQ(d.status.code(), absl::StatusCode::kNotFound) << d.status;
      EXPECT_CONTAINS(std::string(d.status.message()), missing);
    }
  }
}

TEST_P(IoTest, BadRequestIsRejectedWhole) {
  auto table = std::make_shared<FileTable>();
  table->add(write_file(dir_, 0, 100));
  auto io = make(table);
  ASSERT_TRUE(io);
  std::byte x[10];
  std::vector<ReadRequest> reqs = {{0, 0, 10, x, 1}, {7, 0, 10, x, 2}};
  absl::Status s = io->submit(reqs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(std::string(s.message()), "unknown file id 7");
  reqs = {{0, 0, 10, nullptr, 1}};
  EXPECT_EQ(io->submit(reqs).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(io->in_flight(), 0u);
}

TEST_P(IoTest, MoreFilesThanTheFdCap) {
  auto table = std::make_shared<FileTable>(FileTableOptions{.max_open = 8});
  const uint32_t files = 100;
  const uint64_t size = 8192;
  for (uint32_t f = 0; f < files; ++f) table->add(write_file(dir_, f, size));
  auto io = make(table, {.queue_depth = 32, .threads = 4});
  ASSERT_TRUE(io);
  std::mt19937_64 rng(3);
  std::vector<ReadRequest> reqs;
  std::vector<std::byte> buf(files * 3 * 1000);
  for (uint32_t i = 0; i < files * 3; ++i) {
    uint32_t f = static_cast<uint32_t>(rng() % files);
    reqs.push_back({f, rng() % (size - 1000), 1000, buf.data() + i * 1000, i});
  }
  ASSERT_TRUE(io->submit(reqs).ok());
  auto done = reap_all(*io);
  ASSERT_EQ(done.size(), reqs.size());
  for (const auto& c : done) {
    ASSERT_TRUE(c.status.ok()) << c.status;
    const ReadRequest& r = reqs[c.user_data];
    ASSERT_TRUE(matches(r.file, r.offset, r.dest, r.length));
  }
  FileTableStats fs = table->stats();
  EXPECT_LE(fs.peak_open, 8u);
  EXPECT_LE(fs.open_now, 8u);
  EXPECT_GE(fs.opens, 90u);  // most of the 100 files were opened
  EXPECT_GT(fs.evictions, 0u);
}

TEST_P(IoTest, DirectIoAtUnalignedExtents) {
  if (!direct_io_works(dir_)) GTEST_SKIP() << "the filesystem of " << dir_ << " refuses O_DIRECT";
  auto table = std::make_shared<FileTable>(FileTableOptions{.direct = true});
  const std::vector<uint64_t> sizes = {3 * 4096 + 123, 65536, 5000};
  for (uint32_t f = 0; f < sizes.size(); ++f) table->add(write_file(dir_, f, sizes[f]));
  auto io = make(table, {.queue_depth = 8, .threads = 2, .direct = true});
  ASSERT_TRUE(io);
  EXPECT_CONTAINS(io->name(), "+direct");
  // io_uring bounces unaligned reads through buffers registered with the
  // ring (read_fixed), unless the memlock limit refuses them.
  if (GetParam().kind == IoKind::kIoUring) {
    struct rlimit lim {};
    getrlimit(RLIMIT_MEMLOCK, &lim);
    if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= (8u << 20)) EXPECT_CONTAINS(io->name(), "+fixed");
  }

  std::mt19937_64 rng(11);
  std::vector<ReadRequest> reqs;
  std::vector<std::vector<std::byte>> bufs;
  for (int i = 0; i < 120; ++i) {
    uint32_t f = rng() % sizes.size();
    uint64_t off = rng() % sizes[f];
    uint64_t len = 1 + rng() % (sizes[f] - off);
    if (i % 10 == 0) len = sizes[f] - off;  // to EOF, which is mid-block
    bufs.emplace_back(len);
    reqs.push_back({f, off, len, bufs.back().data(), static_cast<uint64_t>(i)});
  }
  // Fully aligned: offset, length and dest, read without a bounce buffer.
  void* aligned = std::aligned_alloc(4096, 8192);
  reqs.push_back({1, 8192, 8192, static_cast<std::byte*>(aligned), 1000});
  // Past EOF in O_DIRECT mode.
  std::vector<std::byte> past(200);
  reqs.push_back({0, sizes[0] - 100, 200, past.data(), 1001});
  ASSERT_TRUE(io->submit(reqs).ok());
  auto done = reap_all(*io);
  ASSERT_EQ(done.size(), reqs.size());
  for (const auto& c : done) {
    const ReadRequest& r = reqs[c.user_data < 1000 ? c.user_data : 120 + (c.user_data - 1000)];
    if (c.user_data == 1001) {
      ASSERT_FALSE(c.status.ok());
      EXPECT_CONTAINS(std::string(c.status.message()), "only 100 bytes");
      EXPECT_CONTAINS(std::string(c.status.message()), absl::StrCat("at offset ", r.offset));
      continue;
    }
    ASSERT_TRUE(c.status.ok()) << c.status;
    EXPECT_EQ(c.bytes, r.length);
    EXPECT_TRUE(matches(r.file, r.offset, r.dest, r.length)) << "request " << c.user_data;
  }
  std::free(aligned);
  IoStats s = io->stats();
  EXPECT_GT(s.device_bytes, s.bytes) << "O_DIRECT reads the aligned superset";
}

TEST_P(IoTest, DestroyWithReadsInFlight) {
  // Sanitizer runtimes (TSan) start a helper thread at the first
  // pthread_create; start and join one thread first so it is counted before.
  std::thread([] {}).join();
  const int threads_before = user_threads();
  {
    auto table = std::make_shared<FileTable>();
    const uint64_t size = 4 << 20;
    table->add(write_file(dir_, 0, size));
    auto io = make(table, {.queue_depth = 32, .threads = 4});
    ASSERT_TRUE(io);
    std::vector<std::byte> buf(size);
    std::vector<ReadRequest> reqs;
    for (uint64_t i = 0; i < 1024; ++i) {
      uint64_t off = (i * 4096 * 17) % (size - 4096);
      reqs.push_back({0, off, 4096, buf.data() + (i % 1024) * 4096, i});
    }
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(io->submit(reqs).ok());
    std::vector<ReadCompletion> some;
    io->reap(some, 1, milliseconds(100));
    io.reset();  // with most still in flight
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  }
  // A joined thread leaves /proc a moment after join() returns: allow 1 s.
  int threads_after = user_threads();
  for (int i = 0; i < 100 && threads_after != threads_before; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
    threads_after = user_threads();
  }
  EXPECT_EQ(threads_after, threads_before) << "a backend thread outlived its backend";
}

TEST_P(IoTest, WillneedHintThenRead) {
  auto table = std::make_shared<FileTable>();
  table->add(write_file(dir_, 0, 100000));
  auto io = make(table);
  ASSERT_TRUE(io);
  std::vector<std::byte> buf(50000);
  std::vector<ReadRequest> reqs = {{0, 1234, 50000, buf.data(), 0}};
  advise_willneed(*table, reqs);
  ASSERT_TRUE(io->submit(reqs).ok());
  auto done = reap_all(*io);
  ASSERT_EQ(done.size(), 1u);
  ASSERT_TRUE(done[0].status.ok());
  EXPECT_TRUE(matches(0, 1234, buf.data(), 50000));
}

INSTANTIATE_TEST_SUITE_P(Backends, IoTest,
                         ::testing::Values(BackendCase{IoKind::kSync, "sync"},
                                           BackendCase{IoKind::kThreadPool, "thread_pool"},
                                           BackendCase{IoKind::kIoUring, "io_uring"}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------

TEST(IoFactory, AutoPicksIoUringOrSaysWhyNot) {
  auto io = make_io_backend(std::make_shared<FileTable>(), {});
  ASSERT_TRUE(io.ok()) << io.status();
  if (io_uring_available().ok()) {
    EXPECT_EQ((*io)->name(), "io_uring");
    EXPECT_EQ((*io)->fallback_reason(), "");
  } else {
    EXPECT_EQ((*io)->name(), "thread_pool");
    EXPECT_NE((*io)->fallback_reason(), "");
  }
}

TEST(IoFactory, DirectMustMatchTheTable) {
  auto io = make_io_backend(std::make_shared<FileTable>(), {.kind = IoKind::kSync, .direct = true});
  EXPECT_EQ(io.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IoFactory, KindNames) {
  for (IoKind k : {IoKind::kAuto, IoKind::kIoUring, IoKind::kThreadPool, IoKind::kSync}) {
    auto parsed = parse_io_kind(io_kind_name(k));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_FALSE(parse_io_kind("aio").ok());
}

TEST(FileTable, RegistersOnceOpensLazilyEvictsLru) {
  std::string dir = testing::scratch_dir();
  FileTable table({.max_open = 2});
  std::vector<std::string> paths;
  for (uint32_t f = 0; f < 3; ++f) paths.push_back(write_file(dir, f, 10));
  EXPECT_EQ(table.add(paths[0]), 0u);
  EXPECT_EQ(table.add(paths[1]), 1u);
  EXPECT_EQ(table.add(paths[0]), 0u);  // same path, same id
  EXPECT_EQ(table.add(paths[2]), 2u);
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.path(1), paths[1]);
  EXPECT_EQ(table.stats().opens, 0u);  // lazily

  {
    auto p = table.pin(0);
    ASSERT_TRUE(p.ok());
    EXPECT_GE(p->fd(), 0);
  }
  {
    auto p = table.pin(1);
    ASSERT_TRUE(p.ok());
  }
  {
    auto p = table.pin(0);
    ASSERT_TRUE(p.ok());
  }  // hit; 1 is now least recent
  EXPECT_EQ(table.stats().opens, 2u);
  {
    auto p = table.pin(2);
    ASSERT_TRUE(p.ok());
  }  // evicts 1
  EXPECT_EQ(table.stats().evictions, 1u);
  {
    auto p = table.pin(0);
    ASSERT_TRUE(p.ok());
  }  // still open
  EXPECT_EQ(table.stats().opens, 3u);
  {
    auto p = table.pin(1);
    ASSERT_TRUE(p.ok());
  }  // reopened
  EXPECT_EQ(table.stats().opens, 4u);
  EXPECT_EQ(table.stats().open_now, 2u);
  EXPECT_EQ(table.pin(9).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FileTable, AFileReplacedOrModifiedSinceAddIsRefused) {
  // Extents were indexed from the file as it was when registered: another
  // file at that path (renamed over it, rewritten, grown) must not be read
  // in its place, at the first open or at a reopen after eviction.
  std::string dir = testing::scratch_dir();
  FileTable table({.max_open = 1});
  const std::string a = write_file(dir, 0, 100), b = write_file(dir, 1, 100), c = write_file(dir, 2, 100);
  table.add(a);
  table.add(b);
  table.add(c);
  {
    auto p = table.pin(0);
    ASSERT_TRUE(p.ok()) << p.status();
  }
  {
    auto p = table.pin(1);
    ASSERT_TRUE(p.ok()) << p.status();
  }  // evicts a
  // a: renamed over by another file of the same size.
  const std::string other = write_file(dir + "/..", 7, 100);
  std::filesystem::rename(other, a);
  auto pa = table.pin(0);
  ASSERT_FALSE(pa.ok());
  EXPECT_CONTAINS(std::string(pa.status().message()), a + ": expected the file registered (inode ");
  EXPECT_CONTAINS(std::string(pa.status().message()), "replaced or modified while being read");
  // c: grown before its first open.
  {
    std::ofstream f(c, std::ios::binary | std::ios::app);
    f << "more";
  }
  auto pc = table.pin(2);
  ASSERT_FALSE(pc.ok());
  EXPECT_CONTAINS(std::string(pc.status().message()), "100 bytes");
  EXPECT_CONTAINS(std::string(pc.status().message()), "104 bytes");
  // b: untouched, reopened fine; a file missing at add() is accepted at its first open.
  {
    auto p = table.pin(1);
    ASSERT_TRUE(p.ok()) << p.status();
  }
  const uint32_t late = table.add(dir + "/late.bin");
  write_file(dir, 3, 10);
  std::filesystem::rename(dir + "/file-3.bin", dir + "/late.bin");
  {
    auto p = table.pin(late);
    ASSERT_TRUE(p.ok()) << p.status();
  }
  EXPECT_EQ(table.stats().open_now, 1u);  // refused opens are closed again
}

TEST(FileTable, AFileRewrittenInPlaceUnderAnOpenDescriptorIsFoundByCheckOpenFiles) {
  // The same inode rewritten in place (same size, new bytes): the descriptor
  // held open reads the new bytes, so the table's check (the loader's, at
  // each epoch's start) must name it; files not open are not asked.
  std::string dir = testing::scratch_dir();
  FileTable table;
  const std::string a = write_file(dir, 0, 100), b = write_file(dir, 1, 100);
  table.add(a);
  table.add(b);
  {
    auto p = table.pin(0);
    ASSERT_TRUE(p.ok()) << p.status();
  }  // a stays open (unpinned, in the LRU)
  EXPECT_TRUE(table.check_open_files().ok());
  struct stat before {};
  ASSERT_EQ(::stat(a.c_str(), &before), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a new mtime on coarse clocks too
  {
    std::fstream f(a, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(10);
    f << "rewritten";
  }
  struct stat after {};
  ASSERT_EQ(::stat(a.c_str(), &after), 0);
  ASSERT_EQ(before.st_ino, after.st_ino);
  const absl::Status st = table.check_open_files();
  ASSERT_FALSE(st.ok());
  EXPECT_CONTAINS(std::string(st.message()), a + ": expected the file registered (inode ");
  EXPECT_CONTAINS(std::string(st.message()),
                  "changed in place (rewritten, truncated or appended to) while the loader held it open");
  // b was never opened: its check is its first open's.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  { std::ofstream(b, std::ios::binary | std::ios::app) << "x"; }
  auto pb = table.pin(1);
  ASSERT_FALSE(pb.ok());
  EXPECT_CONTAINS(std::string(pb.status().message()), b);
}

TEST(FileTable, AnIdentityGivenAtAddIsCheckedAtTheFirstOpenWithoutAStat) {
  // add(path, identity): the identity came with the index (an MPI rank given
  // the root's index, the index cache's check), so add() asks the file
  // system nothing, and the first open must find that file: another one
  // there is refused. Device 0 (another host's identity) is not compared.
  std::string dir = testing::scratch_dir();
  const std::string a = write_file(dir, 0, 100), b = write_file(dir, 1, 100);
  auto identity = [](const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return FileIdentity{static_cast<uint64_t>(st.st_size),
                        static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + st.st_mtim.tv_nsec,
                        static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_dev)};
  };
  FileTable table;
  FileIdentity ia = identity(a), ib = identity(b);
  ib.device = 0;  // as from another host
  const uint64_t stats0 = detail::file_stats();
  EXPECT_EQ(table.add(a, ia), 0u);
  EXPECT_EQ(table.add(b, ib), 1u);
  // What an index of a file since replaced would carry (another inode and mtime).
  EXPECT_EQ(table.add(dir + "/file-2.bin", FileIdentity{100, 1, ia.inode, ia.device}), 2u);
  write_file(dir, 2, 100);
  EXPECT_EQ(detail::file_stats(), stats0) << "add() with an identity must not stat";
  EXPECT_EQ(table.known_size(0), std::optional<uint64_t>(100));
  {
    auto p = table.pin(0);
    EXPECT_TRUE(p.ok()) << p.status();
  }
  {
    auto p = table.pin(1);  // device unknown: the rest matches
    EXPECT_TRUE(p.ok()) << p.status();
  }
  auto p2 = table.pin(2);
  ASSERT_FALSE(p2.ok());
  EXPECT_CONTAINS(std::string(p2.status().message()), "replaced or modified while being read");
  // A wrong size given at add is refused too.
  FileTable t2;
  FileIdentity small = identity(a);
  small.size = 99;
  t2.add(a, small);
  EXPECT_FALSE(t2.pin(0).ok());
}

TEST(FileTable, ARedirectedFileIsHeldToItsCopysIdentity) {
  // redirect() points an id at a copy (node-local staging): opens then check
  // the copy as it was when redirected, not the original.
  std::string dir = testing::scratch_dir();
  FileTable table({.max_open = 1});
  const std::string a = write_file(dir, 0, 100), b = write_file(dir, 1, 100);
  const std::string copy = dir + "/copy-of-0.bin";
  std::filesystem::copy_file(a, copy);
  table.add(a);
  table.add(b);
  ASSERT_TRUE(table.redirect(0, copy).ok());
  {
    auto p = table.pin(0);
    ASSERT_TRUE(p.ok()) << p.status();
  }  // another inode than a: fine
  {
    auto p = table.pin(1);
    ASSERT_TRUE(p.ok()) << p.status();
  }  // evicts the copy
  {
    std::ofstream f(copy, std::ios::binary | std::ios::app);
    f << "more";
  }
  auto p = table.pin(0);
  ASSERT_FALSE(p.ok());
  EXPECT_CONTAINS(std::string(p.status().message()), copy + ": expected the file registered");
  EXPECT_CONTAINS(std::string(p.status().message()), "104 bytes");
}

TEST(FileTable, APinAfterARedirectGetsTheCopyWhileOthersStillHoldTheOriginal) {
  // Two I/O engines each hold a pin (a ring's registered file); a redirect
  // while both hold it must not hand the next pin the original's fd: that
  // read the scrambled source in Staging.LaterEpochsReallyReadTheCopies...
  std::string dir = testing::scratch_dir();
  FileTable table;
  const std::string a = write_file(dir, 0, 100);
  const std::string copy = dir + "/copy-of-0.bin";
  {
    std::ofstream f(copy, std::ios::binary);
    f << std::string(100, 'C');
  }
  table.add(a);
  auto held = table.pin(0);  // engine B's registration
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(table.redirect(0, copy).ok());
  auto fresh = table.pin(0);  // engine A registers again after the redirect
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_NE(fresh->fd(), held->fd());
  char c = 0;
  ASSERT_EQ(::pread(fresh->fd(), &c, 1, 0), 1);
  EXPECT_EQ(c, 'C');
  EXPECT_EQ(table.stats().open_now, 2u);  // the original stays open while B holds it
  held->reset();
  EXPECT_EQ(table.stats().open_now, 1u);  // and closes when B lets go
  auto again = table.pin(0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->fd(), fresh->fd());
}

TEST(FileTable, PinnedFdsAreNeverClosed) {
  std::string dir = testing::scratch_dir();
  FileTable table({.max_open = 1});
  table.add(write_file(dir, 0, 10));
  table.add(write_file(dir, 1, 10));
  auto a = table.pin(0);
  ASSERT_TRUE(a.ok());
  auto b = table.try_pin(1);  // cap reached, everything pinned: empty
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(*b);
  auto c = table.pin(1);  // goes over the cap while pinned
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(*c);
  EXPECT_EQ(table.stats().open_now, 2u);
  std::byte x[4];
  EXPECT_EQ(::pread(a->fd(), x, 4, 0), 4);  // both still usable
  EXPECT_EQ(::pread(c->fd(), x, 4, 0), 4);
  a->reset();  // back under the cap
  EXPECT_EQ(table.stats().open_now, 1u);
}

TEST(FileTable, DefaultCapFollowsRlimit) {
  size_t cap = FileTable::default_max_open();
  EXPECT_GE(cap, 1u);
  EXPECT_LE(cap, 1024u);
  EXPECT_EQ(FileTable().max_open(), cap);
}

// The step every backend shares: short reads, EINTR/EAGAIN and EOF.
TEST(ReadOpStep, ShortReadsRetriesAndEof) {
  std::string dir = testing::scratch_dir();
  FileTable table;
  table.add(dir + "/x.bin");
  detail::StatsCounters stats;
  std::byte buf[100];
  detail::ReadOp op;
  op.req = {0, 1000, 100, buf, 5};
  op.prepare(false, nullptr);
  EXPECT_EQ(op.on_result(-EINTR, table, stats), detail::ReadOp::Step::kAgain);
  EXPECT_EQ(op.on_result(-EAGAIN, table, stats), detail::ReadOp::Step::kAgain);
  EXPECT_EQ(op.on_result(40, table, stats), detail::ReadOp::Step::kAgain);  // short
  EXPECT_EQ(op.next_offset(), 1040u);
  EXPECT_EQ(op.next_length(), 60u);
  EXPECT_EQ(op.next_dest(), buf + 40);
  EXPECT_EQ(op.on_result(60, table, stats), detail::ReadOp::Step::kDone);
  IoStats s = stats.snapshot();
  EXPECT_EQ(s.eintr, 1u);
  EXPECT_EQ(s.eagain, 1u);
  EXPECT_EQ(s.short_reads, 1u);
  EXPECT_EQ(s.retries, 3u);

  detail::ReadOp eof;
  eof.req = {0, 1000, 100, buf, 6};
  eof.prepare(false, nullptr);
  EXPECT_EQ(eof.on_result(30, table, stats), detail::ReadOp::Step::kAgain);
  EXPECT_EQ(eof.on_result(0, table, stats), detail::ReadOp::Step::kFailed);
  EXPECT_CONTAINS(std::string(eof.status.message()), "only 30 bytes");

  detail::ReadOp bad;
  bad.req = {0, 0, 100, buf, 7};
  bad.prepare(false, nullptr);
  EXPECT_EQ(bad.on_result(-EIO, table, stats), detail::ReadOp::Step::kFailed);
  EXPECT_CONTAINS(std::string(bad.status.message()), "x.bin: at offset 0: read failed");
}

TEST(ReadOpStep, DirectAlignsTheSuperset) {
  FileTable table;
  table.add("f");
  detail::BouncePool pool;
  std::byte buf[100];
  detail::ReadOp op;
  op.req = {0, 5000, 100, buf, 1};
  op.prepare(true, &pool);
  EXPECT_EQ(op.next_offset(), 4096u);
  EXPECT_EQ(op.next_length(), 4096u);
  EXPECT_NE(op.next_dest(), buf);  // a bounce buffer
  EXPECT_EQ(reinterpret_cast<uintptr_t>(op.next_dest()) % 4096, 0u);
}

}  // namespace
}  // namespace dlfeed
