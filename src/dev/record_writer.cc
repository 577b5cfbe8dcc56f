// SPDX-License-Identifier: Apache-2.0
// tfrecord::RecordWriter: framed records to a file (development library).
#include "dev/record_writer.h"

#include <cerrno>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "dlfeed/format/tfrecord_framing.h"

namespace dlfeed::inline DLFEED_ABI::tfrecord {

absl::StatusOr<RecordWriter> RecordWriter::create(const std::string& path) {
  RecordWriter w;
  w.path_ = path;
  w.file_ = std::fopen(path.c_str(), "wb");
  if (w.file_ == nullptr) return io_error(path, "open for writing", errno);
  return w;
}

RecordWriter::RecordWriter(RecordWriter&& o) noexcept
    : path_(std::move(o.path_)),
      file_(std::exchange(o.file_, nullptr)),
      offset_(o.offset_),
      records_(std::move(o.records_)),
      buffer_(std::move(o.buffer_)) {}

RecordWriter::~RecordWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status RecordWriter::write(std::span<const std::byte> payload) {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  buffer_.clear();
  append_record(buffer_, payload);
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size()) {
    return io_error(path_, offset_, "write", errno);
  }
  records_.push_back({offset_, buffer_.size()});
  offset_ += buffer_.size();
  return absl::OkStatus();
}

absl::Status RecordWriter::close() {
  if (file_ == nullptr) return absl::OkStatus();
  std::FILE* f = std::exchange(file_, nullptr);
  const bool flushed = std::fflush(f) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !flushed) return io_error(path_, offset_, "close", flushed ? errno : err);
  return absl::OkStatus();
}

}  // namespace dlfeed::tfrecord
