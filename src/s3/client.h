// SPDX-License-Identifier: Apache-2.0
// Private to dlfeed::s3: one signed request over a kept-alive connection,
// tried again on what a later try may cure, and the process's counters.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "s3/config.h"

using CURL = void;  // curl's handle type, kept out of this header

namespace dlfeed::inline DLFEED_ABI::s3::detail {

/// One libcurl easy handle: its connection is kept alive between requests.
class Connection {
 public:
  Connection();
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  CURL* handle() const { return h_; }
  /// Lets go of a handle inherited through fork(): its connection is the
  /// parent's, so it is neither used nor closed here.
  void abandon() { h_ = nullptr; }

 private:
  CURL* h_;
};

enum class Method { kGet, kHead };

struct Request {
  Method method = Method::kGet;
  Location loc;
  std::string query;   // canonical: parameters sorted, values uri_encode'd ("" for none)
  std::string listed;  // a listing's prefix (for messages)
  bool ranged = false;
  uint64_t offset = 0, length = 0;      // the Range, when ranged
  std::span<std::byte> dest;            // a ranged GET's bytes go here (length of them)
  std::string if_match;                 // the ETag the object must still have ("": any)
  std::optional<uint64_t> object_size;  // the size it was listed with: a ranged answer of another is refused
};

struct Response {
  long code = 0;
  std::string content_range;
  std::string body;   // a listing's XML; an error's
  size_t placed = 0;  // bytes put in dest
  uint64_t content_length = 0;
  std::string etag;
};

/// Sends `r` signed with `c`, trying again (Options::max_attempts, with
/// backoff) on throttling, server errors, network errors and short bodies.
/// When the server refuses the credentials (an expired session token, an
/// unknown key, a signature that does not match: 400 or 403), reads them
/// again (current_config) and, when they changed (rotated in the
/// environment's files), puts them in `c` and tries once more with them.
/// A 2xx is OK; 404 NotFound, 403 PermissionDenied, 416 OutOfRange, others
/// an error naming the object, the range, the server's code and message.
/// `cancel`, when given and set, ends the request (and its retries) soon,
/// with Cancelled.
absl::StatusOr<Response> perform(Connection& conn, Config& c, const Options& o, const Request& r,
                                 const std::atomic<bool>* cancel = nullptr);

/// Code point `c` (at most U+10FFFF) appended as UTF-8.
void append_utf8(std::string& out, uint32_t c);
/// The text of each <tag>...</tag> in `xml` (entities decoded), in order.
std::vector<std::string> xml_values(absl::string_view xml, absl::string_view tag);
/// The blocks <tag>...</tag> (inner text, raw) in `xml`.
std::vector<absl::string_view> xml_blocks(absl::string_view xml, absl::string_view tag);

/// The process's counters (s3::stats()).
struct Counters {
  std::atomic<uint64_t> requests{0}, gets{0}, lists{0}, heads{0}, bytes{0}, retries{0}, retry_throttled{0},
      retry_server{0}, retry_network{0}, retry_short{0}, credentials_reread{0}, failures{0}, request_ns{0},
      cache_hits{0}, cache_bytes{0}, cache_kept{0}, cache_damaged{0}, cache_let_go{0}, cache_old_versions{0};
};
Counters& counters();

/// Mutexes of the process's s3 state (the pacer, a store, a piece cache)
/// that a child of fork() goes on using: fork() waits until no thread holds
/// one (pthread_atfork), so a DataLoader worker forked while the parent
/// reads never inherits one locked and hangs on it. Guarded from
/// fork_guard() until fork_unguard(); each is held only briefly and never
/// while taking another of them or calling either function.
void fork_guard(std::mutex* m);
void fork_unguard(std::mutex* m);
/// How many mutexes are guarded now (for tests).
size_t fork_guarded();

/// The CA file HTTPS uses when the configuration names none: "" when
/// libcurl's own (built in, e.g. Debian's /etc/ssl/certs/ca-certificates.crt)
/// is there; else SSL_CERT_FILE, or the first of the usual places of other
/// distributions that exists (a wheel's libcurl built on one distribution,
/// run on another). Found once.
const std::string& system_ca_file();

/// libcurl's process-wide set-up, once.
void init_curl();

}  // namespace dlfeed::s3::detail
