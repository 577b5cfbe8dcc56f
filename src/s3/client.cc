// SPDX-License-Identifier: Apache-2.0
#include "s3/client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "s3/credential_process.h"

namespace dlfeed::inline DLFEED_ABI::s3::detail {

namespace {

using Clock = std::chrono::steady_clock;

// SHA-256 of no bytes: the payload hash of a GET or HEAD.
constexpr const char* kEmptyPayload =
    "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
// A listing page is well under this; an error body too.
constexpr size_t kMostBody = 64u << 20;

// Requests of the process wait here: a server's SlowDown pauses them all,
// and Options::max_requests_per_second spaces them.
class Pacer {
 public:
  Pacer() { fork_guard(&mu_); }
  void wait(double per_second, const std::atomic<bool>* cancel) {
    Clock::time_point t;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const Clock::time_point now = Clock::now();
      t = std::max(now, paused_until_);
      if (per_second >= 1e-3) {
        t = std::max(t, next_slot_);
        next_slot_ = t + std::chrono::nanoseconds(static_cast<int64_t>(1e9 / per_second));
      }
    }
    // In steps, so that a cancel is seen.
    while (Clock::now() < t && (cancel == nullptr || !cancel->load(std::memory_order_relaxed))) {
      std::this_thread::sleep_until(std::min(t, Clock::now() + std::chrono::milliseconds(20)));
    }
  }
  void pause(std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> lock(mu_);
    paused_until_ = std::max(paused_until_, Clock::now() + d);
  }

 private:
  std::mutex mu_;
  Clock::time_point paused_until_{}, next_slot_{};
};

Pacer& pacer() {
  static Pacer* p = new Pacer;
  return *p;
}

struct Sink {
  const Request* req = nullptr;
  Response* resp = nullptr;
  CURL* h = nullptr;
  const std::atomic<bool>* cancel = nullptr;
  bool too_long = false;
  bool checked = false;  // the response's range was compared with the one asked
  bool wrong_range = false;
};

// The slowest a request may receive, over the stall timeout, before it is
// given up; a GET's whole-request limit grows by its bytes at this rate, up
// to kLongestGetMs (a server trickling just above it is given up then).
constexpr uint64_t kSlowestBytesPerSecond = 1024;
constexpr uint64_t kLongestGetMs = 10 * 60 * 1000;

// "bytes FIRST-LAST/TOTAL" (TOTAL may be "*").
bool parse_content_range(absl::string_view v, uint64_t& first, uint64_t& last) {
  if (!absl::ConsumePrefix(&v, "bytes ")) return false;
  const size_t dash = v.find('-'), slash = v.find('/');
  if (dash == absl::string_view::npos || slash == absl::string_view::npos || slash < dash) return false;
  return absl::SimpleAtoi(v.substr(0, dash), &first) && absl::SimpleAtoi(v.substr(dash + 1, slash - dash - 1), &last);
}

// The object's size a Content-Range gives after its '/' (none: "*" or absent).
std::optional<uint64_t> content_range_total(absl::string_view v) {
  const size_t slash = v.rfind('/');
  uint64_t total = 0;
  if (slash == absl::string_view::npos || !absl::SimpleAtoi(v.substr(slash + 1), &total)) return std::nullopt;
  return total;
}

// Whether the response carries exactly the bytes asked, of an object of the
// size it was listed with (when the request says): a 206 of that range, or a
// 200 of the whole object when the range starts at 0 and is it.
bool right_range(const Request& r, long code, const Response& resp) {
  if (code == 206) {
    uint64_t first = 0, last = 0;
    const std::optional<uint64_t> total = content_range_total(resp.content_range);
    return parse_content_range(resp.content_range, first, last) && first == r.offset &&
           last == r.offset + r.length - 1 && (!r.object_size || !total || *total == *r.object_size);
  }
  return r.offset == 0 && resp.content_length == r.length && (!r.object_size || *r.object_size == r.length);
}

size_t on_body(char* p, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const size_t total = size * n;
  long code = 0;
  curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
  if (s->req->ranged && (code == 200 || code == 206)) {
    if (!s->checked) {
      s->checked = true;
      s->wrong_range = !right_range(*s->req, code, *s->resp);
      if (s->wrong_range) return 0;  // aborts: not the bytes asked
    }
    if (s->resp->placed + total > s->req->dest.size()) {
      s->too_long = true;
      return 0;  // aborts the transfer: a longer body than the range asked
    }
    std::memcpy(s->req->dest.data() + s->resp->placed, p, total);
    s->resp->placed += total;
    return total;
  }
  if (s->resp->body.size() + total > kMostBody) return 0;
  s->resp->body.append(p, total);
  return total;
}

size_t on_header(char* p, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const size_t total = size * n;
  absl::string_view line(p, total);
  if (absl::StartsWith(line, "HTTP/")) {  // a new response (after a 100 Continue, a redirect)
    s->resp->etag.clear();
    s->resp->content_range.clear();
    s->resp->content_length = 0;
    return total;
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return total;
  const std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, colon)));
  const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
  if (name == "etag") s->resp->etag = std::string(value);
  if (name == "content-length") (void)absl::SimpleAtoi(value, &s->resp->content_length);
  if (name == "content-range") s->resp->content_range = std::string(value);
  return total;
}

// Ends a transfer when the request is cancelled.
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* s = static_cast<const Sink*>(user);
  return s->cancel != nullptr && s->cancel->load(std::memory_order_relaxed) ? 1 : 0;
}

// XML's five named entities and every numeric one (&#9; &#x1F;), as UTF-8;
// anything else after '&' is kept as it is.
std::string xml_unescape(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t semi = s[i] == '&' ? s.find(';', i) : absl::string_view::npos;
    if (semi == absl::string_view::npos || semi - i > 10) {
      out.push_back(s[i]);
      continue;
    }
    const absl::string_view name = s.substr(i + 1, semi - i - 1);
    uint32_t c = 0;
    bool ok = true;
    if (name == "amp")
      c = '&';
    else if (name == "lt")
      c = '<';
    else if (name == "gt")
      c = '>';
    else if (name == "quot")
      c = '"';
    else if (name == "apos")
      c = '\'';
    else if (name.size() > 1 && name[0] == '#') {
      const bool hex = name[1] == 'x' || name[1] == 'X';
      const absl::string_view digits = name.substr(hex ? 2 : 1);
      ok = !digits.empty() && (hex ? absl::SimpleHexAtoi(digits, &c) : absl::SimpleAtoi(digits, &c)) && c <= 0x10FFFF;
    } else {
      ok = false;
    }
    if (!ok) {
      out.push_back(s[i]);
      continue;
    }
    append_utf8(out, c);
    i = semi;
  }
  return out;
}

constexpr char kNoS3Error[] = "is the endpoint an S3 server?";

std::string what_of(const Request& r) {
  std::string s = absl::StrCat("s3://", r.loc.bucket, "/", r.query.empty() ? r.loc.key : r.listed);
  if (r.ranged && r.length > 0) absl::StrAppend(&s, " bytes ", r.offset, "-", r.offset + r.length - 1);
  if (!r.query.empty()) absl::StrAppend(&s, " (listing)");
  return s;
}

// The server's <Code> and <Message>, or what a HEAD (no body) can tell. An
// error with no S3 <Code> is likely from no S3 server at all (another
// service at the endpoint's port, a web server): said so.
std::string server_says(const Response& resp, bool head) {
  std::vector<std::string> code = xml_values(resp.body, "Code");
  std::vector<std::string> message = xml_values(resp.body, "Message");
  std::string s = absl::StrCat("HTTP ", resp.code);
  if (!code.empty()) absl::StrAppend(&s, " ", code[0]);
  if (!message.empty()) absl::StrAppend(&s, ": ", message[0]);
  if (code.empty() && !head && resp.code >= 400) {
    absl::StrAppend(&s, " with no S3 error in the answer (", kNoS3Error, ")");
  }
  return s;
}

constexpr uint32_t kTimeoutTries = 3;

enum class Verdict { kDone, kRetryThrottled, kRetryServer, kRetryNetwork, kRetryShort, kFail, kCancelled };

bool network_error(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return true;
    default: return false;
  }
}

// One try of `r`.
CURLcode try_once(Connection& conn, const Config& c, const Options& o, const Request& r, Response& resp, Sink& sink,
                  char* errbuf) {
  CURL* h = conn.handle();
  curl_easy_reset(h);
  std::string url = request_url(c, r.loc);
  if (!r.query.empty()) absl::StrAppend(&url, "?", r.query);
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);  // a key's "./" and "../" are its own, not to be resolved
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout_ms));
  // A GET may take its bytes at the slowest rate kept below: a slow link
  // (a shared uplink, another region) is slow, not failed; the whole-request
  // limit alone gave up an 8 MiB piece below 140 KB/s.
  const uint64_t at_slowest_ms = r.ranged ? r.length * 1000 / kSlowestBytesPerSecond : 0;
  const uint64_t limit_ms =
      std::max<uint64_t>(o.request_timeout_ms, std::min<uint64_t>(o.request_timeout_ms + at_slowest_ms, kLongestGetMs));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(limit_ms));
  // Below kSlowestBytesPerSecond over the stall timeout (a server that stopped
  // answering, or one that trickles): given up.
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(kSlowestBytesPerSecond));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                   static_cast<long>(std::max<uint32_t>(1, (o.stall_timeout_ms + 999) / 1000)));
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  if (!c.ca_bundle.empty()) {
    curl_easy_setopt(h, CURLOPT_CAINFO, c.ca_bundle.c_str());
  } else if (const std::string& ca = system_ca_file(); !ca.empty()) {
    curl_easy_setopt(h, CURLOPT_CAINFO, ca.c_str());
  }
  const std::string sigv4 = absl::StrCat("aws:amz:", c.region, ":s3");
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(h, CURLOPT_USERNAME, c.access_key.c_str());
  curl_easy_setopt(h, CURLOPT_PASSWORD, c.secret_key.c_str());
  curl_slist* headers = curl_slist_append(nullptr, kEmptyPayload);
  std::string token, range, match;
  if (!c.session_token.empty()) {
    token = absl::StrCat("x-amz-security-token: ", c.session_token);
    headers = curl_slist_append(headers, token.c_str());
  }
  if (r.ranged) {
    range = absl::StrCat("Range: bytes=", r.offset, "-", r.offset + r.length - 1);
    headers = curl_slist_append(headers, range.c_str());
  }
  if (!r.if_match.empty()) {
    match = absl::StrCat("If-Match: ", r.if_match);
    headers = curl_slist_append(headers, match.c_str());
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  if (r.method == Method::kHead) curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  sink.req = &r;
  sink.resp = &resp;
  sink.h = h;
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &sink);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &sink);
  errbuf[0] = '\0';
  const CURLcode rc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.code);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);  // the caller's buffer does not outlive the call
  curl_slist_free_all(headers);
  return rc;
}

// Whether two ETags name one version (weak or strong, quoted or not).
bool same_etag(absl::string_view a, absl::string_view b) {
  auto bare = [](absl::string_view e) {
    absl::ConsumePrefix(&e, "W/");
    if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
    return e;
  };
  return bare(a) == bare(b);
}

// A 2xx answer to an If-Match request naming another version: a server or
// proxy that ignores If-Match.
bool other_version(const Request& r, const Response& resp) {
  return resp.code / 100 == 2 && !r.if_match.empty() && !resp.etag.empty() && !same_etag(r.if_match, resp.etag);
}

Verdict judge(const Request& r, CURLcode rc, const Response& resp, const Sink& sink) {
  if (sink.cancel != nullptr && sink.cancel->load(std::memory_order_relaxed)) return Verdict::kCancelled;
  if (sink.wrong_range || sink.too_long) return Verdict::kFail;  // the server does not honour the Range
  if (rc != CURLE_OK) return network_error(rc) ? Verdict::kRetryNetwork : Verdict::kFail;
  if (resp.code == 503 || resp.code == 429) return Verdict::kRetryThrottled;
  if (resp.code == 500 || resp.code == 502 || resp.code == 504 || resp.code == 408) return Verdict::kRetryServer;
  if (resp.code == 400 && absl::StrContains(resp.body, "<Code>RequestTimeout</Code>")) return Verdict::kRetryServer;
  if (resp.code < 200 || resp.code >= 300) return Verdict::kFail;
  if (other_version(r, resp)) return Verdict::kFail;
  if (r.ranged && resp.placed != r.length) return Verdict::kRetryShort;
  return Verdict::kDone;
}

absl::Status failure(const Request& r, CURLcode rc, const Response& resp, const Sink& sink, const char* errbuf,
                     uint32_t tries) {
  const std::string what = what_of(r);
  const std::string after = tries > 1 ? absl::StrCat(" (after ", tries, " tries)") : "";
  const std::optional<uint64_t> total = content_range_total(resp.content_range);
  if (sink.wrong_range && total && r.object_size && *total != *r.object_size) {
    return absl::DataLossError(absl::StrCat(what, ": the object is now ", *total, " bytes, listed with ",
                                            *r.object_size,
                                            ": it changed since it was listed; open the dataset "
                                            "again; no bytes taken"));
  }
  if (sink.wrong_range && total && *total < r.offset + r.length) {
    return absl::DataLossError(
        absl::StrCat(what, ": the object is now ", *total, " bytes (changed since it was listed?); no bytes taken"));
  }
  if (other_version(r, resp)) {
    return absl::DataLossError(absl::StrCat(what, ": the server answered with ETag ", resp.etag,
                                            " where If-Match asked for ", r.if_match,
                                            ": a server or proxy that does not honour If-Match; no bytes taken"));
  }
  if (sink.wrong_range || sink.too_long) {
    return absl::DataLossError(absl::StrCat(what, ": the server answered HTTP ", resp.code, " with Content-Range '",
                                            resp.content_range, "' and Content-Length ", resp.content_length,
                                            sink.too_long ? " (a longer body than asked)" : "",
                                            " to Range bytes=", r.offset, "-", r.offset + r.length - 1,
                                            ": a server or proxy that does not honour ranges; no bytes taken"));
  }
  if (rc != CURLE_OK) {
    const std::string after_code = resp.code ? absl::StrCat(" (after HTTP ", resp.code, ")") : "";
    return absl::UnavailableError(
        absl::StrCat(what, ": ", curl_easy_strerror(rc), *errbuf ? ": " : "", errbuf, after_code, after));
  }
  if (r.ranged && resp.code / 100 == 2 && resp.placed != r.length) {
    return absl::DataLossError(
        absl::StrCat(what, ": the server sent ", resp.placed, " bytes of the ", r.length, " asked", after));
  }
  std::string says = server_says(resp, r.method == Method::kHead);
  if (r.method == Method::kHead && resp.body.empty() && resp.code == 403) {
    absl::StrAppend(&says, " (a HEAD has no body to say why: wrong credentials, or no permission on the object)");
  }
  const std::string msg = absl::StrCat(what, ": ", says, after);
  switch (resp.code) {
    case 404: return absl::NotFoundError(msg);
    case 401:
    case 403: return absl::PermissionDeniedError(msg);
    case 416: return absl::OutOfRangeError(msg);
    case 412:
      return absl::DataLossError(absl::StrCat(what, ": the object changed since it was listed (its ETag is no longer ",
                                              r.if_match, "); open the dataset again", after));
    case 400: return absl::InvalidArgumentError(msg);
    default: return resp.code >= 500 ? absl::UnavailableError(msg) : absl::FailedPreconditionError(msg);
  }
}

}  // namespace

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

Connection::Connection() : h_(curl_easy_init()) {}
Connection::~Connection() {
  if (h_) curl_easy_cleanup(h_);
}

namespace {

// The guarded mutexes, locked in the order guarded by the thread calling
// fork() (prepare) and unlocked by it in the parent and in the child.
struct ForkGuard {
  std::mutex mu;
  std::vector<std::mutex*> held;
};
ForkGuard& fork_guard_list() {
  static ForkGuard* g = new ForkGuard;
  return *g;
}
void before_fork() {
  ForkGuard& g = fork_guard_list();
  g.mu.lock();
  for (std::mutex* m : g.held) m->lock();
}
void after_fork() {
  ForkGuard& g = fork_guard_list();
  for (auto it = g.held.rbegin(); it != g.held.rend(); ++it) (*it)->unlock();
  g.mu.unlock();
}

}  // namespace

void fork_guard(std::mutex* m) {
  static const int registered = ::pthread_atfork(before_fork, after_fork, after_fork);
  (void)registered;
  ForkGuard& g = fork_guard_list();
  std::lock_guard<std::mutex> lock(g.mu);
  g.held.push_back(m);
}

void fork_unguard(std::mutex* m) {
  ForkGuard& g = fork_guard_list();
  std::lock_guard<std::mutex> lock(g.mu);
  g.held.erase(std::remove(g.held.begin(), g.held.end(), m), g.held.end());
}

size_t fork_guarded() {
  ForkGuard& g = fork_guard_list();
  std::lock_guard<std::mutex> lock(g.mu);
  return g.held.size();
}

const std::string& system_ca_file() {
  static const std::string* found = [] {
    auto readable = [](const char* p) { return p != nullptr && *p != '\0' && ::access(p, R_OK) == 0; };
    const curl_version_info_data* v = curl_version_info(CURLVERSION_NOW);
    if (v != nullptr && v->age >= CURLVERSION_SEVENTH && (readable(v->cainfo) || readable(v->capath))) {
      return new std::string();  // libcurl's own is there
    }
    if (const char* f = std::getenv("SSL_CERT_FILE"); readable(f)) return new std::string(f);
    for (const char* p :
         {"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
          "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem"}) {
      if (readable(p)) return new std::string(p);
    }
    return new std::string();
  }();
  return *found;
}

void init_curl() {
  static std::once_flag once;
  std::call_once(once, [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    (void)pacer();  // its mutex guarded from the start
  });
}

Counters& counters() {
  static Counters* c = new Counters;
  return *c;
}

namespace {

// The server refused the request's credentials, as it says of an expired
// session token (400 ExpiredToken, TokenRefreshRequired, InvalidToken; a
// HEAD's has no body), a key it does not know or a secret that does not
// match (403 InvalidAccessKeyId, SignatureDoesNotMatch; a HEAD's 403 has no
// body): credentials rotated under a long job.
bool refused_credentials(const Request& r, const Response& resp) {
  if (resp.code == 400) {
    if (r.method == Method::kHead && resp.body.empty()) return true;
    for (const char* code : {"ExpiredToken", "TokenRefreshRequired", "InvalidToken"}) {
      if (absl::StrContains(resp.body, absl::StrCat("<Code>", code, "</Code>"))) return true;
    }
    return false;
  }
  if (resp.code != 403) return false;
  if (r.method == Method::kHead && resp.body.empty()) return true;
  for (const char* code : {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}) {
    if (absl::StrContains(resp.body, absl::StrCat("<Code>", code, "</Code>"))) return true;
  }
  return false;
}

bool same_credentials(const Config& a, const Config& b) {
  return a.access_key == b.access_key && a.secret_key == b.secret_key && a.session_token == b.session_token;
}

// What reading the credentials again found, once per request (perform).
enum class Reread { kNot, kFailed, kSame, kNew };

// After the server refused `c`'s credentials: reads them again; new ones
// replace them in `c`.
Reread read_credentials_again(const Options& o, Config& c) {
  absl::StatusOr<Config> now = current_config(o, &c);
  if (!now.ok()) return Reread::kFailed;
  if (same_credentials(*now, c)) return Reread::kSame;
  c = *std::move(now);
  counters().credentials_reread.fetch_add(1, std::memory_order_relaxed);
  return Reread::kNew;
}

// Credentials that expire within kRenewBefore (a credential_process's) are
// read again before a request is signed with them; the new ones, when the
// reading gives new ones, replace them in `c`.
void renew_expiring(const Options& o, Config& c) {
  if (!c.expires || *c.expires - kRenewBefore > std::chrono::system_clock::now()) return;
  absl::StatusOr<Config> now = current_config(o);
  if (now.ok() && !same_credentials(*now, c)) c = *std::move(now);
}

// The last try's error `st`, with what the credentials read again and the
// CAs trusted tell of it.
absl::Status explained(const absl::Status& st, CURLcode rc, const Request& r, const Response& resp, const Config& c,
                       Reread reread) {
  std::string why;
  if (reread == Reread::kSame) {
    why = "; the credentials, read again, are the same";
  } else if (reread == Reread::kNew && refused_credentials(r, resp)) {
    why = absl::StrCat("; the credentials were read again (from ", c.where, ") and refused too");
  }
  if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE) {
    const std::string& sys = system_ca_file();
    absl::StrAppend(&why, "; the CAs trusted are ",
                    !c.ca_bundle.empty() ? absl::StrCat(c.ca_bundle, " (", c.ca_where, ")")
                    : sys.empty()        ? std::string("libcurl's own (the system's)")
                                         : absl::StrCat(sys, " (the system's)"),
                    ": AWS_CA_BUNDLE names a PEM file of the CAs to trust (a server with its own CA)");
  }
  return why.empty() ? st : absl::Status(st.code(), absl::StrCat(st.message(), why));
}

}  // namespace

absl::StatusOr<Response> perform(Connection& conn, Config& c, const Options& o, const Request& r,
                                 const std::atomic<bool>* cancel) {
  if (conn.handle() == nullptr) return absl::InternalError("s3: curl_easy_init failed");
  Counters& n = counters();
  thread_local std::minstd_rand jitter(std::random_device{}());
  const uint32_t tries = std::max(1u, o.max_attempts);
  char errbuf[CURL_ERROR_SIZE];
  Reread reread = Reread::kNot;
  uint32_t timeouts = 0;  // tries that timed out: at most kTimeoutTries (a frozen server fails in ~3 stalls)
  for (uint32_t attempt = 1;; ++attempt) {
    renew_expiring(o, c);
    pacer().wait(o.max_requests_per_second, cancel);
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      return absl::CancelledError(absl::StrCat(what_of(r), ": cancelled (the reader is closing)"));
    }
    Response resp;
    Sink sink;
    sink.cancel = cancel;
    const Clock::time_point t0 = Clock::now();
    const CURLcode rc = try_once(conn, c, o, r, resp, sink, errbuf);
    n.requests.fetch_add(1, std::memory_order_relaxed);
    n.request_ns.fetch_add(static_cast<uint64_t>(std::chrono::nanoseconds(Clock::now() - t0).count()),
                           std::memory_order_relaxed);
    const Verdict v = judge(r, rc, resp, sink);
    if (v == Verdict::kDone) {
      if (r.ranged) {
        n.gets.fetch_add(1, std::memory_order_relaxed);
        n.bytes.fetch_add(resp.placed, std::memory_order_relaxed);
      }
      return resp;
    }
    if (v == Verdict::kCancelled) {
      return absl::CancelledError(absl::StrCat(what_of(r), ": cancelled (the reader is closing)"));
    }
    if (v == Verdict::kFail && reread == Reread::kNot && rc == CURLE_OK && refused_credentials(r, resp)) {
      reread = read_credentials_again(o, c);
      if (reread == Reread::kNew) {
        --attempt;  // the new credentials' first try
        continue;
      }
    }
    if (v == Verdict::kFail || attempt >= tries || (rc == CURLE_OPERATION_TIMEDOUT && ++timeouts >= kTimeoutTries)) {
      // Asking whether an object exists is no failure.
      if (r.method != Method::kHead || resp.code != 404) n.failures.fetch_add(1, std::memory_order_relaxed);
      return explained(failure(r, rc, resp, sink, errbuf, attempt), rc, r, resp, c, reread);
    }
    n.retries.fetch_add(1, std::memory_order_relaxed);
    switch (v) {
      case Verdict::kRetryThrottled: n.retry_throttled.fetch_add(1, std::memory_order_relaxed); break;
      case Verdict::kRetryServer: n.retry_server.fetch_add(1, std::memory_order_relaxed); break;
      case Verdict::kRetryNetwork: n.retry_network.fetch_add(1, std::memory_order_relaxed); break;
      default: n.retry_short.fetch_add(1, std::memory_order_relaxed); break;
    }
    // Exponential backoff with jitter: in [cap/2, cap].
    const uint64_t cap = std::min<uint64_t>(o.backoff_max_ms, uint64_t{o.backoff_ms} << std::min(attempt - 1, 20u));
    const auto wait = std::chrono::milliseconds(cap / 2 + (cap > 1 ? jitter() % (cap / 2 + 1) : 0));
    // The server asks the process to slow down, not this one request.
    if (v == Verdict::kRetryThrottled) pacer().pause(wait);
    // In steps, so that a cancel is seen.
    for (const Clock::time_point until = Clock::now() + wait; Clock::now() < until;) {
      if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) break;
      std::this_thread::sleep_until(std::min(until, Clock::now() + std::chrono::milliseconds(20)));
    }
  }
}

std::vector<absl::string_view> xml_blocks(absl::string_view xml, absl::string_view tag) {
  std::vector<absl::string_view> out;
  const std::string open = absl::StrCat("<", tag, ">"), close = absl::StrCat("</", tag, ">");
  size_t at = 0;
  for (;;) {
    const size_t b = xml.find(open, at);
    if (b == absl::string_view::npos) break;
    const size_t e = xml.find(close, b + open.size());
    if (e == absl::string_view::npos) break;
    out.push_back(xml.substr(b + open.size(), e - b - open.size()));
    at = e + close.size();
  }
  return out;
}

std::vector<std::string> xml_values(absl::string_view xml, absl::string_view tag) {
  std::vector<std::string> out;
  for (absl::string_view v : xml_blocks(xml, tag)) out.push_back(xml_unescape(v));
  return out;
}

}  // namespace dlfeed::s3::detail
