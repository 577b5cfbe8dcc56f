// SPDX-License-Identifier: Apache-2.0
// The bodies of dlfeed/error.h and dlfeed/detail/error.h (header tier: see
// dlfeed/detail/inline.h).
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/inline.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI {

DLFEED_INLINE absl::Status format_error(absl::string_view path, uint64_t offset, absl::string_view expected,
                                        absl::string_view found) {
  return absl::DataLossError(absl::StrCat(path, ": at offset ", offset, ": expected ", expected, ", found ", found));
}

DLFEED_INLINE absl::Status format_error(absl::string_view path, uint64_t offset, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": at offset ", offset, ": ", what));
}

DLFEED_INLINE absl::Status file_error(absl::string_view path, absl::string_view expected, absl::string_view found) {
  return absl::DataLossError(absl::StrCat(path, ": expected ", expected, ", found ", found));
}

namespace error_detail {
DLFEED_DETAIL_BEGIN
DLFEED_INLINE absl::Status errno_status(int err, absl::string_view msg) {
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}
DLFEED_DETAIL_END
}  // namespace error_detail

DLFEED_INLINE absl::Status io_error(absl::string_view path, uint64_t offset, absl::string_view op, int err) {
  return error_detail::errno_status(
      err, absl::StrCat(path, ": at offset ", offset, ": ", op, " failed: ", std::strerror(err)));
}

DLFEED_INLINE absl::Status io_error(absl::string_view path, absl::string_view op, int err) {
  return error_detail::errno_status(err, absl::StrCat(path, ": ", op, " failed: ", std::strerror(err)));
}

DLFEED_INLINE void throw_if_error(const absl::Status& status) {
  if (!status.ok()) throw Error(status);
}

}  // namespace dlfeed
