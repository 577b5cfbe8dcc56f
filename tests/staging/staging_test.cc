// SPDX-License-Identifier: Apache-2.0
// Node-local staging: the Stager (copies, limit, reuse, atomic publication),
// the FileTable seam it uses (redirect), and owned_files.
#include "dlfeed/staging/staging.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "dlfeed/detail/file.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/order/order.h"
#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed::staging {
namespace {

using testing::read_all;
using testing::scratch_dir;
namespace fs = std::filesystem;

// A file of `n` bytes whose content depends on `tag` and the offset.
Source write_file(const std::string& path, uint64_t n, uint32_t tag) {
  std::string s(n, '\0');
  for (uint64_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + tag * 7 + (i >> 12)) & 0xff);
  std::ofstream(path, std::ios::binary).write(s.data(), static_cast<std::streamsize>(s.size()));
  return {path, n, {}};
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Stager, CopiesAreByteExactAndPublishedUnderTheirNamesOnly) {
  const std::string root = scratch_dir();
  fs::create_directories(root + "/src");
  // Sizes around the 4 MiB copy chunk, and an empty file.
  std::vector<Source> src = {write_file(root + "/src/a.bin", (4 << 20) + 17, 1),
                             write_file(root + "/src/b.bin", 4 << 20, 2), write_file(root + "/src/c.bin", 0, 3),
                             write_file(root + "/src/d.bin", 1000, 4)};
  uint64_t observed = 0;
  std::vector<std::pair<size_t, FileStatus>> ends;
  Stager::Observer obs;
  obs.on_bytes = [&](uint64_t n) { observed += n; };
  obs.on_file_end = [&](size_t i, FileStatus s) { ends.emplace_back(i, s); };
  auto st = Stager::create({root + "/stage/deeper", UINT64_MAX, true}, src, obs);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(fs::is_directory(root + "/stage/deeper"));  // created
  EXPECT_EQ((*st)->staged_path(0), "");                   // nothing before start()
  (*st)->start();
  (*st)->wait();
  const StageStats s = (*st)->stats();
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.files, 4u);
  EXPECT_EQ(s.staged, 4u);
  EXPECT_EQ(s.bytes_copied, (8u << 20) + 17 + 1000);
  EXPECT_EQ(observed, s.bytes_copied);
  EXPECT_EQ(s.bytes_staged, s.bytes_copied);
  EXPECT_EQ(ends.size(), 4u);
  std::vector<std::string> want;
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ((*st)->status(i), FileStatus::kStaged) << i;
    const std::string p = (*st)->staged_path(i);
    EXPECT_EQ(p, root + "/stage/deeper/" + staged_name(src[i]));
    EXPECT_EQ(read_all(p), read_all(src[i].path)) << src[i].path;
    EXPECT_EQ(Stager::find_copy(root + "/stage/deeper", src[i]), p);
    want.push_back(staged_name(src[i]));
  }
  std::sort(want.begin(), want.end());
  EXPECT_EQ(files_in(root + "/stage/deeper"), want);  // no temporaries left
  // The name carries path and size: same base name elsewhere, or another size, differ.
  EXPECT_NE(staged_name({root + "/other/a.bin", src[0].size, {}}), staged_name(src[0]));
  EXPECT_NE(staged_name({src[0].path, src[0].size + 1, {}}), staged_name(src[0]));
  EXPECT_NE(staged_name(src[0]).find("-a.bin"), std::string::npos);
}

TEST(Stager, LimitSkipsWhatDoesNotFitAndKeepsFilling) {
  const std::string root = scratch_dir();
  std::vector<Source> src = {write_file(root + "/a", 600, 1), write_file(root + "/b", 500, 2),
                             write_file(root + "/c", 300, 3), write_file(root + "/d", 100, 4)};
  auto st = Stager::create({root + "/stage", 1000, false}, src);
  ASSERT_TRUE(st.ok());
  (*st)->start();
  (*st)->wait();
  // a (600) fits; b (500) would make 1100; c (300) makes 900; d (100) makes 1000.
  EXPECT_EQ((*st)->status(0), FileStatus::kStaged);
  EXPECT_EQ((*st)->status(1), FileStatus::kSkippedLimit);
  EXPECT_EQ((*st)->status(2), FileStatus::kStaged);
  EXPECT_EQ((*st)->status(3), FileStatus::kStaged);
  EXPECT_EQ((*st)->staged_path(1), "");
  const StageStats s = (*st)->stats();
  EXPECT_EQ(s.skipped_limit, 1u);
  EXPECT_EQ(s.bytes_skipped, 500u);
  EXPECT_EQ(s.bytes_staged, 1000u);
  EXPECT_EQ(files_in(root + "/stage").size(), 3u);
}

TEST(Stager, ReusesCompleteCopiesAndIgnoresWrongSizedOnes) {
  const std::string root = scratch_dir();
  std::vector<Source> src = {write_file(root + "/a", 5000, 1), write_file(root + "/b", 3000, 2)};
  {
    auto first = Stager::create({root + "/stage", UINT64_MAX, false}, {src[0]});
    ASSERT_TRUE(first.ok());
    (*first)->start();
    (*first)->wait();
  }
  // A truncated file under b's name (not ours: a name with the right size is
  // only ever published complete): find_copy must not take it.
  const std::string b_name = root + "/stage/" + staged_name(src[1]);
  std::ofstream(b_name, std::ios::binary) << "short";
  EXPECT_EQ(Stager::find_copy(root + "/stage", src[1]), "");
  auto again = Stager::create({root + "/stage", UINT64_MAX, false}, src);
  ASSERT_TRUE(again.ok());
  (*again)->start();
  (*again)->wait();
  EXPECT_EQ((*again)->status(0), FileStatus::kReused);
  EXPECT_EQ((*again)->status(1), FileStatus::kStaged);  // copied over the short file
  EXPECT_EQ((*again)->stats().bytes_copied, 3000u);
  EXPECT_EQ(read_all(b_name), read_all(src[1].path));
}

// `s` with the identity its file has now, as a loader indexes it.
Source indexed(Source s) {
  struct stat st {};
  EXPECT_EQ(::stat(s.path.c_str(), &st), 0);
  s.identity = detail::identity_of(st);
  return s;
}

// A copy written since it was placed (damaged; half-written by a crash
// without stage_sync) keeps its size but not its source's modified time:
// a later run copies it again rather than reading it (it read zeros).
TEST(Stager, ACopyWrittenSinceItWasPlacedIsCopiedAgain) {
  const std::string root = scratch_dir();
  const Source src = indexed(write_file(root + "/a", 5000, 1));
  {
    auto first = Stager::create({root + "/stage", UINT64_MAX, false}, {src});
    ASSERT_TRUE(first.ok());
    (*first)->start();
    (*first)->wait();
    ASSERT_EQ((*first)->status(0), FileStatus::kStaged);
  }
  const std::string copy = root + "/stage/" + staged_name(src);
  ASSERT_EQ(Stager::find_copy(root + "/stage", src), copy);
  std::ofstream(copy, std::ios::binary | std::ios::in | std::ios::out) << std::string(5000, '\0');
  ASSERT_EQ(fs::file_size(copy), 5000u);
  EXPECT_EQ(Stager::find_copy(root + "/stage", src), "");
  auto again = Stager::create({root + "/stage", UINT64_MAX, false}, {src});
  ASSERT_TRUE(again.ok());
  (*again)->start();
  (*again)->wait();
  EXPECT_EQ((*again)->status(0), FileStatus::kStaged);
  EXPECT_EQ(read_all(copy), read_all(src.path));
}

TEST(Stager, SourceShorterThanItsIndexedSizeFailsAndPublishesNothing) {
  const std::string root = scratch_dir();
  Source s = write_file(root + "/a", 100, 1);
  s.size = 200;  // the file shrank since it was indexed
  auto st = Stager::create({root + "/stage", UINT64_MAX, false}, {s});
  ASSERT_TRUE(st.ok());
  (*st)->start();
  (*st)->wait();
  EXPECT_EQ((*st)->status(0), FileStatus::kFailed);
  const StageStats stats = (*st)->stats();
  EXPECT_EQ(stats.failed, 1u);
  EXPECT_NE(stats.first_error.find(root + "/a: at offset 100: expected 200 bytes"), std::string::npos)
      << stats.first_error;
  EXPECT_TRUE(files_in(root + "/stage").empty());  // the temporary is gone too
}

uint64_t inode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

TEST(Stager, AFileRewrittenSinceItsCopyIsCopiedAgainNeverTakenForIt) {
  const std::string root = scratch_dir();
  const Source old_version = indexed(write_file(root + "/a", 4000, 1));
  {
    auto first = Stager::create({root + "/stage", UINT64_MAX, false}, {old_version});
    ASSERT_TRUE(first.ok());
    (*first)->start();
    (*first)->wait();
    ASSERT_EQ((*first)->status(0), FileStatus::kStaged);
  }
  // Rewritten at the same size with other bytes, its modification time put back (rsync -t, tar -x):
  // the change time still moves, so the name is another and the old copy is not found for it.
  const Source rewritten = indexed(write_file(root + "/a", 4000, 2));
  struct timespec times[2] = {{0, UTIME_OMIT},
                              {static_cast<time_t>(old_version.identity.mtime_ns / 1000000000),
                               static_cast<long>(old_version.identity.mtime_ns % 1000000000)}};
  ASSERT_EQ(::utimensat(AT_FDCWD, rewritten.path.c_str(), times, 0), 0);
  const Source now = indexed(rewritten);
  ASSERT_EQ(now.identity.mtime_ns, old_version.identity.mtime_ns);
  EXPECT_NE(staged_name(now), staged_name(old_version));
  EXPECT_EQ(Stager::find_copy(root + "/stage", now), "");
  auto again = Stager::create({root + "/stage", UINT64_MAX, false}, {now});
  ASSERT_TRUE(again.ok());
  (*again)->start();
  (*again)->wait();
  EXPECT_EQ((*again)->status(0), FileStatus::kStaged);
  EXPECT_EQ(read_all((*again)->staged_path(0)), read_all(now.path));
}

TEST(Stager, AFileChangedSinceItWasIndexedIsNotStaged) {
  const std::string root = scratch_dir();
  const Source was = indexed(write_file(root + "/a", 4000, 1));
  write_file(root + "/a", 4000, 2);  // rewritten after the loader indexed it
  auto st = Stager::create({root + "/stage", UINT64_MAX, false}, {was});
  ASSERT_TRUE(st.ok());
  (*st)->start();
  (*st)->wait();
  EXPECT_EQ((*st)->status(0), FileStatus::kFailed);
  EXPECT_NE((*st)->stats().first_error.find(root + "/a: expected the file as the loader indexed it"), std::string::npos)
      << (*st)->stats().first_error;
  EXPECT_TRUE(files_in(root + "/stage").empty());
}

TEST(Stager, ACopyPutInPlaceMeanwhileByAnotherProcessIsKeptNotReplaced) {
  const std::string root = scratch_dir();
  const Source src = indexed(write_file(root + "/a", 6000, 3));
  const std::string final_path = root + "/stage/" + staged_name(src);
  uint64_t theirs = 0;
  Stager::Observer obs;
  obs.on_bytes = [&](uint64_t) {  // while this stager copies, another publishes the same file's copy
    if (theirs != 0) return;
    fs::copy_file(src.path, final_path + ".other");
    fs::last_write_time(final_path + ".other", fs::last_write_time(src.path));  // as a stager places it
    fs::rename(final_path + ".other", final_path);
    theirs = inode_of(final_path);
  };
  auto st = Stager::create({root + "/stage", UINT64_MAX, false}, {src}, obs);
  ASSERT_TRUE(st.ok());
  (*st)->start();
  (*st)->wait();
  EXPECT_EQ((*st)->status(0), FileStatus::kReused);
  EXPECT_EQ(inode_of(final_path), theirs);  // a reader of their copy keeps reading it
  EXPECT_EQ(files_in(root + "/stage"), std::vector<std::string>{staged_name(src)});
}

TEST(Stager, CancelLeavesNoPartialFile) {
  const std::string root = scratch_dir();
  std::vector<Source> src;
  for (int i = 0; i < 6; ++i) src.push_back(write_file(root + "/f" + std::to_string(i), 9 << 20, i));
  Stager::Observer obs;
  Stager* self = nullptr;
  obs.on_bytes = [&](uint64_t) { self->cancel(); };  // stop inside the first file's copy
  auto st = Stager::create({root + "/stage", UINT64_MAX, false}, src, obs);
  ASSERT_TRUE(st.ok());
  self = st->get();
  (*st)->start();
  (*st)->wait();
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ((*st)->status(i), FileStatus::kCancelled) << i;
  EXPECT_TRUE(files_in(root + "/stage").empty());
}

TEST(Stager, RefusesAFolderItCannotUse) {
  const std::string root = scratch_dir();
  std::ofstream(root + "/file") << "x";
  auto st = Stager::create({root + "/file", UINT64_MAX, false}, {});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find(root + "/file"), std::string::npos) << st.status();
  EXPECT_FALSE(Stager::create({"", UINT64_MAX, false}, {}).ok());
}

TEST(OwnedFiles, RoundRobinForStridedOrdersAndThePartForLocalShuffle) {
  const FileLayout layout = FileLayout::from_sizes(std::vector<uint64_t>{3, 5, 2, 4, 6, 1, 2});
  for (const char* strategy : {"global_shuffle", "local_shuffle", "sequential"}) {
    std::set<uint64_t> all;
    for (uint32_t r = 0; r < 3; ++r) {
      OrderSpec spec;
      spec.strategy = strategy;
      spec.rank = r;
      spec.world_size = 3;
      auto c = OrderCursor::create(layout, spec);
      ASSERT_TRUE(c.ok()) << c.status();
      const std::vector<uint64_t> owned = owned_files(layout, *c);
      for (uint64_t f : owned) {
        EXPECT_EQ(f % 3, r) << strategy;  // local_shuffle's split is round-robin too
        EXPECT_TRUE(all.insert(f).second) << strategy << " file " << f << " owned twice";
      }
      if (std::string(strategy) == "local_shuffle") {
        // Exactly the files of the samples this rank reads.
        std::set<uint64_t> read;
        for (uint64_t i = 0; i < c->size(); ++i) read.insert(layout.file_of(c->at(i)));
        EXPECT_EQ(std::set<uint64_t>(owned.begin(), owned.end()), read);
      }
    }
    EXPECT_EQ(all.size(), layout.num_files()) << strategy;
  }
}

TEST(FileTableRedirect, NewPinsOpenTheNewPathOncePinsOfTheOldAreGone) {
  const std::string root = scratch_dir();
  std::ofstream(root + "/old") << "OLD!";
  std::ofstream(root + "/new") << "new.";
  FileTable t;
  const uint32_t id = t.add(root + "/old");
  auto read4 = [](int fd) {
    char b[4];
    EXPECT_EQ(::pread(fd, b, 4, 0), 4);
    return std::string(b, 4);
  };
  {
    auto held = t.pin(id);
    ASSERT_TRUE(held.ok());
    ASSERT_TRUE(t.redirect(id, root + "/new").ok());
    EXPECT_EQ(t.path(id), root + "/new");
    EXPECT_EQ(read4(held->fd()), "OLD!");  // a read in flight keeps its file
    // A pin taken after the redirect reads the new path even while the old
    // one is held (another I/O engine's registered file may hold it for a
    // whole epoch: sharing it would read the redirected-away file).
    auto fresh = t.pin(id);
    ASSERT_TRUE(fresh.ok());
    EXPECT_EQ(read4(fresh->fd()), "new.");
    EXPECT_EQ(read4(held->fd()), "OLD!");
  }
  auto after = t.pin(id);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(read4(after->fd()), "new.");
  EXPECT_EQ(t.add(root + "/old"), id);  // the old path still names the file
  after->reset();
  // Redirecting an open, unpinned file closes it at once.
  ASSERT_TRUE(t.redirect(id, root + "/old").ok());
  EXPECT_EQ(t.stats().open_now, 0u);
  auto back = t.pin(id);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(read4(back->fd()), "OLD!");
  EXPECT_FALSE(t.redirect(99, root + "/new").ok());
}

TEST(FileTableRedirect, PerFileDirectOverride) {
  const std::string root = scratch_dir();
  std::ofstream(root + "/f") << std::string(8192, 'x');
  FileTableOptions o;
  o.direct = true;
  FileTable t(o);
  const uint32_t id = t.add(root + "/f");
  ASSERT_TRUE(t.redirect(id, root + "/f", false).ok());
  auto p = t.pin(id);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(::fcntl(p->fd(), F_GETFL) & O_DIRECT, 0);
}

}  // namespace
}  // namespace dlfeed::staging
