// SPDX-License-Identifier: Apache-2.0
// ReadOp's step: short reads, retries and EOF; O_DIRECT reads of the aligned
// superset of an extent; a scattered read's pieces resumed after a short read.
#include "io/read_op.h"  // ReadOp's step, unit-tested here
#include "io/io_fixture.h"
#include "read/resident.h"

#include <cstdio>

namespace dlfeed {
namespace {

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

// A scattered read resumes a short read in the right piece at the right place:
// the iovecs from `done` on skip what landed and cover exactly the rest.
TEST(ReadOpStep, ScatteredReadsResumeInTheRightPiece) {
  FileTable table;
  table.add("f");
  detail::StatsCounters stats;
  std::byte a[10], b[100], c[5];
  const ReadPiece pieces[] = {{a, 10}, {b, 100}, {c, 5}};
  detail::ReadOp op;
  op.req = {0, 1000, 115, b, 1, true, pieces, 3, 1};
  op.prepare(false, nullptr);
  EXPECT_TRUE(op.scattered());
  EXPECT_EQ(op.next_dest(), nullptr);
  ASSERT_EQ(op.next_iovecs(), 3);
  EXPECT_EQ(op.iov[0].iov_base, a);
  EXPECT_EQ(op.iov[2].iov_len, 5u);
  EXPECT_EQ(op.on_result(30, table, stats), detail::ReadOp::Step::kAgain);  // short: 10 of a, 20 of b
  EXPECT_EQ(op.next_offset(), 1030u);
  ASSERT_EQ(op.next_iovecs(), 2);
  EXPECT_EQ(op.iov[0].iov_base, b + 20);
  EXPECT_EQ(op.iov[0].iov_len, 80u);
  EXPECT_EQ(op.iov[1].iov_base, c);
  EXPECT_EQ(op.on_result(82, table, stats), detail::ReadOp::Step::kAgain);  // 2 of c
  ASSERT_EQ(op.next_iovecs(), 1);
  EXPECT_EQ(op.iov[0].iov_base, c + 2);
  EXPECT_EQ(op.iov[0].iov_len, 3u);
  EXPECT_EQ(op.on_result(3, table, stats), detail::ReadOp::Step::kDone);

  // O_DIRECT: the aligned superset into a bounce buffer, never the pieces.
  detail::BouncePool pool;
  detail::ReadOp direct;
  direct.req = {0, 4096, 115, b, 2, false, pieces, 3, 0};
  direct.prepare(true, &pool);
  EXPECT_FALSE(direct.scattered());
  EXPECT_NE(direct.next_dest(), nullptr);
  EXPECT_EQ(direct.next_length(), 4096u);
}

// The held-files backend copies a scattered read into its pieces and takes
// the checksum of the piece named, as ReadOp::finish does; pieces that do not
// add up are refused naming the file, as validate_requests refuses them.
TEST(ReadOpStep, HeldFilesCheckAndCopyScatteredReadsAlike) {
  const std::string dir = testing::scratch_dir();
  auto table = std::make_shared<FileTable>();
  table->add(write_file(dir, 0, 5000));
  auto held = detail::ResidentFiles::load(*table, {0});
  ASSERT_TRUE(held.ok()) << held.status();
  auto inner = make_io_backend(table, {.kind = IoKind::kSync});
  ASSERT_TRUE(inner.ok()) << inner.status();
  auto io = detail::make_resident_backend(std::move(*inner), *held);
  std::byte a[7], b[300], c[2];
  const ReadPiece pieces[] = {{a, 7}, {b, 300}, {c, 2}};
  ASSERT_TRUE(io->submit(std::vector<ReadRequest>{{0, 100, 309, nullptr, 1, true, pieces, 3, 1}}).ok());
  std::vector<ReadCompletion> done;
  io->reap(done, 1, std::chrono::seconds(1));
  ASSERT_EQ(done.size(), 1u);
  ASSERT_TRUE(done[0].status.ok()) << done[0].status;
  for (uint64_t i = 0; i < 7; ++i) EXPECT_EQ(a[i], content(0, 100 + i));
  for (uint64_t i = 0; i < 300; ++i) EXPECT_EQ(b[i], content(0, 107 + i));
  for (uint64_t i = 0; i < 2; ++i) EXPECT_EQ(c[i], content(0, 407 + i));
  EXPECT_TRUE(done[0].has_crc32c);
  EXPECT_EQ(done[0].crc32c, detail::crc32c(b, sizeof b));
  const ReadPiece short_by_one[] = {{a, 7}, {b, 300}};
  const absl::Status st = io->submit(std::vector<ReadRequest>{{0, 100, 308, b, 2, false, short_by_one, 2, 0}});
  EXPECT_FALSE(st.ok());
  EXPECT_CONTAINS(std::string(st.message()), "file-0.bin: at offset 100: scattered read of 308 bytes");
  EXPECT_CONTAINS(std::string(st.message()), "its pieces add up to 307 bytes");
}

// A hold whose plan fails after it planned some files (an object that
// cannot be opened) is an error, its planned files given up; it crashed
// (the files were not yet made when the plan was let go).
TEST(ResidentHold, APlanThatFailsPartwayIsAnError) {
  const std::string dir = testing::scratch_dir();
  ::setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1);  // nothing listens: refused at once
  ::setenv("AWS_ACCESS_KEY_ID", "none", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "none", 1);
  ::setenv("AWS_REGION", "us-east-1", 1);
  auto table = std::make_shared<FileTable>();
  table->add(write_file(dir, 0, 5000));
  table->add("s3://no-bucket/no-object");
  auto held = detail::ResidentFiles::load(*table, {0, 1});
  EXPECT_FALSE(held.ok());
  EXPECT_NE(std::string(held.status().message()).find("no-object"), std::string::npos) << held.status();
  for (const char* v : {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}) ::unsetenv(v);
}

// A file changed after it was registered is not held: its bytes are not
// the file's as registered (a read racing a truncation came back whole, the
// cut page's tail zeroed, and was held). Here rewritten in place, same size.
TEST(ResidentHold, AFileChangedSinceRegisteredIsNotHeld) {
  const std::string dir = testing::scratch_dir();
  const std::string path = write_file(dir, 0, 5000);
  auto f = detail::File::open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const FileIdentity registered = f->identity();
  auto table = std::make_shared<FileTable>();
  table->add(path, registered);
  ASSERT_TRUE(table->pin(0).ok());  // open: its descriptor is kept, and not checked again when pinned
  {
    std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
    out.seekp(100);
    out.write("changed", 7);
  }
  auto held = detail::ResidentFiles::load(*table, {0});
  ASSERT_FALSE(held.ok());
  EXPECT_NE(std::string(held.status().message()).find(path), std::string::npos) << held.status();
}

// Held files are packed back to back (64-byte aligned) in the hold's order,
// in mappings of up to 64 MiB that start on a huge page, so its reads fill
// consecutive huge pages (a mapping each cost a fault per 4 KiB, and one of
// its own per 4 MiB file took a whole last huge page). Every byte is the
// file's.
TEST(ResidentHold, FilesArePackedInTheHoldsOrder) {
  const std::string dir = testing::scratch_dir();
  auto table = std::make_shared<FileTable>();
  const uint64_t sizes[] = {150'000, 70'001, (4u << 20) + 1, 1, 0, 150'000};
  for (uint32_t f = 0; f < 6; ++f) table->add(write_file(dir, f, sizes[f]));
  const std::vector<uint32_t> order = {5, 1, 2, 3, 4, 0};
  auto held = detail::ResidentFiles::load(*table, order);
  ASSERT_TRUE(held.ok()) << held.status();
  const detail::ResidentFiles& h = **held;
  for (uint32_t f = 0; f < 6; ++f) {
    ASSERT_TRUE(h.has(f)) << f;
    ASSERT_EQ(h.size(f), sizes[f]);
    for (uint64_t o = 0; o < sizes[f]; o += 997) ASSERT_EQ(h.data(f)[o], content(f, o)) << f << " at " << o;
    if (sizes[f] > 0) {
      ASSERT_EQ(h.data(f)[sizes[f] - 1], content(f, sizes[f] - 1)) << f;
    }
  }
  auto at = [&](uint32_t f) { return reinterpret_cast<uintptr_t>(h.data(f)); };
  EXPECT_EQ(at(5) % (2u << 20), 0u);  // the mapping starts on a huge page
  EXPECT_EQ(at(1), at(5) + 150'016);  // 150,000 rounded up to 64
  EXPECT_EQ(at(2), at(1) + 70'016);
  EXPECT_EQ(at(3), at(2) + (4u << 20) + 64);
  EXPECT_EQ(at(0), at(3) + 64);  // file 4 (empty) takes no room
}

// A file of no known size (added before it was written: its identity is
// taken at its first open) is held with the size stat gave when the hold
// was planned; one that grew before it was read is not held (read from its
// source), never cut to the planned size.
TEST(ResidentHold, AFileThatGrewSinceThePlanIsNotHeld) {
  const std::string dir = testing::scratch_dir();
  const std::string path = dir + "/file-0.bin";
  std::remove(path.c_str());
  auto table = std::make_shared<FileTable>();
  table->add(path);
  ASSERT_FALSE(table->known_size(0).has_value());
  write_file(dir, 0, 5000);
  auto hold = detail::ResidentHold::plan(table, {0});
  ASSERT_TRUE(hold.ok()) << hold.status();
  write_file(dir, 0, 6000);
  ASSERT_TRUE((*hold)->begin().ok());
  (*hold)->join();
  const std::shared_ptr<const detail::ResidentFiles> held = (*hold)->files();
  EXPECT_FALSE(held->has(0));
  EXPECT_CONTAINS(std::string(held->failure().message()), path);
  EXPECT_CONTAINS(std::string(held->failure().message()), "5000 bytes found when the hold was planned");
  EXPECT_CONTAINS(std::string(held->failure().message()), "6000 bytes: changed since");
}

}  // namespace
}  // namespace dlfeed
