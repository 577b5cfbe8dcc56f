// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/io/object_store.h"

#include <algorithm>
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

ObjectUses::ObjectUses(std::vector<std::string> urls, uint64_t epoch, uint64_t batches)
    : epoch_(epoch), batches_(batches) {
  for (size_t i = 0; i < urls.size(); ++i) index_.emplace(std::move(urls[i]), static_cast<uint32_t>(i));
}

void ObjectUses::add(uint32_t object, uint64_t offset, uint64_t length, uint64_t batch) {
  if (length == 0) return;
  const uint32_t b = static_cast<uint32_t>(step(0, batch));
  for (uint64_t k = offset / kObjectCachePiece; k <= (offset + length - 1) / kObjectCachePiece; ++k) {
    const uint64_t key = (uint64_t{object} << 32) | (k & 0xffffffffu);
    // A batch's samples of one piece, one after another: one use.
    if (!uses_.empty() && uses_.back().first == key && uses_.back().second == b) continue;
    uses_.emplace_back(key, b);
  }
}

void ObjectUses::finish() {
  std::sort(uses_.begin(), uses_.end());
  uses_.erase(std::unique(uses_.begin(), uses_.end()), uses_.end());
  uses_.shrink_to_fit();
}

uint64_t ObjectUses::next_use(absl::string_view url, uint64_t piece, uint64_t from) const {
  const auto it = index_.find(url);
  if (it == index_.end() || piece > 0xffffffffu) return kNever;
  const uint64_t key = (uint64_t{it->second} << 32) | piece;
  // Steps of another epoch: every use of this one is after an earlier
  // epoch's step, and none after a later one's (or kNever).
  const uint64_t epoch = from >> 32;
  if (epoch > epoch_) return kNever;
  const uint64_t batch = epoch < epoch_ ? 0 : from & 0xffffffffu;
  const auto first = std::lower_bound(uses_.begin(), uses_.end(), std::make_pair(key, uint32_t{0}));
  if (first == uses_.end() || first->first != key) return kNever;
  const auto at = std::lower_bound(first, uses_.end(), std::make_pair(key, static_cast<uint32_t>(batch)));
  if (at != uses_.end() && at->first == key) return step(epoch_, at->second);
  return step(epoch_, first->second + std::max<uint64_t>(batches_, uint64_t{first->second} + 1));
}

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
