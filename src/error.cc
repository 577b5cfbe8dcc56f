#include "dlfeed/error.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/error.h"

namespace dlfeed::inline DLFEED_ABI {

absl::Status format_error(absl::string_view path, uint64_t offset, absl::string_view expected,
                          absl::string_view found) {
  return absl::DataLossError(absl::StrCat(path, ": at offset ", offset, ": expected ", expected, ", found ", found));
}

absl::Status format_error(absl::string_view path, uint64_t offset, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": at offset ", offset, ": ", what));
}

absl::Status file_error(absl::string_view path, absl::string_view expected, absl::string_view found) {
  return absl::DataLossError(absl::StrCat(path, ": expected ", expected, ", found ", found));
}

namespace {
absl::Status errno_status(int err, std::string msg) {
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}
}  // namespace

absl::Status io_error(absl::string_view path, uint64_t offset, absl::string_view op, int err) {
  return errno_status(err, absl::StrCat(path, ": at offset ", offset, ": ", op, " failed: ", std::strerror(err)));
}

absl::Status io_error(absl::string_view path, absl::string_view op, int err) {
  return errno_status(err, absl::StrCat(path, ": ", op, " failed: ", std::strerror(err)));
}

void throw_if_error(const absl::Status& status) {
  if (!status.ok()) throw Error(status);
}

}  // namespace dlfeed
