// SPDX-License-Identifier: Apache-2.0
// Private to dlfeed::s3: the node-local cache of fetched bytes
// (ObjectCacheOptions), in pieces of 1 MiB of an object's version.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
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
  /// every piece they lie in is here and sound. `at`: the step of the
  /// loader's order the read is for (ReadRequest::use_at).
  bool read(const ObjectInfo& o, uint64_t offset, std::span<std::byte> dest, uint64_t at = ObjectUses::kNever);
  /// Whether a piece of `o` in [start, end) that is not here would be kept
  /// if fetched for step `at`: it fits under the bound, or it is used
  /// before a piece kept (set_uses).
  bool wants(const ObjectInfo& o, uint64_t start, uint64_t end, uint64_t at);
  /// Keeps the whole pieces of `o` inside `bytes`, which start at `start`
  /// (a multiple of kPiece), as far as they fit: once full, each in place
  /// of the piece kept that is used last, when it is used before it.
  void keep(const ObjectInfo& o, uint64_t start, std::span<const std::byte> bytes, uint64_t at = ObjectUses::kNever);
  /// From now on, pieces are let go by their next use in `uses` (held
  /// weakly; null or expired: none is let go).
  void set_uses(const std::shared_ptr<const ObjectUses>& uses);

  /// Loader backends reading through it now: a loader made meanwhile with
  /// the same folder and bound shares it (one count under the bound).
  void add_user(int n) { users_.fetch_add(n, std::memory_order_relaxed); }
  int users() const { return users_.load(std::memory_order_relaxed); }

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
  // Whether `bytes` more fit under the bound (a hint: keep() reserves).
  bool has_room(uint64_t bytes) const;
  // The pieces known here (kept, read, or found at open): by folder and
  // number, their room and next use; those of objects the uses read are in
  // `by_next_`, to be let go latest first. Under evict_mu_.
  struct Known {
    uint32_t folder;
    uint64_t bytes;
    uint64_t next;  // its next use when ranked
    bool ranked;    // in by_next_: counted here, and used by the uses
    bool counted;   // in used_ (found at open, or kept here)
    uint64_t last;  // the latest step it was read or kept for (ObjectUses::kNever: none)
    bool mine;      // kept by this process (not found in the folder)
  };
  static uint64_t key_of(uint32_t folder, uint64_t k) { return (uint64_t{folder} << 32) | k; }
  uint32_t folder_number(const std::string& folder, const std::string& url);
  // Knows piece `k` of `folder` (`bytes` of room, `counted` in used_) and
  // ranks it by its next use after step `at` (and any later step it was
  // used for: reads complete out of order). Only with a bound.
  void note(uint32_t folder, uint64_t k, uint64_t bytes, bool counted, uint64_t at, const ObjectUses* uses);
  // Ranks `p` (piece `key`) by its next use in `uses` from step `from`.
  void rank(uint64_t key, Known& p, const ObjectUses* uses);
  // Forgets piece `k` of `o` in `folder`, gone from the folder (damaged).
  void forget(const std::string& folder, const ObjectInfo& o, uint64_t k);
  // Lets go of the piece used last when it is used after `next`: true when
  // one was let go.
  bool let_go_one(uint64_t next);
  // keep() of piece `k` of folder number `folder` (its `bytes`, to `path`),
  // by one connection at a time.
  void keep_one(const ObjectInfo& o, uint32_t folder, uint64_t k, const std::string& path,
                std::span<const std::byte> bytes, uint64_t at, const ObjectUses* u);
  // Forgets every piece of `folder` (of `url`, `size` bytes), their room
  // given back.
  void forget_folder(const std::string& folder, const std::string& url, uint64_t size);
  // After a piece (`piece`, its path) of `o` could not be written: when its
  // folder is gone (another process removed it), `o`'s folder is made again
  // at its next use.
  void folder_gone(const ObjectInfo& o, const std::string& piece);
  // Forgets piece `key` (its room given back when counted). Under evict_mu_.
  void drop_known(uint64_t key);
  std::shared_ptr<const ObjectUses> uses() const;

  const std::string dir_;
  const uint64_t max_;
  std::atomic<uint64_t> used_;
  std::atomic<int> users_{0};
  std::mutex mu_;  // fork_guard()ed: held while a version's folder is made and checked
  absl::flat_hash_map<std::string, std::string> folders_;  // id text -> folder ("" if unusable)
  // The versions' folders found at open, by URL: all but the one a read
  // uses are removed then (the object was rewritten). Under mu_.
  struct Version {
    std::string folder;
    uint64_t size;
  };
  absl::flat_hash_map<std::string, std::vector<Version>> versions_;

  mutable std::mutex evict_mu_;  // fork_guard()ed
  std::weak_ptr<const ObjectUses> uses_;
  std::vector<std::pair<std::string, std::string>> folder_list_;  // number -> (folder, URL)
  absl::flat_hash_map<std::string, uint32_t> folder_numbers_;
  absl::flat_hash_map<uint64_t, Known> known_;
  std::set<std::pair<uint64_t, uint64_t>> by_next_;  // (next use, key)
  absl::flat_hash_set<uint64_t> keeping_;            // pieces a connection is keeping now
};

}  // namespace dlfeed::s3::detail
