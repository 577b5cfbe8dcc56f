// SPDX-License-Identifier: Apache-2.0
// Trace exports on events recorded by hand: the Chrome trace's read lanes
// (bounded, never overlapping on one lane, the rest as paired async slices),
// its metadata and epoch marks; the DFTracer names and hashes; gzip output;
// and write_trace refusing when tracing was never enabled.
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "dlfeed/counters/counters.h"
#include "gtest/gtest.h"

namespace dlfeed::counters {
namespace {

std::string gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr);
  std::string out;
  char buf[1 << 14];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

// A counters with: an epoch holding `reads` reads all in flight at once
// (each 100 µs, started 1 µs apart), and a step with its compute.
std::unique_ptr<Counters> with_reads(int reads) {
  TraceOptions to;
  to.enabled = true;
  to.pid = 7;
  to.process_name = "dlfeed rank 7";
  auto c = std::make_unique<Counters>(to);
  c->set_file_names({"/data/a.npy"});
  c->trace("epoch", "loader", 0, 1'000'000, 0, 1);
  for (int i = 0; i < reads; ++i) c->trace("read", "io", 1000 + i * 1000, 100'000, 0, i * 4096, 4096);
  c->trace("step", "consumer", 500'000, 200'000, 0, 1);
  c->trace("compute", "consumer", 600'000, 50'000);
  return c;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(TraceExport, ChromeLanesAreBoundedAndTheRestAsync) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  const std::string t = with_reads(40)->trace_string(TraceFormat::kChrome);
  // 40 reads in flight at once: 16 on the lanes, 24 as async begin/end pairs.
  EXPECT_EQ(count(t, "\"name\":\"read\",\"cat\":\"io\",\"ph\":\"X\""), 16u);
  EXPECT_EQ(count(t, "\"ph\":\"b\""), 24u);
  EXPECT_EQ(count(t, "\"ph\":\"e\""), 24u);
  EXPECT_NE(t.find("\"io_lanes\":16,\"io_reads_async\":24"), std::string::npos);
  EXPECT_NE(t.find("{\"name\":\"io reads 15\"}"), std::string::npos);
  EXPECT_EQ(t.find("io reads 16"), std::string::npos);
  EXPECT_NE(t.find("\"name\":\"process_name\",\"ph\":\"M\",\"pid\":7,\"tid\":0,\"args\":{\"name\":\"dlfeed rank 7\"}"),
            std::string::npos);
  EXPECT_NE(t.find("\"name\":\"epoch 0 begins\",\"cat\":\"loader\",\"ph\":\"i\",\"s\":\"p\""), std::string::npos);
}

TEST(TraceExport, ChromeReadsInSequenceShareOneLane) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  TraceOptions to;
  to.enabled = true;
  Counters c(to);
  // 100 reads one after another (each ends where the next starts): one lane.
  for (int i = 0; i < 100; ++i) c.trace("read", "io", i * 10, 10, 0, 0, 1);
  const std::string t = c.trace_string(TraceFormat::kChrome);
  EXPECT_NE(t.find("\"io_lanes\":1,\"io_reads_async\":0"), std::string::npos) << t.substr(t.size() - 300);
  EXPECT_EQ(count(t, "\"tid\":100000,\"ts\""), 100u);
}

TEST(TraceExport, DfTracerNamesCategoriesAndHashes) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  const std::string t = with_reads(3)->trace_string(TraceFormat::kDfTracer);
  std::vector<std::string> lines = absl::StrSplit(t, '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines.front(), "[");
  EXPECT_EQ(lines.back(), "]");
  std::map<std::string, int> seen;
  for (const std::string& l : lines) {
    if (l == "[" || l == "]") continue;
    EXPECT_TRUE(absl::StrContains(l, "\"args\":{\"hhash\":\"")) << l;
    if (absl::StrContains(l, "\"ph\":\"X\"")) {
      const size_t a = l.find("\"name\":\""), b = l.find("\",\"cat\":\""), c = l.find("\",\"pid\"");
      seen[l.substr(b + 9, c - b - 9) + "/" + l.substr(a + 8, b - a - 8)]++;
    }
  }
  EXPECT_EQ(seen["POSIX/pread"], 3);
  EXPECT_EQ(seen["pipeline/epoch.block"], 1);
  EXPECT_EQ(seen["pipeline/step"], 1);
  EXPECT_EQ(seen["compute/compute"], 1);
  EXPECT_EQ(seen["pipeline/train"], 1);
  EXPECT_EQ(seen["ai_root/ai_root"], 1);
  // The file's hash in the FH line is the one the reads carry.
  const size_t fh = t.find("\"name\":\"FH\"");
  ASSERT_NE(fh, std::string::npos);
  const size_t v = t.find("\"value\":\"", fh) + 9;
  const std::string fhash = t.substr(v, 16);
  EXPECT_NE(t.find("\"name\":\"/data/a.npy\",\"value\":\"" + fhash + "\""), std::string::npos);
  EXPECT_EQ(count(t, "\"fhash\":\"" + fhash + "\""), 3u);
  EXPECT_EQ(count(t, "\"dlfeed\":\"read\",\"fname\":\"/data/a.npy\""), 3u);
  EXPECT_NE(t.find("\"dlfeed\":\"epoch\",\"epoch\":0,\"complete\":true,\"count\":1"), std::string::npos);
}

TEST(TraceExport, GzPathIsCompressedOthersPlain) {
  if (!kEnabled) GTEST_SKIP() << "counters compiled out";
  auto c = with_reads(5);
  const std::string dir = ::testing::TempDir();
  const std::string gz = dir + "/trace_export_test.pfw.gz", plain = dir + "/trace_export_test.pfw";
  ASSERT_TRUE(c->write_trace(gz, TraceFormat::kDfTracer).ok());
  ASSERT_TRUE(c->write_trace(plain, TraceFormat::kDfTracer).ok());
  FILE* f = std::fopen(gz.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  unsigned char magic[2] = {};
  ASSERT_EQ(std::fread(magic, 1, 2, f), 2u);
  std::fclose(f);
  EXPECT_EQ(magic[0], 0x1f);
  EXPECT_EQ(magic[1], 0x8b);
  const std::string text = gunzip(gz);
  EXPECT_EQ(text.rfind("[\n", 0), 0u);
  EXPECT_EQ(count(text, "\"name\":\"pread\""), 5u);
  EXPECT_EQ(std::filesystem::file_size(plain), text.size());  // the same text, uncompressed
  std::filesystem::remove(gz);
  std::filesystem::remove(plain);
}

TEST(TraceExport, WriteWithoutTracingSaysToEnableIt) {
  Counters c;  // tracing never enabled
  const std::string path = ::testing::TempDir() + "/trace_export_test_none.json";
  const absl::Status st = c.write_trace(path, TraceFormat::kChrome);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(st.message(), path)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), kEnabled ? "tracing was not enabled" : "no counters")) << st;
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace dlfeed::counters
