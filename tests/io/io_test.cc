// SPDX-License-Identifier: Apache-2.0
// I/O backends: every backend (sync, thread_pool, io_uring) reads random
// extents of generated files byte for byte, many in flight, with O_DIRECT at
// unaligned offsets, past EOF and missing files as error completions, more
// files than the fd cap, and destruction with reads in flight.
// Also the factory: auto picks io_uring or says why not.
#include "io_fixture.h"

#include <sched.h>

#include "dev/raw_read.h"

namespace dlfeed {
namespace {

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
    if (want) {
      EXPECT_EQ(table->stats().open_now, 4u);
    }
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
    if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= (8u << 20)) {
      EXPECT_CONTAINS(io->name(), "+fixed");
    }
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

// A read asking for its checksum completes with the CRC32C of the bytes it
// placed (empty reads and reads up to EOF included, O_DIRECT through its
// bounce buffer too); one not asking, or failing, has none.
TEST_P(IoTest, ChecksumsAreOfTheBytesRead) {
  auto table = std::make_shared<FileTable>();
  const uint64_t size = 600000;
  table->add(write_file(dir_, 0, size));
  for (bool direct : {false, true}) {
    if (direct && !direct_io_works(dir_)) continue;
    auto t = direct ? std::make_shared<FileTable>(FileTableOptions{.direct = true}) : table;
    if (direct) t->add(write_file(dir_, 0, size));
    auto io = make(t, {.queue_depth = 8, .threads = 2, .direct = direct});
    ASSERT_TRUE(io);
    std::mt19937_64 rng(9);
    const int n = 60;
    std::vector<std::vector<std::byte>> bufs(n);
    std::vector<ReadRequest> reqs(n);
    for (int i = 0; i < n; ++i) {
      const uint64_t off = i == 0 ? size - 777 : rng() % size;
      const uint64_t len = i == 1 ? 0 : i == 0 ? 777 : rng() % std::min<uint64_t>(size - off, 200000);
      bufs[i].resize(len);
      reqs[i] = {0, off, len, bufs[i].data(), static_cast<uint64_t>(i), i % 3 != 2};
    }
    std::vector<std::byte> past(10);
    reqs.push_back({0, size - 5, 10, past.data(), 1000, true});  // past EOF: an error, no checksum
    ASSERT_TRUE(io->submit(reqs).ok());
    for (const ReadCompletion& c : reap_all(*io)) {
      if (c.user_data == 1000) {
        EXPECT_FALSE(c.status.ok());
        EXPECT_FALSE(c.has_crc32c);
        continue;
      }
      const ReadRequest& r = reqs[c.user_data];
      ASSERT_TRUE(c.status.ok()) << c.status;
      ASSERT_TRUE(matches(0, r.offset, r.dest, r.length));
      EXPECT_EQ(c.has_crc32c, r.checksum) << io->name() << " read " << c.user_data;
      if (c.has_crc32c) {
        EXPECT_EQ(c.crc32c, detail::crc32c(r.dest, r.length)) << io->name() << " read " << c.user_data;
      }
    }
  }
}

// A scattered read (ReadRequest::pieces) puts the file's bytes into its
// pieces in order, as one request, on every backend and with O_DIRECT (via
// the bounce buffer); its checksum is of the piece named. Pieces that do not
// add up, or lack a destination, are refused with the file and offset.
TEST_P(IoTest, ScatteredReadsFillTheirPiecesInOrder) {
  const uint64_t size = 300000;
  for (bool direct : {false, true}) {
    if (direct && !direct_io_works(dir_)) continue;
    auto table = std::make_shared<FileTable>(FileTableOptions{.direct = direct});
    table->add(write_file(dir_, 0, size));
    auto io = make(table, {.queue_depth = 8, .threads = 2, .direct = direct});
    ASSERT_TRUE(io);
    std::mt19937_64 rng(21);
    const int n = 40;
    std::vector<std::vector<std::byte>> bufs(n * 3);
    std::vector<std::vector<ReadPiece>> pieces(n);
    std::vector<ReadRequest> reqs(n);
    for (int i = 0; i < n; ++i) {
      const uint64_t lens[3] = {rng() % 70, 1 + rng() % 100000, rng() % 70};
      const uint64_t len = lens[0] + lens[1] + lens[2];
      const uint64_t off = i == 0 ? size - len : rng() % (size - len);
      for (int k = 0; k < 3; ++k) {
        bufs[i * 3 + k].assign(lens[k] + 1, std::byte{0xEE});  // +1: a guard byte
        pieces[i].push_back({bufs[i * 3 + k].data(), lens[k]});
      }
      reqs[i] = {0, off, len, pieces[i][1].dest, static_cast<uint64_t>(i), i % 2 == 0, pieces[i].data(), 3, 1};
    }
    ASSERT_TRUE(io->submit(reqs).ok());
    const auto done = reap_all(*io);
    ASSERT_EQ(done.size(), reqs.size());
    for (const ReadCompletion& c : done) {
      const ReadRequest& r = reqs[c.user_data];
      ASSERT_TRUE(c.status.ok()) << c.status;
      EXPECT_EQ(c.bytes, r.length);
      uint64_t at = r.offset;
      for (uint32_t k = 0; k < 3; at += r.pieces[k].length, ++k) {
        ASSERT_TRUE(matches(0, at, r.pieces[k].dest, r.pieces[k].length)) << io->name() << " piece " << k;
        EXPECT_EQ(bufs[c.user_data * 3 + k][r.pieces[k].length], std::byte{0xEE}) << "wrote past piece " << k;
      }
      EXPECT_EQ(c.has_crc32c, r.checksum);
      if (c.has_crc32c) {
        EXPECT_EQ(c.crc32c, detail::crc32c(r.pieces[1].dest, r.pieces[1].length));
      }
    }
    EXPECT_EQ(io->stats().requests, uint64_t(n));
    std::byte x[8];
    const ReadPiece short_by_one[] = {{x, 4}, {x + 4, 3}};
    EXPECT_CONTAINS(io->submit(std::vector<ReadRequest>{{0, 10, 8, x, 0, false, short_by_one, 2, 0}}).message(),
                    "at offset 10: scattered read of 8 bytes: its pieces add up to 7 bytes");
    const ReadPiece no_dest[] = {{x, 4}, {nullptr, 4}};
    EXPECT_CONTAINS(io->submit(std::vector<ReadRequest>{{0, 10, 8, x, 0, false, no_dest, 2, 0}}).message(),
                    "piece 1 has no destination");
  }
}

// io_uring: while reads complete at submit (page-cache hits), reads asking
// for a checksum go to the kernel in rounds of checksum_round_bytes, so each
// CRC reads bytes copied a moment ago; without rounds, a ring's worth at once.
// The first submit (not yet known warm) is a ring's worth either way.
TEST_P(IoTest, ChecksumReadsGoInRoundsWhileWarm) {
  if (GetParam().kind != IoKind::kIoUring) GTEST_SKIP() << "the rounds are io_uring's";
  auto table = std::make_shared<FileTable>();
  const uint64_t size = 4 << 20, len = 16 << 10;
  table->add(write_file(dir_, 0, size));  // just written: in the page cache
  std::vector<std::byte> buf(size);
  std::vector<ReadRequest> reqs;
  for (uint64_t i = 0; i < size / len; ++i) reqs.push_back({0, i * len, len, buf.data() + i * len, i, true});
  uint64_t calls[2] = {0, 0};
  for (uint64_t round : {uint64_t{0}, uint64_t{32} << 10}) {
    auto io = make(table, {.queue_depth = 64, .checksum_round_bytes = round});
    ASSERT_TRUE(io);
    ASSERT_TRUE(io->submit(reqs).ok());
    for (const ReadCompletion& c : reap_all(*io)) {
      ASSERT_TRUE(c.status.ok()) << c.status;
      ASSERT_TRUE(c.has_crc32c);
      EXPECT_EQ(c.crc32c, detail::crc32c(buf.data() + c.user_data * len, len));
    }
    ASSERT_TRUE(matches(0, 0, buf.data(), size));
    calls[round != 0] = io->stats().submit_calls;
  }
  // 256 reads: about 4 submits of 64 without rounds; with rounds of 2 reads
  // after the first submit, about 96 more.
  EXPECT_LE(calls[0], 12u);
  EXPECT_GE(calls[1], calls[0] + 48) << "no rounds";
}

// Large pieces (ReadRequest::hand_off) go to kernel workers while the page
// cache holds them, and in the ring as plain reads while it does not (a
// worker blocks on the device for its whole read: the workers, as many as
// the cores, would bound the reads in flight). Warm: all but the probes (1
// in 16) are handed off; cold: after the first submit (a probe and at most
// twice the workers handed off) few are, read-ahead hits aside. The file has
// many more pieces than twice the workers, so that the two differ anywhere.
TEST_P(IoTest, LargePiecesGoToKernelWorkersOnlyWhileThePageCacheHoldsThem) {
  if (GetParam().kind != IoKind::kIoUring) GTEST_SKIP() << "hand-off is io_uring's";
  cpu_set_t set;
  CPU_ZERO(&set);
  const uint64_t workers = sched_getaffinity(0, sizeof(set), &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
  auto table = std::make_shared<FileTable>();
  const uint64_t piece = 1 << 20, pieces = 4 * workers + 32, size = piece * pieces;
  const std::string path = write_file(dir_, 0, size);
  table->add(path);
  std::vector<std::byte> buf(size);
  std::vector<ReadRequest> reqs;
  for (uint64_t i = 0; i < pieces; ++i) {
    reqs.push_back({0, i * piece, piece, buf.data() + i * piece, i});
    reqs.back().hand_off = true;
  }
  auto read_once = [&]() -> IoStats {
    std::fill(buf.begin(), buf.end(), std::byte{0});
    auto io = make(table, {.queue_depth = 64});
    if (!io) return {};
    EXPECT_TRUE(io->submit(reqs).ok());
    auto done = reap_all(*io);
    EXPECT_EQ(done.size(), reqs.size());
    for (const auto& c : done) EXPECT_TRUE(c.status.ok()) << c.status;
    EXPECT_TRUE(matches(0, 0, buf.data(), size));
    return io->stats();
  };
  const IoStats warm = read_once();  // just written: in the page cache
  EXPECT_GE(warm.handed_off, pieces - pieces / 16 - 1) << "warm: all but the probes to kernel workers";
  ASSERT_TRUE(evict_pages(path).ok());
  const absl::StatusOr<uint64_t> left = resident_bytes(path);
  if (!left.ok() || *left > size / 16) GTEST_SKIP() << "this file system keeps the pages (tmpfs?)";
  const IoStats cold = read_once();
  EXPECT_LT(cold.handed_off, pieces / 2) << "cold: in the ring once a submit missed the cache";
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

}  // namespace
}  // namespace dlfeed
