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

/// The TFRecord source from its cached state (tfrecord.cc).
absl::StatusOr<std::unique_ptr<SampleSource>> load_tfrecord_source(const std::string& path, uint64_t file_size,
                                                                   const FormatOptions& options, CacheReader& in);

/// Where the cache for `paths` (open_dataset's arguments) lives, or "" when
/// options.index_cache is off. "auto": DIR/.dlfeed-index-HASH when `paths`
/// is one folder that is writable, else under $XDG_CACHE_HOME/dlfeed (or
/// ~/.cache/dlfeed); any other value is the cache file's path.
std::string index_cache_path(const std::vector<std::string>& paths, const FormatOptions& options);

/// What a cache read found.
struct CacheHits {
  std::vector<std::optional<SampleIndex>> files;  // per listed file: its index from the cache, or none
  uint64_t hits = 0;
  std::string note;  // why the cache (or an entry) was not used; empty when all was fine
};

/// Reads the cache at `cache_path` for `files` (missing cache: no hits, no note).
CacheHits read_index_cache(const std::string& cache_path, const std::vector<std::string>& files,
                           const FormatOptions& options);

/// Writes `index` (whose files are `index.files`) to `cache_path`
/// atomically (a temporary file renamed over it). Sources without a cache
/// tag are left out.
absl::Status write_index_cache(const std::string& cache_path, const SampleIndex& index, const FormatOptions& options);

/// The bytes a cache file holds for `index`, and the index those bytes
/// give back for `files`. With match_identity false an entry is taken
/// whatever its file's mtime, inode and device (the fuzz target's inputs
/// cannot know them); it is still checked against the file's size.
std::string encode_index_cache(const SampleIndex& index, const FormatOptions& options);
CacheHits decode_index_cache(const std::string& bytes, const std::string& cache_path,
                             const std::vector<std::string>& files, const FormatOptions& options,
                             bool match_identity = true);
/// The cache file's first bytes: magic, version and the CRC-32C of `body`.
std::string index_cache_header(const std::string& body);

}  // namespace dlfeed::detail
