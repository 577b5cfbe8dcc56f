// SPDX-License-Identifier: Apache-2.0
// Errors: absl::Status inside the library, dlfeed::Error at the public
// iteration boundary. Every message names the file, the byte offset and what
// was expected versus what was found, so a user can open the file in a hex
// editor and see the problem (the builders of those messages, format_error,
// file_error and io_error, are internal: dlfeed/detail/error.h).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI {

/// The exception thrown where a Status leaves the library (tools, bindings).
class DLFEED_EXPORT Error : public std::runtime_error {
 public:
  explicit Error(absl::Status status) : std::runtime_error(std::string(status.message())), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }
  absl::StatusCode code() const { return status_.code(); }

 private:
  absl::Status status_;
};

/// Throws dlfeed::Error if `status` is not OK.
DLFEED_EXPORT void throw_if_error(const absl::Status& status);

/// Unwraps a StatusOr or throws dlfeed::Error.
template <typename T>
T value_or_throw(absl::StatusOr<T> v) {
  if (!v.ok()) throw Error(v.status());
  return *std::move(v);
}

}  // namespace dlfeed

#define DLFEED_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status dlfeed_status_ = (expr);          \
    if (!dlfeed_status_.ok()) return dlfeed_status_; \
  } while (0)

#define DLFEED_CONCAT_INNER_(a, b) a##b
#define DLFEED_CONCAT_(a, b) DLFEED_CONCAT_INNER_(a, b)
// tmp names a variable and lhs may be a declaration ("auto x"): neither can
// be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define DLFEED_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = *std::move(tmp)
// NOLINTEND(bugprone-macro-parentheses)
/// lhs = value of a StatusOr expression, or return its error.
#define DLFEED_ASSIGN_OR_RETURN(lhs, expr) \
  DLFEED_ASSIGN_OR_RETURN_IMPL_(DLFEED_CONCAT_(dlfeed_statusor_, __LINE__), lhs, expr)

#include "dlfeed/detail/inline.h"
#ifdef DLFEED_HEADER_ONLY
#include "dlfeed/detail/error-inl.h"
#endif
