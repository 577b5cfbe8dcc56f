// SPDX-License-Identifier: Apache-2.0
// Private to dlfeed::s3: a URL's bucket and key, and where and as whom
// requests go (the environment and the AWS profile files).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/s3/s3.h"

namespace dlfeed::inline DLFEED_ABI::s3::detail {

struct Location {
  std::string bucket;
  std::string key;  // "" for a bucket's root
};

/// s3://bucket/key; InvalidArgument naming the URL otherwise.
absl::StatusOr<Location> parse_url(absl::string_view url);

struct Config {
  std::string endpoint;  // scheme://host[:port], no trailing slash
  std::string region;
  bool virtual_host = false;
  std::string access_key, secret_key, session_token;  // secrets: never in a message
  std::string where;  // where the credentials came from ("environment", "profile P of F")
  /// When the credentials expire (a credential_process's Expiration); none
  /// for credentials that do not, or whose end is not known.
  std::optional<std::chrono::system_clock::time_point> expires;
  /// A PEM file of the CAs to trust for HTTPS (AWS_CA_BUNDLE, else the
  /// profile's ca_bundle), "" for the system's (system_ca_file()).
  std::string ca_bundle;
  std::string ca_where;  // where ca_bundle came from
};

/// The configuration now (environment, then profile files), with `o`'s
/// addressing; an error when no credentials are found, naming the places
/// tried (never a secret). `refused`: the configuration whose credentials
/// the server refused, so a credential_process that gave them runs again.
absl::StatusOr<Config> current_config(const Options& o, const Config* refused = nullptr);

/// The request URL of `loc` (no query): path-style or virtual-hosted, the
/// key's bytes percent-encoded as SigV4 wants them ('/' kept).
std::string request_url(const Config& c, const Location& loc);

/// RFC 3986 percent-encoding of all but A-Z a-z 0-9 - _ . ~ (and '/' when
/// keep_slash).
std::string uri_encode(absl::string_view s, bool keep_slash);

}  // namespace dlfeed::s3::detail
