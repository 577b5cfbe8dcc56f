// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the format tests: scratch paths and whole-file I/O.
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "dev/generate.h"
#include "dlfeed/sample.h"
#include "gtest/gtest.h"
#include "support/dataset.h"  // expected_sample, and the generated datasets

namespace dlfeed::testing {

/// A fresh folder for one test, under the build tree.
inline std::string scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path p = std::filesystem::path(DLFEED_TEST_TMPDIR) / info->test_suite_name() / info->name();
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string to_string(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

/// The bytes of a string, as the parsers take them.
inline std::span<const std::byte> as_bytes(absl::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

/// Bytes from hex text ("0a1b...").
inline std::vector<std::byte> from_hex(absl::string_view hex) {
  const std::string s = absl::HexStringToBytes(hex);
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

/// Sample `id` read and decoded by read_sample(), as bytes.
inline absl::StatusOr<std::string> read_bytes(const SampleIndex& index, uint64_t id) {
  std::vector<std::byte> raw, scratch;
  auto s = read_sample(index, id, raw, scratch);
  if (!s.ok()) return s.status();
  return to_string(s->bytes);
}

}  // namespace dlfeed::testing
