// SPDX-License-Identifier: Apache-2.0
// Private to dlfeed::s3: the node-local cache of fetched bytes
// (ObjectCacheOptions), in pieces of 1 MiB of an object's version.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "dlfeed/io/object_store.h"

namespace dlfeed::inline DLFEED_ABI::s3::detail {

/// Pieces of objects on local disk. A piece is bytes [k * kPiece, ...) of
/// one version of an object (URL, ETag and size), kept in a folder of that
/// version as a file of its bytes and their CRC32C, written under another
/// name and renamed: never a partial piece under its name. A piece whose
/// length or CRC does not match is removed and fetched again. Thread-safe;
/// processes may share the folder.
class PieceCache {
 public:
  static constexpr uint64_t kPiece = 1u << 20;

  static absl::StatusOr<std::shared_ptr<PieceCache>> open(const ObjectCacheOptions& o);
  ~PieceCache();
  PieceCache(const PieceCache&) = delete;
  PieceCache& operator=(const PieceCache&) = delete;

  /// Fills `dest` with bytes [offset, offset + dest.size()) of `o` when
  /// every piece they lie in is here and sound.
  bool read(const ObjectInfo& o, uint64_t offset, std::span<std::byte> dest);
  /// Whether `bytes` more fit under the bound (a hint: keep() reserves).
  bool has_room(uint64_t bytes) const;
  /// The room the smallest piece of `o` in [start, end) that is not here
  /// takes (its bytes and CRC), or 0 when every one is.
  uint64_t smallest_missing(const ObjectInfo& o, uint64_t start, uint64_t end);
  /// Keeps the whole pieces of `o` inside `bytes`, which start at `start`
  /// (a multiple of kPiece), as far as they fit.
  void keep(const ObjectInfo& o, uint64_t start, std::span<const std::byte> bytes);

  const std::string& dir() const { return dir_; }
  uint64_t max_bytes() const { return max_; }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  PieceCache(std::string dir, uint64_t max_bytes, uint64_t used);
  // The folder of `o`'s version, made and checked to be that version's (its
  // id file names URL, ETag and size); "" when it cannot be (another
  // version's folder under the same name: never read, never written).
  std::string folder_of(const ObjectInfo& o);
  // Takes `bytes` of the bound for a piece about to be written, or false
  // when they do not fit: one step, so that connections keeping pieces at
  // once never pass the bound together.
  bool reserve(uint64_t bytes);

  const std::string dir_;
  const uint64_t max_;
  std::atomic<uint64_t> used_;
  std::mutex mu_;  // fork_guard()ed: held while a version's folder is made and checked
  absl::flat_hash_map<std::string, std::string> folders_;  // id text -> folder ("" if unusable)
};

}  // namespace dlfeed::s3::detail
