// SPDX-License-Identifier: Apache-2.0
// What the I/O tests share (io_test.cc, file_table_test.cc, read_op_test.cc):
// generated files whose every byte says which file and offset it is.
#pragma once

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
#include "absl/strings/str_cat.h"
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/io/io_backend.h"
#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed {

// EXPECT_CONTAINS(text, part) without gmock.
#define EXPECT_CONTAINS(text, part)                          \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "'" << std::string(text) << "' does not contain '" << (part) << "'"
using std::chrono::milliseconds;

// Byte `o` of generated file `f`: a hash, so a read from the wrong offset or
// file never matches by accident.
inline std::byte content(uint32_t f, uint64_t o) {
  uint64_t z = (uint64_t{f} << 40) + (o >> 3) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<std::byte>((z >> ((o & 7) * 8)) & 0xff);
}

inline std::string write_file(const std::string& dir, uint32_t f, uint64_t size) {
  std::string path = absl::StrCat(dir, "/file-", f, ".bin");
  std::string bytes(size, '\0');
  for (uint64_t o = 0; o < size; ++o) bytes[o] = static_cast<char>(content(f, o));
  testing::write_all(path, bytes);
  return path;
}

}  // namespace dlfeed
