// SPDX-License-Identifier: Apache-2.0
// Private: the persistent dataset index (FormatOptions::index_cache). One
// file per dataset folder and set of format options, holding each data
// file's identity (size, mtime, inode, device) and its source's state. A
// later open reads the state of every file whose identity still matches and
// indexes again only the others. The cache is untrusted input: a bad magic,
// version, checksum or entry drops the entry (or the whole cache) with a
// note, and the file is indexed from its own bytes; never a wrong extent.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dlfeed/format/format.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::detail {

class CacheReader;

/// The folder "auto" keeps caches in, inside the dataset folder (listings skip it).
constexpr const char* kCacheFolder = ".dlfeed";

/// The TFRecord source from its cached state (tfrecord.cc).
absl::StatusOr<std::unique_ptr<SampleSource>> load_tfrecord_source(const std::string& path, uint64_t file_size,
                                                                   const FormatOptions& options, CacheReader& in);

/// Where the cache for `paths` (open_dataset's arguments) lives, or "" when
/// options.index_cache is off. "auto": DIR/.dlfeed/index-HASH when `paths`
/// is one folder that is writable, else under $XDG_CACHE_HOME/dlfeed (or
/// ~/.cache/dlfeed); any other value is the cache file's path (the loader
/// adds .FIELD for each of several fields).
std::string index_cache_path(const std::vector<std::string>& paths, const FormatOptions& options);

/// A folder open_dataset listed, as stat found it before it was read. Its
/// mtime changes when an entry is added, removed or renamed in it; 0: the
/// folder had changed too recently (under kListingSettleNs before the
/// listing) to tell a later change by its mtime, so it never matches.
struct FolderStamp {
  std::string path;
  uint64_t mtime_ns = 0, inode = 0;
  bool operator==(const FolderStamp&) const = default;
};
/// What open_dataset listed: its arguments as given (`key`) and the folders
/// it read. A cache written with a listing holds every listed file, so a
/// reopen whose folders all match takes the cache's list without listing.
struct Listing {
  std::string key;
  std::vector<FolderStamp> folders;
  bool operator==(const Listing&) const = default;
  bool settled() const;  // every folder's stamp can be matched later
};
constexpr int64_t kListingSettleNs = 2'000'000'000;
/// `path`'s stamp (stat), for a listing that starts at `listed_at_ns` (realtime).
FolderStamp stamp_folder(const std::string& path, int64_t listed_at_ns);

/// What a cache read found.
struct CacheHits {
  std::vector<std::optional<SampleIndex>> files;  // per listed file: its index from the cache, or none
  uint64_t hits = 0;
  std::string note;                // why the cache (or an entry) was not used; empty when all was fine
  std::optional<Listing> listing;  // the listing the cache was written with, if any
};

/// The reopen that neither lists nor stats the files: when the cache at
/// `cache_path` was written with a listing of the same `key` whose folders
/// all still match (one stat per folder), the index of the files it lists,
/// each file's identity as the cache recorded it (device left out: the
/// cache may be shared between hosts). The loader's file table checks each
/// file against it at its first open, so a file modified in place since is
/// an error then, never a wrong extent. Anything else (no cache, another
/// listing, a folder changed, an entry failing its checks): nullopt, and
/// open_dataset lists and checks every file.
std::optional<SampleIndex> reopen_from_listing(const std::string& cache_path, const std::string& key,
                                               const FormatOptions& options);

/// Reads the cache at `cache_path` for `files` (missing cache: no hits, no note).
CacheHits read_index_cache(const std::string& cache_path, const std::vector<std::string>& files,
                           const FormatOptions& options);

/// Writes `index` (whose files are `index.files`) to `cache_path`
/// atomically (a temporary file renamed over it). Sources without a cache
/// tag are left out.
/// With `listing`, every file of the index is written (those without a
/// cache tag with an empty one) and the listing with them.
absl::Status write_index_cache(const std::string& cache_path, const SampleIndex& index, const FormatOptions& options,
                               const Listing* listing = nullptr);

/// The bytes a cache file holds for `index`, and the index those bytes
/// give back for `files`. With match_identity false an entry is taken
/// whatever its file's mtime, inode and device (the fuzz target's inputs
/// cannot know them); it is still checked against the file's size.
std::string encode_index_cache(const SampleIndex& index, const FormatOptions& options,
                               const Listing* listing = nullptr);
CacheHits decode_index_cache(const std::string& bytes, const std::string& cache_path,
                             const std::vector<std::string>& files, const FormatOptions& options,
                             bool match_identity = true);
/// The cache file's first bytes: magic, version and the CRC-32C of `body`.
std::string index_cache_header(const std::string& body);

}  // namespace dlfeed::detail
