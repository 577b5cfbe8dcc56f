// SPDX-License-Identifier: Apache-2.0
// Development library (not installed): writes zip archives (NPZ files), for
// `dlfeed generate`, the tests and the benches.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI {

/// Writes a zip archive member by member (stored or deflated), with Zip64
/// local headers as numpy writes them.
class ZipWriter {
 public:
  explicit ZipWriter(std::string path) : path_(std::move(path)) {}
  absl::Status add(absl::string_view name, std::span<const std::byte> data, bool deflate, int level);
  absl::Status finish();  // writes the archive

 private:
  std::string path_;
  std::string out_;
  struct Entry {
    std::string name;
    uint16_t method;
    uint32_t crc;
    uint64_t csize, usize, offset;
  };
  std::vector<Entry> entries_;
};

}  // namespace dlfeed
