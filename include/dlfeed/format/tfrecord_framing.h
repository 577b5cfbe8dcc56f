// SPDX-License-Identifier: Apache-2.0
// TFRecord framing, the parse side and one record's writing (header tier:
// usable from #include alone, see dlfeed/detail/inline.h). A record on disk:
//   uint64 length (little endian)
//   uint32 masked CRC32C of the 8 length bytes
//   length bytes of payload (a serialized tf.train.Example)
//   uint32 masked CRC32C of the payload
// with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::tfrecord {

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
DLFEED_EXPORT uint32_t masked_crc32c(std::span<const std::byte> data);

/// Appends `payload`, framed, to `out`.
DLFEED_EXPORT void append_record(std::vector<std::byte>& out, std::span<const std::byte> payload);

/// The payload length a 12-byte header announces; checks the header CRC when
/// `verify`. `offset` is the header's file offset (for errors).
DLFEED_EXPORT absl::StatusOr<uint64_t> parse_header(std::span<const std::byte> header, bool verify,
                                                    absl::string_view path, uint64_t offset);

/// The payload of one whole framed record (header + payload + footer),
/// checking the length against the span and, when `verify`, both CRCs.
/// Errors name `path` and the file offset (`offset` is the record's).
DLFEED_EXPORT absl::StatusOr<std::span<const std::byte>> unframe_record(std::span<const std::byte> framed, bool verify,
                                                                        absl::string_view path, uint64_t offset);

}  // namespace dlfeed::tfrecord

#include "dlfeed/detail/inline.h"
#ifdef DLFEED_HEADER_ONLY
#include "dlfeed/format/tfrecord_framing-inl.h"
#endif
