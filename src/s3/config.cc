// SPDX-License-Identifier: Apache-2.0
#include "s3/config.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "dlfeed/error.h"
#include "s3/credential_process.h"

namespace dlfeed::inline DLFEED_ABI::s3::detail {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string home_file(const char* override_var, const char* rel) {
  std::string p = env(override_var);
  if (!p.empty()) return p;
  const std::string home = env("HOME");
  return home.empty() ? std::string() : absl::StrCat(home, "/", rel);
}

// `key = value` of section `section` of an INI file ("" when absent).
std::string ini_value(const std::string& path, absl::string_view section, absl::string_view key) {
  std::ifstream in(path);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#' || l[0] == ';') continue;
    if (l.front() == '[' && l.back() == ']') {
      inside = absl::StripAsciiWhitespace(l.substr(1, l.size() - 2)) == section;
      continue;
    }
    if (!inside) continue;
    const size_t eq = l.find('=');
    if (eq == absl::string_view::npos) continue;
    if (absl::StripAsciiWhitespace(l.substr(0, eq)) == key) {
      return std::string(absl::StripAsciiWhitespace(l.substr(eq + 1)));
    }
  }
  return "";
}

// Where a profile's settings are: its name, the credentials and config
// files, and its section in the config file.
struct Profile {
  const std::string& name;
  const std::string& creds_file;
  const std::string& config_file;
  const std::string& config_section;
};

// The profile's credentials into `c`, as AWS's tools look for them after
// the environment: its keys in the credentials file, else its
// credential_process (in the config file, else the credentials file), else
// its keys in the config file. None found: `c`'s keys stay empty.
absl::Status profile_credentials(const Options& o, const Config* refused, const Profile& p, Config& c) {
  c.access_key = ini_value(p.creds_file, p.name, "aws_access_key_id");
  c.secret_key = ini_value(p.creds_file, p.name, "aws_secret_access_key");
  c.session_token = ini_value(p.creds_file, p.name, "aws_session_token");
  c.where = absl::StrCat("profile ", p.name, " of ", p.creds_file);
  if (!c.access_key.empty()) return absl::OkStatus();
  std::string command = ini_value(p.config_file, p.config_section, "credential_process");
  std::string command_file = p.config_file;
  if (command.empty()) {
    command = ini_value(p.creds_file, p.name, "credential_process");
    command_file = p.creds_file;
  }
  if (!command.empty()) {
    c.where = absl::StrCat("credential_process of profile ", p.name, " in ", command_file);
    DLFEED_ASSIGN_OR_RETURN(
        ProcessCredentials got,
        process_credentials(command, c.where, std::chrono::milliseconds(o.request_timeout_ms),
                            refused ? &refused->access_key : nullptr, refused ? &refused->session_token : nullptr));
    c.access_key = std::move(got.access_key);
    c.secret_key = std::move(got.secret_key);
    c.session_token = std::move(got.session_token);
    c.expires = got.expires;
    return absl::OkStatus();
  }
  c.access_key = ini_value(p.config_file, p.config_section, "aws_access_key_id");
  c.secret_key = ini_value(p.config_file, p.config_section, "aws_secret_access_key");
  c.session_token = ini_value(p.config_file, p.config_section, "aws_session_token");
  c.where = absl::StrCat("profile ", p.name, " of ", p.config_file);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Location> parse_url(absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "s3://") && !absl::ConsumePrefix(&rest, "S3://")) {
    return absl::InvalidArgumentError(absl::StrCat(url, ": not an s3:// URL"));
  }
  const size_t slash = rest.find('/');
  Location loc;
  loc.bucket = std::string(rest.substr(0, slash));
  if (slash != absl::string_view::npos) loc.key = std::string(rest.substr(slash + 1));
  if (loc.bucket.empty()) return absl::InvalidArgumentError(absl::StrCat(url, ": no bucket (s3://bucket/key)"));
  return loc;
}

std::string uri_encode(absl::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

absl::StatusOr<Config> current_config(const Options& o, const Config* refused) {
  Config c;
  const std::string profile = env("AWS_PROFILE").empty() ? "default" : env("AWS_PROFILE");
  const std::string creds_file = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  const std::string config_file = home_file("AWS_CONFIG_FILE", ".aws/config");
  const std::string config_section = profile == "default" ? "default" : absl::StrCat("profile ", profile);
  c.access_key = env("AWS_ACCESS_KEY_ID");
  c.secret_key = env("AWS_SECRET_ACCESS_KEY");
  c.session_token = env("AWS_SESSION_TOKEN");
  c.where = "the environment (AWS_ACCESS_KEY_ID)";
  if (c.access_key.empty() && c.secret_key.empty()) {
    DLFEED_RETURN_IF_ERROR(profile_credentials(o, refused, {profile, creds_file, config_file, config_section}, c));
  }
  if (c.access_key.empty() || c.secret_key.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("s3: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give profile ", profile,
                     " (", "AWS_PROFILE) aws_access_key_id and aws_secret_access_key in ",
                     creds_file.empty() ? "~/.aws/credentials" : creds_file, ", or a credential_process in ",
                     config_file.empty() ? "~/.aws/config" : config_file));
  }
  c.region = env("AWS_REGION");
  if (c.region.empty()) c.region = env("AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = ini_value(config_file, config_section, "region");
  if (c.region.empty()) c.region = "us-east-1";
  c.endpoint = env("AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = env("AWS_ENDPOINT_URL");
  if (c.endpoint.empty()) c.endpoint = ini_value(config_file, config_section, "endpoint_url");
  const bool aws = c.endpoint.empty();
  if (aws) c.endpoint = absl::StrCat("https://s3.", c.region, ".amazonaws.com");
  while (absl::EndsWith(c.endpoint, "/")) c.endpoint.pop_back();
  if (!absl::StartsWith(c.endpoint, "http://") && !absl::StartsWith(c.endpoint, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("s3: the endpoint '", c.endpoint, "' (AWS_ENDPOINT_URL) is not an http:// or https:// URL"));
  }
  c.ca_bundle = env("AWS_CA_BUNDLE");
  c.ca_where = "AWS_CA_BUNDLE";
  if (c.ca_bundle.empty()) {
    c.ca_bundle = ini_value(config_file, config_section, "ca_bundle");
    c.ca_where = absl::StrCat("ca_bundle of profile ", profile, " in ", config_file);
  }
  // Read for HTTPS only: a plain-HTTP endpoint (a lab's gateway) is not held
  // to a CA file the environment names for other tools.
  if (!absl::StartsWith(c.endpoint, "https://")) c.ca_bundle.clear();
  if (!c.ca_bundle.empty() && !std::ifstream(c.ca_bundle).good()) {
    return absl::InvalidArgumentError(
        absl::StrCat("s3: ", c.ca_where, " names ", c.ca_bundle, ", which cannot be read (a PEM file of CAs)"));
  }
  if (c.ca_bundle.empty()) c.ca_where.clear();
  std::string addressing = env("DLFEED_S3_ADDRESSING");
  if (addressing.empty()) addressing = o.addressing;
  if (addressing == "auto") {
    c.virtual_host = aws || absl::EndsWith(c.endpoint, ".amazonaws.com");
  } else if (addressing == "path" || addressing == "virtual") {
    c.virtual_host = addressing == "virtual";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("s3: addressing is auto, path or virtual, not '", addressing, "' (DLFEED_S3_ADDRESSING)"));
  }
  return c;
}

std::string request_url(const Config& c, const Location& loc) {
  const std::string key = uri_encode(loc.key, true);
  // A bucket with a dot is no single DNS label: HTTPS's wildcard certificate
  // does not cover bucket.with.dots.HOST, so it goes path-style.
  if (!c.virtual_host || loc.bucket.find('.') != std::string::npos)
    return absl::StrCat(c.endpoint, "/", loc.bucket, "/", key);
  const size_t scheme_end = c.endpoint.find("://") + 3;
  return absl::StrCat(c.endpoint.substr(0, scheme_end), loc.bucket, ".", c.endpoint.substr(scheme_end), "/", key);
}

}  // namespace dlfeed::s3::detail
