// SPDX-License-Identifier: Apache-2.0
// Internal to dlfeed (its sources, tools and tests), not part of the API:
// building the Status of a bad file or a failed system call, so every message
// names the file, the byte offset where one is meant, and what was expected
// versus what was found.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI {

/// "path: at offset N: expected X, found Y" as an InvalidArgument/DataLoss status.
DLFEED_EXPORT absl::Status format_error(absl::string_view path, uint64_t offset, absl::string_view expected,
                                        absl::string_view found);

/// The same shape for a structural problem with no single found value.
DLFEED_EXPORT absl::Status format_error(absl::string_view path, uint64_t offset, absl::string_view what);

/// A problem with a file as a whole, where no single byte offset is meant:
/// "path: expected X, found Y" (DataLoss).
DLFEED_EXPORT absl::Status file_error(absl::string_view path, absl::string_view expected, absl::string_view found);

/// A failed system call on `path` at `offset`, with errno's text.
DLFEED_EXPORT absl::Status io_error(absl::string_view path, uint64_t offset, absl::string_view op, int err);
/// The same where no offset is meant (open, stat, mkdir, rename...).
DLFEED_EXPORT absl::Status io_error(absl::string_view path, absl::string_view op, int err);

}  // namespace dlfeed

#include "dlfeed/detail/inline.h"
#ifdef DLFEED_HEADER_ONLY
#include "dlfeed/detail/error-inl.h"
#endif
