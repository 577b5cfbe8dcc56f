// SPDX-License-Identifier: Apache-2.0
// The zip container as numpy's savez/savez_compressed write it: the central
// directory (with Zip64 records and extra fields) and local headers.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI {

/// One member of a zip archive, as its central directory entry describes it.
struct DLFEED_EXPORT ZipMember {
  std::string name;
  uint16_t method = 0;  // 0 stored, 8 deflated
  uint16_t flags = 0;
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;
  uint64_t data_offset = 0;  // filled by resolve_zip_data_offset()
};

/// Parses the end-of-central-directory record (Zip64 when present) from
/// `tail`, the last bytes of a file of `file_size` bytes; returns the
/// central directory's offset and size and the member count.
struct DLFEED_EXPORT ZipDirectory {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t entries = 0;
};
DLFEED_EXPORT absl::StatusOr<ZipDirectory> parse_zip_end(std::span<const std::byte> tail, uint64_t file_size,
                                                         absl::string_view path);

/// Parses the Zip64 end record `z64` (56+ bytes, read at the offset the
/// locator gives) when parse_zip_end() asked for it.
DLFEED_EXPORT absl::StatusOr<ZipDirectory> parse_zip64_end(std::span<const std::byte> z64, uint64_t offset,
                                                           absl::string_view path);

/// Parses `dir`, the central directory read from `dir_offset`.
DLFEED_EXPORT absl::StatusOr<std::vector<ZipMember>> parse_zip_directory(std::span<const std::byte> dir,
                                                                         uint64_t dir_offset, uint64_t entries,
                                                                         uint64_t file_size, absl::string_view path);

/// From the 30-byte local header of `m`, where its data starts.
DLFEED_EXPORT absl::StatusOr<uint64_t> zip_data_offset(std::span<const std::byte> local_header, const ZipMember& m,
                                                       uint64_t file_size, absl::string_view path);

/// zlib's CRC-32 of `bytes` (the checksum zip uses).
DLFEED_EXPORT uint32_t zip_crc32(std::span<const std::byte> bytes, uint32_t crc = 0);

/// Inflates a raw deflate stream (zip method 8) into `out`, which must be
/// exactly the expected size; errors name the member and offset.
DLFEED_EXPORT absl::Status inflate_raw(std::span<const std::byte> in, std::span<std::byte> out, absl::string_view path,
                                       uint64_t offset, absl::string_view what);

}  // namespace dlfeed

#include "dlfeed/detail/inline.h"
#ifdef DLFEED_HEADER_ONLY
#include "dlfeed/format/zip-inl.h"
#endif
