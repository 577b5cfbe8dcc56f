// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/io/object_store.h"

#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace dlfeed::inline DLFEED_ABI {

namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<ObjectStore>, std::less<>> stores;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: stores may be used by threads at exit
  return *r;
}

// The scheme of "scheme://rest", or "" when `path` is no URL.
absl::string_view scheme_of(absl::string_view path) {
  const size_t colon = path.find("://");
  if (colon == 0 || colon == absl::string_view::npos) return {};
  const absl::string_view s = path.substr(0, colon);
  if (!absl::ascii_isalpha(static_cast<unsigned char>(s[0]))) return {};
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return {};
  }
  return s;
}
}  // namespace

void register_object_store(std::shared_ptr<ObjectStore> store) {
  if (!store) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.stores[store->scheme()] = std::move(store);
}

bool is_object_url(absl::string_view path) { return !scheme_of(path).empty(); }

absl::StatusOr<std::shared_ptr<ObjectStore>> object_store_for(absl::string_view url) {
  const absl::string_view scheme = scheme_of(url);
  if (scheme.empty()) return absl::InvalidArgumentError(absl::StrCat(url, ": not a URL (scheme://...)"));
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.stores.find(absl::AsciiStrToLower(scheme));
  if (it == r.stores.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(url, ": no object store reads ", scheme,
                     ":// URLs in this process (dlfeed's s3 component: built when libcurl is found, and "
                     "installed by dlfeed::s3::install(), which the dlfeed command and the Python package call)"));
  }
  return it->second;
}

}  // namespace dlfeed
