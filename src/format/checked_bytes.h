// SPDX-License-Identifier: Apache-2.0
// Private: the decoder's word to a format's decode that the bytes it is given
// were checked already. When several fields of a batch come from the same
// record (a TFRecord Example's image and label), their reads are one read and
// every field's sample is the same bytes of the read buffer; the first
// field's decode checks the record's CRCs, and the decoder names those bytes
// here while the later fields decode them, so the record is checked once.
#pragma once

#include <cstddef>
#include <span>

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// Bytes of the read buffer checked by an earlier field's decode (this thread).
struct CheckedBytes {
  const std::byte* data = nullptr;
  size_t size = 0;
};
inline thread_local CheckedBytes checked_bytes;

/// True when `bytes` are exactly those the decoder named as checked.
inline bool already_checked(std::span<const std::byte> bytes) {
  return bytes.data() != nullptr && bytes.data() == checked_bytes.data && bytes.size() == checked_bytes.size;
}

}  // namespace dlfeed::detail
