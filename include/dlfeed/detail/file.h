// SPDX-License-Identifier: Apache-2.0
// A read-only file with exact positional reads whose errors name the file
// and offset.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "dlfeed/detail/export.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI {
struct ObjectInfo;  // dlfeed/io/object_store.h
}  // namespace dlfeed::inline DLFEED_ABI

namespace dlfeed::inline DLFEED_ABI::detail {

/// An open read-only file descriptor (RAII).
/// Files File::open has opened in this process: what indexing costs in
/// opens (the MPI test checks one rank indexes for the job).
DLFEED_EXPORT uint64_t file_opens();
/// Paths stat_path() has stat'ed in this process: the per-file metadata
/// operations outside indexing (the file table's, the index cache's
/// identity checks, the resident size sum). The MPI test checks that ranks
/// given the index do none.
DLFEED_EXPORT uint64_t file_stats();
/// ::stat, counted in file_stats().
int stat_path(const char* path, struct stat* st);
/// A stat's mtime in ns, and the identity it gives a file.
uint64_t mtime_ns_of(const struct stat& st);
FileIdentity identity_of(const struct stat& st);
/// Whether `now` (a stat's) is the file `known` names: the same size,
/// modification time and inode, and the same device and change time where
/// `known` has them (0: recorded without it, on another host).
bool same_file_as_known(const FileIdentity& known, const FileIdentity& now);
/// What differs between `known` and `now` by same_file_as_known's rules,
/// in words ("size 100 -> 104 bytes; a new modification time"); empty when
/// it is the same file.
std::string file_changes(const FileIdentity& known, const FileIdentity& now);
/// The identity of an object of a store (a URL): its size, and in place of
/// the inode a 64-bit hash of its ETag (never 0; 0 when the store gives no
/// ETag, and then nothing may be cached by it), so that a new version of it,
/// whatever its size, is another identity. Asks the store (head(): what
/// a listing of it remembered, else a HEAD request).
absl::StatusOr<FileIdentity> object_identity(const std::string& url);
/// The same identity from what the store said of the object.
DLFEED_EXPORT FileIdentity object_identity_of(const ObjectInfo& info);
/// OK when `now` (what the store says of object `url`) is the version that
/// was indexed (`indexed`: its size, and its ETag's hash when it had one);
/// else a DataLoss error naming the object: a new version is never read
/// with the old version's index.
DLFEED_EXPORT absl::Status check_object_version(const std::string& url, const FileIdentity& indexed,
                                                const ObjectInfo& now);
/// The same with the identity of the object as opened now (File::identity).
DLFEED_EXPORT absl::Status check_object_version(const std::string& url, const FileIdentity& indexed,
                                                const FileIdentity& now);

/// A file, or an object of a store (a URL: dlfeed/io/object_store.h) read
/// through ranged reads, a block at a time.
class DLFEED_EXPORT File {
 public:
  static absl::StatusOr<File> open(const std::string& path);
  File() = default;
  File(File&& o) noexcept;
  File& operator=(File&& o) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  /// -1 for an object of a store.
  int fd() const { return fd_; }
  bool remote() const { return remote_ != nullptr; }
  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  /// What fstat said at open: the identity the file's index is built
  /// against (SampleIndex::identities), so nothing stats it again.
  const FileIdentity& identity() const { return identity_; }

  /// Reads exactly out.size() bytes at `offset`; a short file is an error
  /// naming `what` ("NPY header", "zip local header", ...).
  absl::Status read_exact(uint64_t offset, std::span<std::byte> out, absl::string_view what) const;
  /// Reads up to out.size() bytes at `offset`; returns the bytes read
  /// (fewer only at the end).
  absl::StatusOr<size_t> read_some(uint64_t offset, std::span<std::byte> out) const;

 private:
  struct Remote;
  static absl::StatusOr<File> open_remote(const std::string& url);
  std::shared_ptr<Remote> remote_;
  int fd_ = -1;
  uint64_t size_ = 0;
  FileIdentity identity_;
  std::string path_;
};

/// The object at `url` opened (File::open), as the version indexed when
/// `indexed` is known: else check_object_version's error naming it.
DLFEED_EXPORT absl::StatusOr<File> open_object_version(const std::string& url,
                                                       const std::optional<FileIdentity>& indexed);

/// pread until `out` is full; retries EINTR and short reads. Returns bytes
/// read (fewer only at end of file).
DLFEED_EXPORT absl::StatusOr<size_t> pread_full(int fd, std::span<std::byte> out, uint64_t offset,
                                                const std::string& path);

}  // namespace dlfeed::detail
