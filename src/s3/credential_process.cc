// SPDX-License-Identifier: Apache-2.0
#include "s3/credential_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "s3/client.h"

extern char** environ;  // NOLINT: POSIX declares it nowhere else

namespace dlfeed::inline DLFEED_ABI::s3::detail {

namespace {

using SysClock = std::chrono::system_clock;

std::atomic<uint64_t> g_runs{0};

// A JSON value's text, read as far as a credential process's output needs:
// an object of strings, numbers and (skipped) anything else.
class Json {
 public:
  explicit Json(absl::string_view s) : s_(s) {}

  void space() {
    while (i_ < s_.size() && absl::ascii_isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool at_end() {
    space();
    return i_ == s_.size();
  }
  char peek() {
    space();
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  // A string literal (after its opening quote was seen by peek()).
  bool string(std::string& out) {
    if (!eat('"')) return false;
    out.clear();
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (i_ == s_.size()) return false;
      const char e = s_[i_++];
      switch (e) {
        case '"':
        case '\\':
        case '/': out.push_back(e); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
            uint32_t lo = 0;
            if (i_ + 1 >= s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') return false;
            i_ += 2;
            if (!hex4(lo) || lo < 0xDC00 || lo >= 0xE000) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: return false;
      }
    }
    return false;
  }
  // A number's text, or a literal's (true, false, null).
  bool scalar(std::string& out) {
    space();
    const size_t b = i_;
    while (i_ < s_.size() && (absl::ascii_isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' ||
                              s_[i_] == '+' || s_[i_] == '.')) {
      ++i_;
    }
    out = std::string(s_.substr(b, i_ - b));
    return i_ > b;
  }
  // Any value, read past.
  bool skip(int depth = 0) {
    if (depth > 64) return false;
    std::string unused;
    const char c = peek();
    if (c == '"') return string(unused);
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++i_;
      if (eat(close)) return true;
      do {
        if (c == '{' && !(string(unused) && eat(':'))) return false;
        if (!skip(depth + 1)) return false;
      } while (eat(','));
      return eat(close);
    }
    return scalar(unused);
  }

 private:
  bool hex4(uint32_t& v) {
    if (i_ + 4 > s_.size()) return false;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f')
        v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        v |= static_cast<uint32_t>(h - 'A' + 10);
      else
        return false;
    }
    return true;
  }
  absl::string_view s_;
  size_t i_ = 0;
};

absl::Status output_error(const std::string& where, absl::string_view expected) {
  return absl::UnauthenticatedError(absl::StrCat("s3: ", where, ": expected ", expected,
                                                 " in the JSON the credential process printed (its output is "
                                                 "not shown: it holds secrets)"));
}

// Reads the child `pid`'s stdout and stderr until both close, or until it
// has exited and nothing more is there to read (a grandchild, or a copy a
// fork() elsewhere in the process made, may hold the pipes open), or until
// `deadline`. Its exit status goes to *status; false at the deadline (it
// runs still).
bool read_child(pid_t pid, int out_fd, int err_fd, std::string& out, std::string& err, SysClock::time_point deadline,
                int* status) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  int open = 2;
  bool exited = false;
  char buf[4096];
  for (;;) {
    if (!exited) {
      const pid_t w = ::waitpid(pid, status, WNOHANG);
      exited = w == pid || (w < 0 && errno != EINTR);
    }
    if (open == 0 && exited) return true;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SysClock::now()).count();
    if (left <= 0) return false;
    // Exited: what is left in the pipes is there now; else wait for more, or its exit (seen each 20 ms).
    const int n = open == 0 ? 0 : ::poll(fds, 2, exited ? 0 : static_cast<int>(std::min<int64_t>(left, 20)));
    if (n < 0 && errno != EINTR) return false;
    if (n <= 0 && exited) return true;
    for (int k = 0; k < 2 && n > 0; ++k) {
      if (fds[k].fd < 0 || (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t got = ::read(fds[k].fd, buf, sizeof(buf));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        fds[k].fd = -1;
        --open;
        continue;
      }
      std::string& to = k == 0 ? out : err;
      if (to.size() < (1u << 20)) to.append(buf, static_cast<size_t>(got));  // a bound: 1 MiB each
    }
    if (open == 0 && !exited) {  // both closed: only its exit is left to wait for
      const int w = ::waitpid(pid, status, WNOHANG);
      if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      exited = w == pid || (w < 0 && errno != EINTR);
    }
  }
}

// The end of what a process wrote to stderr, for a message.
std::string stderr_tail(const std::string& err) {
  absl::string_view tail = absl::StripAsciiWhitespace(err);
  if (tail.size() > 1000) tail = tail.substr(tail.size() - 1000);
  return tail.empty() ? std::string() : absl::StrCat(": ", tail);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> split_command(absl::string_view command) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      const size_t end = command.find('\'', i + 1);
      if (end == absl::string_view::npos) return absl::InvalidArgumentError("an unterminated ' quote");
      word.append(command.data() + i + 1, end - i - 1);
      i = end;
      in_word = true;
    } else if (c == '"') {
      size_t j = i + 1;
      for (; j < command.size() && command[j] != '"'; ++j) {
        if (command[j] == '\\' && j + 1 < command.size() &&
            (command[j + 1] == '"' || command[j + 1] == '\\' || command[j + 1] == '$' || command[j + 1] == '`')) {
          ++j;
        }
        word.push_back(command[j]);
      }
      if (j == command.size()) return absl::InvalidArgumentError("an unterminated \" quote");
      i = j;
      in_word = true;
    } else if (c == '\\' && i + 1 < command.size()) {
      word.push_back(command[++i]);
      in_word = true;
    } else {
      word.push_back(c);
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  if (words.empty()) return absl::InvalidArgumentError("an empty command");
  return words;
}

absl::StatusOr<ProcessCredentials> parse_process_output(absl::string_view out, const std::string& where) {
  Json j(out);
  if (!j.eat('{')) return output_error(where, "a JSON object");
  std::map<std::string, std::string> fields;
  if (!j.eat('}')) {
    do {
      std::string key, value;
      if (!j.string(key) || !j.eat(':')) return output_error(where, "\"name\": value pairs");
      const char c = j.peek();
      const bool ok = c == '"' ? j.string(value) : (c == '{' || c == '[') ? j.skip() : j.scalar(value);
      if (!ok) return output_error(where, absl::StrCat("a value for \"", key, "\""));
      if (c != '"' && value == "null") continue;  // as absent, as AWS's tools read it
      fields[key] = value;
    } while (j.eat(','));
    if (!j.eat('}')) return output_error(where, "a JSON object");
  }
  if (!j.at_end()) return output_error(where, "nothing after the JSON object");
  if (fields["Version"] != "1") return output_error(where, "\"Version\": 1");
  ProcessCredentials c;
  c.access_key = fields["AccessKeyId"];
  c.secret_key = fields["SecretAccessKey"];
  c.session_token = fields["SessionToken"];
  if (c.access_key.empty()) return output_error(where, "\"AccessKeyId\"");
  if (c.secret_key.empty()) return output_error(where, "\"SecretAccessKey\"");
  const std::string& expiration = fields["Expiration"];
  if (!expiration.empty()) {
    absl::Time t;
    std::string why;
    if (!absl::ParseTime(absl::RFC3339_full, expiration, &t, &why)) {
      return absl::UnauthenticatedError(
          absl::StrCat("s3: ", where, ": expected an RFC 3339 time in \"Expiration\", found '", expiration, "'"));
    }
    c.expires = absl::ToChronoTime(t);
  }
  return c;
}

absl::StatusOr<ProcessCredentials> run_credential_process(const std::string& command, const std::string& where,
                                                          std::chrono::milliseconds timeout) {
  absl::StatusOr<std::vector<std::string>> words = split_command(command);
  if (!words.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("s3: ", where, ": the credential_process '", command, "' has ", words.status().message()));
  }
  std::vector<char*> argv;
  for (std::string& w : *words) argv.push_back(w.data());
  argv.push_back(nullptr);
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("s3: pipe: ", std::strerror(errno)));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return absl::InternalError(absl::StrCat("s3: pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);  // none of the loader's files, sockets or pipes
#endif
  pid_t pid = -1;
  const int spawned = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (spawned != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return absl::UnauthenticatedError(absl::StrCat("s3: ", where, ": the credential_process '", command,
                                                   "' could not start: ", std::strerror(spawned)));
  }
  g_runs.fetch_add(1, std::memory_order_relaxed);
  std::string out, err;
  int status = 0;
  const bool finished = read_child(pid, out_pipe[0], err_pipe[0], out, err, SysClock::now() + timeout, &status);
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  if (!finished) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    return absl::DeadlineExceededError(absl::StrCat("s3: ", where, ": the credential_process '", command,
                                                    "' ran longer than ", timeout.count(), " ms; it was stopped"));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::UnauthenticatedError(absl::StrCat("s3: ", where, ": the credential_process '", command, "' ",
                                                   WIFEXITED(status)
                                                       ? absl::StrCat("exited with ", WEXITSTATUS(status))
                                                       : absl::StrCat("was ended by signal ", WTERMSIG(status)),
                                                   stderr_tail(err)));
  }
  return parse_process_output(out, where);
}

namespace {

struct Kept {
  std::optional<ProcessCredentials> creds;  // the last run's that succeeded
  absl::Status failed;                      // the last run's error, OK when it succeeded
  SysClock::time_point ran{};               // when the last run ended
  uint64_t runs = 0;                        // runs ended
  bool running = false;
};

struct Keeper {
  std::mutex mu;  // fork_guard()ed; never held while a process runs
  std::condition_variable cv;
  std::map<std::string, Kept> kept;  // by command and where
  pid_t pid = ::getpid();
  Keeper() { fork_guard(&mu); }
};

// The process's keeper. A child of fork() gets a new one (the parent's,
// leaked): its runs and waiters are the parent's threads', not here.
Keeper& keeper() {
  static std::atomic<Keeper*> k{new Keeper};
  Keeper* now = k.load();
  if (now->pid != ::getpid()) {
    now = new Keeper;
    k.store(now);
  }
  return *now;
}

// A process that gives credentials expiring within kRenewBefore is run
// again at most this often; so is one that failed.
constexpr auto kRunAgainAfter = std::chrono::seconds(2);

// Whether kept credentials serve: not the refused ones, and not expiring
// within kRenewBefore, unless printed a moment ago.
bool usable(const Kept& e, const std::string* refused_key, const std::string* refused_token) {
  const ProcessCredentials& c = *e.creds;
  if (refused_key != nullptr && *refused_key == c.access_key &&
      (refused_token == nullptr || *refused_token == c.session_token)) {
    return false;
  }
  const SysClock::time_point now = SysClock::now();
  return !c.expires || *c.expires - kRenewBefore > now || now - e.ran < kRunAgainAfter;
}

}  // namespace

absl::StatusOr<ProcessCredentials> process_credentials(const std::string& command, const std::string& where,
                                                       std::chrono::milliseconds timeout,
                                                       const std::string* refused_access_key,
                                                       const std::string* refused_token) {
  Keeper& k = keeper();
  const std::string id = absl::StrCat(command, "\n", where);
  std::unique_lock<std::mutex> lock(k.mu);
  Kept& e = k.kept[id];
  const uint64_t seen = e.runs;
  k.cv.wait(lock, [&] { return !e.running; });
  if (e.runs != seen) {  // a run ended while this caller waited: its result, whatever it is
    if (!e.failed.ok()) return e.failed;
    return *e.creds;
  }
  if (e.creds && e.failed.ok() && usable(e, refused_access_key, refused_token)) return *e.creds;
  if (!e.failed.ok() && SysClock::now() - e.ran < kRunAgainAfter) return e.failed;  // not again at once
  e.running = true;
  lock.unlock();
  absl::StatusOr<ProcessCredentials> got = run_credential_process(command, where, timeout);
  lock.lock();
  e.running = false;
  e.failed = got.status();
  if (got.ok()) e.creds = *got;
  e.ran = SysClock::now();
  ++e.runs;
  k.cv.notify_all();
  return got;
}

uint64_t credential_process_runs() { return g_runs.load(std::memory_order_relaxed); }

}  // namespace dlfeed::s3::detail
