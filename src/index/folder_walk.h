// SPDX-License-Identifier: Apache-2.0
// Private to open_dataset: walking a dataset folder for its data files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "dlfeed/format/format.h"
#include "index/index_cache.h"

namespace dlfeed::inline DLFEED_ABI::detail {

// What reading the given paths gathers besides the files.
struct Gathered {
  bool stamp = false;  // folders only, with a cache: each folder read is stamped into `listing`
  int64_t listed_at_ns = 0;
  std::string made_in;  // the folder make_cache_folder made the cache's folder in
  Listing listing;
  // Folders read whole here, and those of them holding a *.idx file: a
  // TFRecord in a listed folder without one has no FILE.idx sidecar to try.
  absl::flat_hash_set<std::string> listed_folders, idx_folders;
  // Data files reached through a link (to the file, or to a folder above
  // it): a file may then be reached twice, so the files are told apart by
  // device and inode.
  absl::flat_hash_set<std::string> through_links;
};

/// Whether a folder listing takes `path` for `format`: a file whose
/// extension names that format (any known one for kAuto), or, with an
/// explicit format, a file with no extension at all. Others (.idx, logs,
/// hidden files) are not.
bool in_folder_listing(const std::string& path, FileFormat format);

/// Appends the data files in folder `p` and below to `found` (unsorted).
/// Links not followed, and broken links with a data file's name, are named
/// in notes on stderr.
absl::Status walk_folder(const std::string& p, const FormatOptions& options, Gathered& g,
                         std::vector<std::string>& found);

/// `found` (sorted) with each file once, by device and inode, where a walk
/// followed links (g.through_links): the path reached without a link is
/// kept, else the first in order; a note on stderr counts those dropped.
void read_each_file_once(const std::string& p, Gathered& g, std::vector<std::string>& found);

/// Appends the data files an object-store URL names: the object of that
/// name when there is one, else the objects under URL/ as a folder's (all
/// below it, sorted by URL; a DLIO data folder, train/ and valid/, read as
/// its train/ with a note; a DLIO index/ and names starting with '.'
/// skipped). One listing; `g` learns the folders listed and those holding
/// a .idx object (a TFRecord there without one has no FILE.idx to ask for).
absl::Status list_remote(const std::string& url, const FormatOptions& options, Gathered& g,
                         std::vector<std::string>& found);

/// While one lives on a thread, list_remote lists each URL once on that
/// thread: the fields of one Loader::create share the listing of a prefix
/// (a loader made later lists again, seeing what changed).
class ListingMemo {
 public:
  ListingMemo();
  ~ListingMemo();
  ListingMemo(const ListingMemo&) = delete;
  ListingMemo& operator=(const ListingMemo&) = delete;

 private:
  void* previous_;
};

}  // namespace dlfeed::detail
