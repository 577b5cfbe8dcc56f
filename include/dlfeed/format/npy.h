// SPDX-License-Identifier: Apache-2.0
// The NPY array format (numpy's .npy, versions 1.0, 2.0 and 3.0): header
// parsing and writing. Used for .npy files and for the members of .npz.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/dtype.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI {

/// What an NPY header says about the array that follows it.
struct DLFEED_EXPORT NpyHeader {
  int major = 1;
  int minor = 0;
  DType dtype;
  bool fortran_order = false;
  Shape shape;               // the whole array's shape
  uint64_t data_offset = 0;  // bytes from the start of the NPY stream to the data

  uint64_t num_elements() const;  // product of shape (checked for overflow at parse)
  uint64_t data_bytes() const { return num_elements() * dtype.size; }
};

/// Bytes of the NPY preamble that must be read before the header size is known.
inline constexpr size_t kNpyPreamble = 12;

/// Total header size (magic, version, length field, dictionary) from the first
/// bytes of an NPY stream (at least 10, or 12 for versions 2 and 3).
/// `base_offset` is where the stream starts in `path` (for messages).
DLFEED_EXPORT absl::StatusOr<uint64_t> npy_header_size(std::span<const std::byte> preamble, absl::string_view path,
                                                       uint64_t base_offset);

/// Parses a complete NPY header (npy_header_size() bytes). Refuses object and
/// structured dtypes, and shapes whose byte size overflows.
DLFEED_EXPORT absl::StatusOr<NpyHeader> parse_npy_header(std::span<const std::byte> header, absl::string_view path,
                                                         uint64_t base_offset);

/// An NPY header as numpy writes it (version 1.0, or 2.0 when the dictionary
/// does not fit 65535 bytes), padded so the data starts 64-byte aligned.
DLFEED_EXPORT std::string make_npy_header(DType dtype, const Shape& shape, bool fortran_order = false);

namespace npy_detail {
/// What of `shape` does not fit, or null: its element count in 64 bits (set
/// in `elements`), or its strides (empty dimensions as 1) in 63 bits.
DLFEED_EXPORT const char* shape_overflow(const Shape& shape, uint64_t& elements);
}  // namespace npy_detail

}  // namespace dlfeed

#include "dlfeed/detail/inline.h"
#ifdef DLFEED_HEADER_ONLY
#include "dlfeed/format/npy-inl.h"
#endif
