// SPDX-License-Identifier: Apache-2.0
// Private: an exception caught on a loader thread, as the error its
// consumer gets. Running out of memory or threads (std::bad_alloc, a
// std::system_error from a thread's start) is ResourceExhausted, saying so;
// anything else Internal, with what() it said.
#pragma once

#include <exception>
#include <new>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dlfeed::inline DLFEED_ABI::base {

inline absl::Status exception_status(absl::string_view where, const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(where, ": out of memory (", e.what(), "): the process's memory or address space limit"));
  }
  if (dynamic_cast<const std::system_error*>(&e) != nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(where, ": the system gave no thread or resource (", e.what(), ")"));
  }
  return absl::InternalError(absl::StrCat(where, ": ", e.what()));
}

}  // namespace dlfeed::base
