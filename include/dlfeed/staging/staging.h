// SPDX-License-Identifier: Apache-2.0
// Node-local staging: a rank copies the files it owns to fast local storage
// (a local disk, /dev/shm) on a background thread while its first epoch
// runs, within a byte limit; later epochs read the copies
// (LoaderOptions::stage, docs/distributed.md).
//
//   dlfeed::staging::StageOptions so;
//   so.dir = "/dev/shm/job42";
//   so.limit_bytes = 8ull << 30;
//   auto st = dlfeed::staging::Stager::create(so, {{"/lustre/d/f0.npz", 1 << 30}}).value();
//   st->start();                       // copies on its own thread
//   ...
//   std::string p = st->staged_path(0);  // non-empty once f0's copy is complete
//
// Every copy is written under a temporary name in the folder and renamed into
// place when complete (after an fsync), so a crash mid-copy never leaves a
// partial file under the name readers look for. Staged names carry a hash of
// the source path and its size, so ranks on one node that share the folder
// find each other's copies (find_copy), and a later run reuses them.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "dlfeed/detail/export.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI {

struct FileLayout;
class OrderCursor;

namespace staging {

/// Where a rank stages its files, and how much.
struct DLFEED_EXPORT StageOptions {
  /// Folder on node-local storage (created if missing). Empty: no staging.
  std::string dir;
  /// Most bytes of copies this rank keeps in the folder; a file that does not
  /// fit is skipped (read from the source) and counted in StageStats.
  uint64_t limit_bytes = std::numeric_limits<uint64_t>::max();
  /// fsync each copy before renaming it into place (durable after a machine
  /// crash too; a process crash is covered by the rename alone).
  bool sync = true;
};

/// What happened to one file.
enum class FileStatus : uint8_t {
  kPending,       // not yet looked at
  kStaged,        // copied by this stager
  kReused,        // a complete copy was already there (earlier run, another rank)
  kSkippedLimit,  // would exceed limit_bytes
  kSkippedSpace,  // the folder's file system has no room for it
  kFailed,        // read, write or rename failed (StageStats::first_error)
  kCancelled,     // the stager stopped first
};
DLFEED_EXPORT const char* status_name(FileStatus s);

/// Totals of a Stager (a snapshot).
struct DLFEED_EXPORT StageStats {
  uint64_t files = 0;          // given to the stager
  uint64_t staged = 0;         // copied
  uint64_t reused = 0;         // found complete in the folder
  uint64_t skipped_limit = 0;  // over limit_bytes
  uint64_t skipped_space = 0;  // no room in the folder
  uint64_t failed = 0;
  uint64_t bytes_copied = 0;   // written by this stager
  uint64_t bytes_staged = 0;   // of the staged and reused files
  uint64_t bytes_skipped = 0;  // of the skipped and failed files
  bool done = false;           // every file has its outcome
  std::string first_error;     // the first failure, naming the file
};

/// One file to stage: its path, its size in bytes, and its identity as the
/// loader indexed it (size, times, inode, device; all 0: not known).
struct DLFEED_EXPORT Source {
  std::string path;
  uint64_t size = 0;
  FileIdentity identity;
};

/// The name `source` gets in a staging folder: a hash of its path and its
/// identity, its size, then its base name
/// ("3f09c2a1b4d5e6f7-1048576-img_0_of_8.npz"). A file rewritten since (a
/// new modification or change time, another inode) has another name, so a
/// copy of its old bytes is never taken for it.
DLFEED_EXPORT std::string staged_name(const Source& source);

/// The dataset files a rank owns for staging. Under a partitioned order
/// (local_shuffle) the files holding the samples of its part; otherwise the
/// files f with f % world_size == rank (round-robin, the split local_shuffle
/// uses), so ranks of a node that share a folder stage disjoint files.
DLFEED_EXPORT std::vector<uint64_t> owned_files(const FileLayout& layout, const OrderCursor& cursor);

/// OK unless the staging folder `dir` is one of the data folders in `paths`
/// or inside one: its copies would be read as data files by the next
/// loader over that folder (every sample twice, then three times...).
DLFEED_EXPORT absl::Status stage_dir_outside_data(const std::string& dir, const std::vector<std::string>& paths);

/// Copies files into a staging folder on its own thread, one at a time.
class DLFEED_EXPORT Stager {
 public:
  /// Called on the copying thread: on_bytes after each chunk written;
  /// on_file_begin / on_file_end around each file's copy.
  struct Observer {
    std::function<void(uint64_t bytes)> on_bytes;
    std::function<void(size_t index)> on_file_begin;
    std::function<void(size_t index, FileStatus status)> on_file_end;
  };

  /// Creates the folder if needed and checks it is writable; nothing is
  /// copied before start().
  static absl::StatusOr<std::unique_ptr<Stager>> create(StageOptions options, std::vector<Source> sources,
                                                        Observer observer = {});
  ~Stager();  // cancels, removes a partial temporary, joins
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  /// Starts the copying thread (later calls do nothing).
  void start();
  /// Blocks until every file has its outcome (start() first).
  void wait();
  /// Stops after the current chunk; files not done become kCancelled.
  void cancel();

  size_t size() const { return sources_.size(); }
  const Source& source(size_t i) const { return sources_[i]; }
  FileStatus status(size_t i) const;
  /// The path of source i's complete copy (kStaged or kReused), else "".
  std::string staged_path(size_t i) const;
  StageStats stats() const;
  const StageOptions& options() const { return options_; }

  /// The path of a complete copy of `source` in `dir` made by anyone (its
  /// staged_name with the source's size), else "".
  static std::string find_copy(const std::string& dir, const Source& source);
  /// Whether files in `dir` can be opened with O_DIRECT (tmpfs cannot).
  static bool supports_direct(const std::string& dir);

 private:
  struct Impl;
  Stager(StageOptions options, std::vector<Source> sources, Observer observer);
  void run();
  FileStatus copy_one(size_t i, uint64_t& used);

  StageOptions options_;
  std::vector<Source> sources_;
  Observer observer_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace staging
}  // namespace dlfeed
