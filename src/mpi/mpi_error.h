// SPDX-License-Identifier: Apache-2.0
// Private: an MPI call's failure as a Status (src/mpi/mpi.cc, job_cache.cc).
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "dlfeed/mpi/mpi.h"

namespace dlfeed::inline DLFEED_ABI::mpi {

/// "`who`: `call` failed: MPI's text for `code`".
inline absl::Status mpi_error(absl::string_view who, const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, text, &len);
  return absl::InternalError(absl::StrCat(who, ": ", call, " failed: ", absl::string_view(text, len)));
}

}  // namespace dlfeed::mpi

/// Runs an MPI call; returns mpi_error(who, ...) from the caller when it fails.
#define DLFEED_MPI_CALL_AS(who, call)                                                               \
  do {                                                                                              \
    const int dlfeed_mpi_rc_ = (call);                                                              \
    if (dlfeed_mpi_rc_ != MPI_SUCCESS) return ::dlfeed::mpi::mpi_error(who, #call, dlfeed_mpi_rc_); \
  } while (0)
