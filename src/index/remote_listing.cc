// SPDX-License-Identifier: Apache-2.0
// Datasets in an object store: a URL's objects as a folder's files.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dlfeed/error.h"
#include "dlfeed/io/object_store.h"
#include "index/folder_walk.h"
#include "index/index_cache.h"

namespace dlfeed::inline DLFEED_ABI::detail {

namespace {

// Whether `rel` (a key below the listed prefix) is read as a data file, as
// a folder walk reads one: not in a folder named index/ (DLIO's TFRecord
// sidecars) or .dlfeed/ (the index cache), at any depth.
bool listed_as_data(absl::string_view rel) {
  std::vector<absl::string_view> parts = absl::StrSplit(rel, '/');
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i] == "index" || parts[i] == kCacheFolder) return false;
  }
  // Hidden names are no data, as in a folder walk (.ipynb_checkpoints/, ._x.npy).
  for (absl::string_view part : parts) {
    if (absl::StartsWith(part, ".")) return false;
  }
  return !parts.back().empty();
}

std::string parent_of(absl::string_view url) {
  const size_t slash = url.rfind('/');
  return std::string(url.substr(0, slash == absl::string_view::npos ? 0 : slash));
}

// The listings of the innermost ListingMemo on this thread (null: none).
thread_local absl::flat_hash_map<std::string, std::vector<ObjectInfo>>* t_listings = nullptr;

}  // namespace

ListingMemo::ListingMemo() : previous_(t_listings) {
  t_listings = new absl::flat_hash_map<std::string, std::vector<ObjectInfo>>();
}

ListingMemo::~ListingMemo() {
  delete t_listings;
  t_listings = static_cast<absl::flat_hash_map<std::string, std::vector<ObjectInfo>>*>(previous_);
}

absl::Status list_remote(const std::string& url, const FormatOptions& options, Gathered& g,
                         std::vector<std::string>& found) {
  DLFEED_ASSIGN_OR_RETURN(std::shared_ptr<ObjectStore> store, object_store_for(url));
  const std::string given(absl::StripSuffix(url, "/"));
  // An object of that name is a file (the URL named it, whatever it holds).
  absl::Status head = absl::OkStatus();
  if (!absl::EndsWith(url, "/")) {
    absl::StatusOr<ObjectInfo> one = store->head_now(given);  // this listing's version, as list() gives
    if (one.ok()) {
      found.push_back(given);
      return absl::OkStatus();
    }
    // A HEAD refused has no body to say why: the listing's answer will.
    if (!absl::IsNotFound(one.status()) && !absl::IsPermissionDenied(one.status())) return one.status();
    head = one.status();
  }
  std::vector<ObjectInfo> objects;
  if (t_listings != nullptr && t_listings->contains(given)) {
    objects = t_listings->at(given);  // another field of the same loader listed it
  } else {
    DLFEED_ASSIGN_OR_RETURN(objects, store->list(given + "/"));
    if (t_listings != nullptr) (*t_listings)[given] = objects;
  }
  if (objects.empty()) {
    if (absl::IsPermissionDenied(head)) return head;  // listed nothing, but the object was refused
    return absl::NotFoundError(absl::StrCat(given, ": no object of that name and none under ", given, "/"));
  }
  std::string prefix = given + "/";
  // A DLIO data folder (train/ and valid/ below it) is read as its train/.
  auto holds = [&](absl::string_view sub) {
    const std::string p = prefix + std::string(sub);
    return std::any_of(objects.begin(), objects.end(), [&](const ObjectInfo& o) { return absl::StartsWith(o.url, p); });
  };
  if (holds("train/") && holds("valid/")) {
    std::fprintf(stderr,
                 "dlfeed: note: %s holds train/ and valid/ (a DLIO data folder): reading %strain, the training "
                 "split; name %svalid to read the evaluation split\n",
                 given.c_str(), prefix.c_str(), prefix.c_str());
    prefix += "train/";
  }
  const size_t before = found.size();
  for (const ObjectInfo& o : objects) {
    if (!absl::StartsWith(o.url, prefix)) continue;
    const absl::string_view rel = absl::string_view(o.url).substr(prefix.size());
    if (!listed_as_data(rel)) continue;
    const std::string parent = parent_of(o.url);
    g.listed_folders.insert(parent);
    if (absl::EndsWith(o.url, ".idx")) g.idx_folders.insert(parent);
    if (in_folder_listing(o.url, options.format)) found.push_back(o.url);
  }
  std::sort(found.begin() + static_cast<std::ptrdiff_t>(before), found.end());
  if (found.size() == before) {
    std::string some;
    for (size_t i = 0; i < objects.size() && i < 8; ++i) absl::StrAppend(&some, i ? ", " : "", objects[i].url);
    return absl::NotFoundError(absl::StrCat(given, ": no data file among its ", objects.size(), " objects (", some,
                                            objects.size() > 8 ? ", ..." : "", ")"));
  }
  return absl::OkStatus();
}

}  // namespace dlfeed::detail
