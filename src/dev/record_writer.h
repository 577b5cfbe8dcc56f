// SPDX-License-Identifier: Apache-2.0
// Development library (not installed): writes TFRecord files, for
// `dlfeed generate`, the tests and the benches.
#pragma once

#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::tfrecord {

/// Writes framed records to a file, remembering each record's extent.
class RecordWriter {
 public:
  static absl::StatusOr<RecordWriter> create(const std::string& path);
  RecordWriter(RecordWriter&& o) noexcept;
  RecordWriter& operator=(RecordWriter&&) = delete;
  ~RecordWriter();

  absl::Status write(std::span<const std::byte> payload);
  /// Flushes and closes; errors from the final write surface here.
  absl::Status close();
  /// {offset, framed length} of every record written so far.
  const std::vector<Extent>& records() const { return records_; }

 private:
  RecordWriter() = default;
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t offset_ = 0;
  std::vector<Extent> records_;
  std::vector<std::byte> buffer_;
};

}  // namespace dlfeed::tfrecord
