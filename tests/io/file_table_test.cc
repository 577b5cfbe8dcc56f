// SPDX-License-Identifier: Apache-2.0
// FileTable: files registered once, opened lazily, the least recently used
// closed at the cap; a file replaced, modified or rewritten since it was added
// is refused; redirects to staged copies; pinned descriptors stay open.
#include "io_fixture.h"

namespace dlfeed {
namespace {

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
  EXPECT_CONTAINS(std::string(pa.status().message()), a + ": expected the file as it was registered, found inode ");
  EXPECT_CONTAINS(std::string(pa.status().message()), "replaced or modified while being read");
  // c: grown before its first open.
  {
    std::ofstream f(c, std::ios::binary | std::ios::app);
    f << "more";
  }
  auto pc = table.pin(2);
  ASSERT_FALSE(pc.ok());
  EXPECT_CONTAINS(std::string(pc.status().message()), "size 100 -> 104 bytes");
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
  EXPECT_CONTAINS(std::string(st.message()), a + ": expected the file as it was registered, found modified time ");
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
  EXPECT_CONTAINS(std::string(p.status().message()), copy + ": expected the file as it was registered");
  EXPECT_CONTAINS(std::string(p.status().message()), "104 bytes");
}

TEST(FileTable, ARewriteThatKeepsSizeAndMtimeIsFoundByItsChangeTime) {
  // rsync --inplace -t, tar -x over a file, or a write then utime: the same
  // inode, size and mtime, new bytes. Only st_ctime (which no call sets back) tells.
  std::string dir = testing::scratch_dir();
  FileTable table({.max_open = 4});
  const std::string a = write_file(dir, 0, 100);
  table.add(a);
  {
    auto p = table.pin(0);
    ASSERT_TRUE(p.ok()) << p.status();
  }
  struct stat before {};
  ASSERT_EQ(::stat(a.c_str(), &before), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::fstream f(a, std::ios::binary | std::ios::in | std::ios::out);
    f << "same size, other bytes";
  }
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, a.c_str(), times, 0), 0);
  struct stat after {};
  ASSERT_EQ(::stat(a.c_str(), &after), 0);
  ASSERT_EQ(before.st_ino, after.st_ino);
  ASSERT_EQ(before.st_size, after.st_size);
  ASSERT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  const absl::Status st = table.check_open_files();
  ASSERT_FALSE(st.ok());
  EXPECT_CONTAINS(std::string(st.message()),
                  a + ": expected the file as it was registered, found change time (ctime) ");
  EXPECT_CONTAINS(std::string(st.message()), "size and modified time the same");
}

TEST(FileTable, AReopenFindingOnlyANewChangeTimeAsksBeforeAnyRead) {
  // A file whose descriptor was closed, rewritten with its mtime put back:
  // its next open asks check_reopens_with's function (the loader indexes it
  // again), and the pin is its answer.
  std::string dir = testing::scratch_dir();
  const std::string a = write_file(dir, 0, 100);
  FileTable table({.max_open = 1});
  table.add(a);
  std::vector<uint32_t> asked;
  absl::Status answer = absl::DataLossError("4 samples, not 8");
  table.check_reopens_with([&](uint32_t id) {
    asked.push_back(id);
    return answer;
  });
  struct stat before {};
  {
    auto p = table.pin(0);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(::fstat(p->fd(), &before), 0);
  }
  EXPECT_TRUE(asked.empty()) << "a first open as registered asks nothing";
  table.add(write_file(dir, 1, 100));
  { ASSERT_TRUE(table.pin(1).ok()); }  // closes file 0's descriptor (one open at most)
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::fstream f(a, std::ios::binary | std::ios::in | std::ios::out);
    f << "same size, other bytes";
  }
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, a.c_str(), times, 0), 0);
  auto refused = table.pin(0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(asked, std::vector<uint32_t>{0});
  EXPECT_CONTAINS(std::string(refused.status().message()),
                  a + ": expected the file as it was registered, found a new change time: changed in place since it "
                      "was indexed; indexed again, its samples are not where they were: 4 samples, not 8");
  answer = absl::OkStatus();  // its samples are where they were: read, and its new change time kept
  {
    auto p = table.pin(0);
    ASSERT_TRUE(p.ok()) << p.status();
  }
  EXPECT_EQ(asked.size(), 2u);
  EXPECT_TRUE(table.check_open_files().ok());
  { ASSERT_TRUE(table.pin(1).ok()); }
  { ASSERT_TRUE(table.pin(0).ok()); }
  EXPECT_EQ(asked.size(), 2u) << "not asked again: the identity took the new change time";
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

// The process's descriptor table (/proc/self/status FDSize) as the kernel
// sizes it: it grows by doubling as descriptors are opened, and never shrinks.
size_t descriptor_table_size() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("FDSize:", 0) == 0) return std::stoul(line.substr(7));
  }
  return 0;
}

// The number the next open gets.
int lowest_free_descriptor() {
  const int fd = ::open("/", O_PATH | O_CLOEXEC);
  if (fd >= 0) ::close(fd);
  return fd;
}

TEST(FileTable, ReserveDescriptorsGrowsTheProcessTableToHoldTheFilesItMayKeepOpen) {
  const size_t before = descriptor_table_size();
  ASSERT_GT(before, 0u);
  struct rlimit rl {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
  const size_t want = 2 * before + 100;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur <= want + 64) GTEST_SKIP() << "RLIMIT_NOFILE too low";
  FileTable table({.max_open = want});
  // Paths need not exist to be registered (a missing file fails at its open).
  const std::string dir = testing::scratch_dir();
  for (size_t i = 0; i < want + 50; ++i) table.add(absl::StrCat(dir, "/missing-", i));
  const int lowest_free = lowest_free_descriptor();
  ASSERT_GE(lowest_free, 0);
  table.reserve_descriptors();
  // Room for max_open() more than are open now, in one growth.
  EXPECT_GE(descriptor_table_size(), want);
  EXPECT_EQ(table.stats().opens, 0u);
  EXPECT_EQ(lowest_free_descriptor(), lowest_free);  // nothing left open
}

}  // namespace
}  // namespace dlfeed
