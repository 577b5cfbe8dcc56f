// TFRecord framing, the DALI/DLIO .idx sidecar, and record writing.
//
// A record on disk:
//   uint64 length (little endian)
//   uint32 masked CRC32C of the 8 length bytes
//   length bytes of payload (a serialized tf.train.Example)
//   uint32 masked CRC32C of the payload
// with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
//
// A sidecar holds one ASCII line "offset length" per record, length being
// the whole framed record (16 + payload), as DALI's tfrecord2idx and the DLIO
// benchmark write it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/format/format.h"
#include "dlfeed/sample.h"

namespace dlfeed::detail {
class File;
}

namespace dlfeed::tfrecord {

inline constexpr size_t kHeaderSize = 12;  // length + its masked CRC
inline constexpr size_t kFooterSize = 4;   // masked CRC of the payload
inline constexpr size_t kOverhead = kHeaderSize + kFooterSize;
inline constexpr uint32_t kMaskDelta = 0xa282ead8u;

inline uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
inline uint32_t unmask_crc(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}
/// mask_crc(crc32c(data)).
uint32_t masked_crc32c(std::span<const std::byte> data);

/// Appends `payload`, framed, to `out`.
void append_record(std::vector<std::byte>& out, std::span<const std::byte> payload);

/// The payload length a 12-byte header announces; checks the header CRC when
/// `verify`. `offset` is the header's file offset (for errors).
absl::StatusOr<uint64_t> parse_header(std::span<const std::byte> header, bool verify, absl::string_view path,
                                      uint64_t offset);

/// The payload of one whole framed record (header + payload + footer),
/// checking the length against the span and, when `verify`, both CRCs.
/// Errors name `path` and the file offset (`offset` is the record's).
absl::StatusOr<std::span<const std::byte>> unframe_record(std::span<const std::byte> framed, bool verify,
                                                          absl::string_view path, uint64_t offset);

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

/// The sidecar text for `records`: "offset length\n" per record.
std::string format_idx(const std::vector<Extent>& records);
/// Writes the sidecar (via a temporary file and a rename).
absl::Status write_idx(const std::string& idx_path, const std::vector<Extent>& records);
/// Parses a sidecar; errors name the idx file and line.
absl::StatusOr<std::vector<Extent>> read_idx(const std::string& idx_path);
/// Checks sidecar entries against the data file: each within the file, at
/// least 16 bytes, records back to back from offset 0 to the end of the file,
/// and the first and last records' headers announcing the idx lengths.
absl::Status validate_idx(const std::vector<Extent>& records, const std::string& idx_path,
                          const detail::File& file, bool verify_crc);

/// Finds the record extents by reading only the 12-byte headers.
absl::StatusOr<std::vector<Extent>> scan_records(const detail::File& file, bool verify_crc);

/// Where the sidecar of `data_path` is, if one exists: options.index_dir,
/// else DATA.idx, else the DLIO place {data}/index/{train|valid}/NAME.idx.
/// Returns "" when there is none.
std::string find_idx(const std::string& data_path, const FormatOptions& options);
/// Where a new sidecar goes: options.index_dir/NAME.idx, else DATA.idx.
std::string idx_path_for_write(const std::string& data_path, const FormatOptions& options);

}  // namespace dlfeed::tfrecord
