// SPDX-License-Identifier: Apache-2.0
// ReadOp's step: short reads, retries and EOF; O_DIRECT reads of the aligned
// superset of an extent.
#include "read/read_op.h"  // ReadOp's step, unit-tested here
#include "io/io_fixture.h"

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

}  // namespace
}  // namespace dlfeed
