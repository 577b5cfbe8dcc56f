// SPDX-License-Identifier: Apache-2.0
// Private to dlfeed::s3: credentials a profile's `credential_process` prints
// (AWS's "sourcing credentials with an external process": aws sso, a vault
// helper, `aws configure export-credentials --format process`).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::s3::detail {

struct ProcessCredentials {
  std::string access_key, secret_key, session_token;  // secrets: never in a message
  /// When they expire (the output's Expiration), none for credentials that do not.
  std::optional<std::chrono::system_clock::time_point> expires;
};

/// The words of a credential_process command as a POSIX shell splits them
/// (spaces separate; '...' literal; "..." and a backslash escape), as AWS's
/// tools split it; the command runs without a shell.
absl::StatusOr<std::vector<std::string>> split_command(absl::string_view command);

/// The JSON a credential process prints: {"Version": 1, "AccessKeyId",
/// "SecretAccessKey", "SessionToken"?, "Expiration"? (RFC 3339)}. Errors name
/// `where` and the field, never a value.
absl::StatusOr<ProcessCredentials> parse_process_output(absl::string_view out, const std::string& where);

/// Runs `command` (no shell) and reads its credentials; an error naming
/// `where` when it cannot start, exits other than 0 (with the end of what
/// it wrote to stderr), prints what parse_process_output refuses, or runs
/// longer than `timeout` (then it is killed).
absl::StatusOr<ProcessCredentials> run_credential_process(const std::string& command, const std::string& where,
                                                          std::chrono::milliseconds timeout);

/// Credentials that expire within this are read again (run again) before
/// a request is signed with them.
inline constexpr std::chrono::minutes kRenewBefore{5};

/// run_credential_process's credentials, kept for the process: run again
/// when they expire within kRenewBefore, or when `refused_access_key` and
/// `refused_token` are the kept ones' (the server refused them); not more
/// often than every 2 s for either, nor after a failed run (its error is
/// given instead). One run at a time; callers that waited for it get its
/// result, credentials or error.
absl::StatusOr<ProcessCredentials> process_credentials(const std::string& command, const std::string& where,
                                                       std::chrono::milliseconds timeout,
                                                       const std::string* refused_access_key = nullptr,
                                                       const std::string* refused_token = nullptr);

/// How many times a credential process was started by this process.
uint64_t credential_process_runs();

}  // namespace dlfeed::s3::detail
