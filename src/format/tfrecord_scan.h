// SPDX-License-Identifier: Apache-2.0
// The TFRecord scans that read a file through dlfeed's internal handle
// (detail::File): private to the library, its tests and benches, so no public
// signature takes a detail:: type. The rest of TFRecord is in
// include/dlfeed/format/tfrecord.h.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/format/format.h"
#include "dlfeed/format/tfrecord.h"

namespace dlfeed::inline DLFEED_ABI::tfrecord {

/// Checks sidecar entries against the data file: each within the file, at
/// least 16 bytes, records back to back from offset 0 to the end of the file,
/// and the first and last records' headers announcing the idx lengths.
/// `head`, when not empty, is the file's first bytes, already read by a
/// caller that found the file uncompressed: headers inside it are not read
/// again (the same for scan_records).
DLFEED_EXPORT absl::Status validate_idx(const std::vector<Extent>& records, const std::string& idx_path,
                                        const detail::File& file, bool verify_crc,
                                        std::span<const std::byte> head = {});

/// Finds the record extents by reading only the 12-byte headers.
DLFEED_EXPORT absl::StatusOr<std::vector<Extent>> scan_records(const detail::File& file, bool verify_crc,
                                                               std::span<const std::byte> head = {});

/// Inflates the whole file once (see above). `span` is kCheckpointSpan
/// except in tests. Errors (truncated stream, corrupt deflate data, wrong
/// trailer checksum, trailing bytes, a record cut short) name the file and
/// the compressed offset.
DLFEED_EXPORT absl::StatusOr<CompressedIndex> scan_compressed(const detail::File& file, Compression c, bool verify_crc,
                                                              const RecordVisitor& visit = nullptr,
                                                              uint64_t span = kCheckpointSpan);

/// The first sidecar of a data file that opens, read and parsed (tfrecord_records.cc).
struct FoundIdx {
  std::string path;  // "" when there is none
  std::vector<Extent> records;
};
/// The first sidecar of `data_path` that opens, read and parsed: an open
/// per place tried and one read for a small sidecar, no stat (FILE.idx
/// beside it only when `beside`: the folder listing may know there is none).
absl::StatusOr<FoundIdx> load_idx(const std::string& data_path, const FormatOptions& options, bool beside);
/// Bytes [offset, offset + out.size()) of `file`, from `head` (its first
/// bytes, already read) when they lie there.
absl::Status read_at(const detail::File& file, std::span<const std::byte> head, uint64_t offset,
                     std::span<std::byte> out, absl::string_view what);

/// A framed record's CRCs checked from pieces: `skeleton` is the record
/// with the bytes [value_at, value_at + value.size()) elsewhere, in `value`
/// (read straight into a batch). True when its length field says the
/// skeleton's length and both CRCs match (one CRC32C over the payload's
/// pieces in order, no copy). `value_crc` (or null): the CRC32C of
/// `value`'s bytes taken as they were read, joined to the other pieces'
/// with crc32c_combine instead of reading the value again.
bool split_crcs_hold(std::span<const std::byte> skeleton, uint64_t value_at, std::span<const std::byte> value,
                     const uint32_t* value_crc = nullptr);

}  // namespace dlfeed::tfrecord
