// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/format/zip.h"

#include <zlib.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI {

// The readers (parse_zip_end, parse_zip64_end, parse_zip_directory,
// zip_data_offset) and inflate_raw are in the header tier:
// dlfeed/format/zip-inl.h.

uint32_t zip_crc32(std::span<const std::byte> bytes, uint32_t crc) {
  const Bytef* p = reinterpret_cast<const Bytef*>(bytes.data());
  size_t left = bytes.size();
  while (left > 0) {
    const uInt n = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, n));
    p += n;
    left -= n;
  }
  return crc;
}

}  // namespace dlfeed
