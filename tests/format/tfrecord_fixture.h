// SPDX-License-Identifier: Apache-2.0
// What the TFRecord tests share (tfrecord_*_test.cc): a scratch folder per test,
// whole-file I/O, the examples the files are made of, and plain framed records.
#pragma once

#include "dlfeed/format/tfrecord.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/format/example.h"
#include "dlfeed/format/format.h"
#include "format/tfrecord_scan.h"
#include "test_util.h"

#define EXPECT_CONTAINS(text, part)                                       \
  EXPECT_NE(std::string(text).find(std::string(part)), std::string::npos) \
      << "\"" << (text) << "\" lacks \"" << (part) << "\""

namespace dlfeed {
namespace fs = std::filesystem;
using tfrecord::kHeaderSize;

using testing::as_bytes;
using testing::from_hex;

class TfRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(DLFEED_TEST_TMPDIR) / "tfrecord" / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static void write_bytes(const std::string& p, std::span<const std::byte> bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  static std::vector<std::byte> read_bytes(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(s.size());
    std::memcpy(out.data(), s.data(), s.size());
    return out;
  }
  static std::string read_text(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  // Image of sample k: k+1 bytes... varying sizes, so records differ in length.
  static std::string image_of(size_t k) {
    std::string s(10 + 7 * k, '\0');
    for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(k * 31 + i);
    return s;
  }
  static std::vector<std::byte> example_of(size_t k) {
    const float floats[] = {static_cast<float>(k), 0.5f};
    const int64_t ints[] = {static_cast<int64_t>(k), -static_cast<int64_t>(k), 1 << 20};
    const std::string img = image_of(k);
    return example::ExampleBuilder()
        .add_bytes("image", as_bytes(img))
        .add_floats("floats", floats)
        .add_int64s("ints", ints)
        .serialize();
  }
  // A file of n records; returns the record extents.
  std::vector<Extent> write_file(const std::string& p, size_t n) {
    auto w = tfrecord::RecordWriter::create(p);
    EXPECT_TRUE(w.ok()) << w.status();
    for (size_t k = 0; k < n; ++k) EXPECT_TRUE(w->write(example_of(k)).ok());
    EXPECT_TRUE(w->close().ok());
    return w->records();
  }

  fs::path dir_;
};

// Records of pseudo-random lengths (1 B .. ~40 KiB payloads, some larger than
// the test's checkpoint span) as plain framed bytes, plus each record's extent.
inline std::vector<std::byte> plain_records(size_t n, std::vector<Extent>& extents, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out;
  for (size_t k = 0; k < n; ++k) {
    const size_t len = (k % 5 == 4) ? 40000 + rng() % 1000 : 1 + rng() % 3000;
    std::string img(len, '\0');
    // Half compressible text, half noise: deflate makes both fixed/dynamic and stored blocks.
    for (size_t i = 0; i < len; ++i) img[i] = (k % 2) ? static_cast<char>(rng()) : static_cast<char>('a' + (i * k) % 7);
    const int64_t ints[] = {static_cast<int64_t>(k)};
    auto ex = example::ExampleBuilder().add_bytes("image", as_bytes(img)).add_int64s("ints", ints).serialize();
    const size_t at = out.size();
    tfrecord::append_record(out, ex);
    extents.push_back({at, out.size() - at});
  }
  return out;
}

}  // namespace dlfeed
