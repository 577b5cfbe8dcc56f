// SPDX-License-Identifier: Apache-2.0
#include "format/paths.h"

#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dlfeed::inline DLFEED_ABI::detail {

std::string real_path(const std::string& p) {
  std::string out;
  if (char* r = ::realpath(p.c_str(), nullptr)) {
    out = r;
    std::free(r);
  }
  return out;
}

bool path_within(absl::string_view inner, absl::string_view outer) {
  if (outer == "/") return absl::StartsWith(inner, "/");
  return absl::StartsWith(inner, outer) && (inner.size() == outer.size() || inner[outer.size()] == '/');
}

namespace {
// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_path(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() &&
        std::all_of(s.begin() + i + 1, s.begin() + i + 4, [](char c) { return c >= '0' && c <= '7'; })) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

// The last folder a thread asked about, known by its spelling and by the
// directory it reached (a stat): ".", a relative path or a link then
// resolves again after a chdir or a new link target.
struct LastFolder {
  std::string asked;
  dev_t dev = 0;
  ino_t ino = 0;
  bool have = false;
  std::string answer;
  bool same(const std::string& a, const struct stat& st) const {
    return have && asked == a && dev == st.st_dev && ino == st.st_ino;
  }
  void set(const std::string& a, const struct stat& st, std::string ans) {
    asked = a;
    dev = st.st_dev;
    ino = st.st_ino;
    have = true;
    answer = std::move(ans);
  }
};

std::string real_folder(const std::string& folder) {
  thread_local LastFolder last;
  std::string asked = folder.empty() ? std::string(".") : folder;
  struct stat st {};
  if (::stat(asked.c_str(), &st) != 0) return asked;
  if (last.same(asked, st)) return last.answer;
  std::string out = real_path(asked);
  if (out.empty()) out = asked;
  last.set(asked, st, out);
  return out;
}

std::string source_folder(const std::string& folder) {
  thread_local LastFolder last;
  std::string real = real_folder(folder);
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) return real;
  if (last.same(real, st)) return last.answer;
  std::string out = real;
  // The mount holding `real`: of the mounts of its device, the one with the
  // longest mount point containing it (the last listed of equals: a later
  // mount over a path hides an earlier one).
  if (std::FILE* f = std::fopen("/proc/self/mountinfo", "re")) {
    const std::string dev = absl::StrCat(major(st.st_dev), ":", minor(st.st_dev));
    std::string root, point;
    char* line = nullptr;
    size_t cap = 0;
    while (::getline(&line, &cap, f) > 0) {
      // id parent major:minor root mount-point options ...
      std::vector<absl::string_view> w = absl::StrSplit(absl::StripTrailingAsciiWhitespace(line), ' ');
      if (w.size() < 5 || w[2] != dev) continue;
      std::string mp = unescape_mount_path(w[4]);
      if (!path_within(real, mp) || (!point.empty() && mp.size() < point.size())) continue;
      point = std::move(mp);
      root = unescape_mount_path(w[3]);
    }
    std::free(line);
    std::fclose(f);
    if (!point.empty() && root != "/" && absl::StartsWith(root, "/")) {
      const std::string rest = point == "/" ? real.substr(1) : real.substr(std::min(real.size(), point.size() + 1));
      out = rest.empty() ? root : absl::StrCat(root, "/", rest);
    }
  }
  last.set(real, st, out);
  return out;
}

}  // namespace dlfeed::detail
