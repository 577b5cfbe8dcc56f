// SPDX-License-Identifier: Apache-2.0
// A bounded cache of open file descriptors for the I/O backends.
//
// Paths are registered once and get a dense id (uint32_t, what
// ReadRequest::file names). Files are opened lazily on first use and closed
// least-recently-used when more than max_open() are open, so a dataset with
// far more files than RLIMIT_NOFILE can be read. A read holds a Pin on the
// file while it is in flight; a pinned fd is never closed.
//
//   auto table = std::make_shared<dlfeed::FileTable>();
//   uint32_t f = table->add("/data/shard-00017.tfrecord");
//   auto pin = table->pin(f);          // opens if needed
//   ::pread(pin->fd(), ...);           // fd stays open while `pin` lives
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "dlfeed/detail/export.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI {

struct DLFEED_EXPORT FileTableOptions {
  /// Most descriptors kept open at once; 0 picks min(RLIMIT_NOFILE / 2, 1024).
  size_t max_open = 0;
  /// Open files with O_DIRECT (for IoOptions::direct backends).
  bool direct = false;
};

/// Counters of a FileTable (a snapshot).
struct DLFEED_EXPORT FileTableStats {
  uint64_t opens = 0;      // successful open() calls
  uint64_t evictions = 0;  // descriptors closed to stay under the cap
  uint64_t open_now = 0;   // descriptors open right now
  uint64_t peak_open = 0;  // most descriptors open at once
};

class DLFEED_EXPORT FileTable {
 public:
  /// Keeps file `id` open while it lives. Move-only; an empty Pin has fd() -1.
  class Pin {
   public:
    Pin() = default;
    Pin(Pin&& o) noexcept;
    Pin& operator=(Pin&& o) noexcept;
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;
    ~Pin() { reset(); }

    int fd() const { return fd_; }
    uint32_t id() const { return id_; }
    explicit operator bool() const { return fd_ >= 0; }
    /// Unpins now (the fd may be closed by the table afterwards).
    void reset() noexcept;

   private:
    friend class FileTable;
    Pin(FileTable* table, uint32_t id, int fd) : table_(table), id_(id), fd_(fd) {}
    FileTable* table_ = nullptr;
    uint32_t id_ = 0;
    int fd_ = -1;
  };

  explicit FileTable(FileTableOptions options = {});
  ~FileTable();  // closes every descriptor; all Pins must be gone by then
  FileTable(const FileTable&) = delete;
  FileTable& operator=(const FileTable&) = delete;

  /// Registers `path` (not opened yet) and returns its id. The same path
  /// registered twice gets the same id.
  uint32_t add(absl::string_view path);
  /// The same with the file's identity already known (SampleIndex::identities:
  /// the index cache's check, or the index an MPI job's root shared): no
  /// stat now; the first open checks the file against it (the device only
  /// when it is not 0). A path already registered keeps its identity.
  uint32_t add(absl::string_view path, const FileIdentity& identity);
  /// Room for `n` paths registered in all (no rehashing while a loader
  /// registers 10^6 files).
  void reserve(size_t n);
  /// Grows the process's descriptor table now to hold the descriptors this
  /// table may keep open (min(size(), max_open()) beyond those open now, and
  /// a few more). The kernel grows it by doubling as descriptors are opened
  /// (64, 128, ... entries), and in a process with more than one thread each
  /// growth waits for an RCU grace period (14-19 ms each on the measured
  /// VM): up to four in the first epoch of a loader over hundreds of files.
  /// Made here, it is one growth (one grace period if the process already
  /// has threads, as Python with numpy's does; none if not). Best effort:
  /// the soft RLIMIT_NOFILE bounds it, and a failed call leaves the table.
  void reserve_descriptors() const;
  /// The size of `id` as registered, when known (no system call).
  std::optional<uint64_t> known_size(uint32_t id) const;
  /// The identity of `id` as registered or found at its first open, when
  /// known (no system call). For an object of a store: its size and its
  /// ETag's hash (detail::object_identity_of), as it was indexed.
  std::optional<FileIdentity> identity(uint32_t id) const;
  /// Number of registered paths; ids are [0, size()).
  size_t size() const;
  /// The path of `id` ("<invalid file id N>" for an unknown id).
  std::string path(uint32_t id) const;
  /// From now on `id` opens `path` instead (a copy of the same bytes, e.g. a
  /// staged copy on node-local storage). An open descriptor of the old path is
  /// closed at once, or when the last pin holding it lets go; new pins of `id`
  /// open the new path at once, even while the old one is held (an I/O
  /// engine's registered file may hold it for long). add() of the old path
  /// still returns `id`.
  /// `direct` overrides the table's O_DIRECT for this file (false for a copy
  /// on tmpfs, which refuses O_DIRECT; the aligned reads work either way).
  absl::Status redirect(uint32_t id, absl::string_view path, std::optional<bool> direct = std::nullopt);
  /// How many redirect() calls so far: a holder of descriptors beyond its
  /// pins' lifetime (the io_uring backend's registered files) compares it to
  /// know when to let go of them and pin again.
  uint64_t redirections() const { return redirections_.load(std::memory_order_acquire); }

  /// Opens `id` if needed (evicting the least recently used unpinned fd when
  /// max_open() are open) and pins it. When every open fd is pinned the cap
  /// is exceeded for as long as the pins live (it never blocks). Errors:
  /// InvalidArgument for an unknown id, the open() failure naming the path.
  absl::StatusOr<Pin> pin(uint32_t id);
  /// Like pin(), but returns an empty Pin instead of going over the cap: for
  /// callers (the io_uring backend) that can wait for one of their own pins
  /// to be released.
  absl::StatusOr<Pin> try_pin(uint32_t id);

  /// Checks every descriptor open now against its file's identity (one
  /// fstat each): a file rewritten in place since (same inode, other size
  /// or modification time) is an error naming it. A closed file is checked
  /// when it is opened again; the loader calls this at each epoch's start.
  ///
  /// A file whose change time (st_ctime) alone differs kept its inode, size
  /// and mtime: its metadata changed (chmod, a link added or removed) or its
  /// bytes were rewritten with the mtime set back (rsync -t, tar -x,
  /// os.utime). `still_indexed(id)` tells which, by indexing the file again:
  /// OK, and the new change time is the file's identity from now on; an
  /// error (its reason in the message), or no callback, and it is an error
  /// as any change. One whose path no longer leads to the open inode
  /// (deleted, renamed, renamed over) reads on: its descriptor reads the
  /// bytes indexed. A reopen (pin) that finds only the change time new reads
  /// on too, and is asked about here at the next call. Call it with no read
  /// in flight (the loader: at each epoch's start).
  absl::Status check_open_files(const std::function<absl::Status(uint32_t id)>& still_indexed = nullptr);
  /// From now on, an open (pin) that finds only the file's change time new
  /// (its bytes rewritten with the modification time set back, or a
  /// metadata change; or an identity an index cache recorded in an earlier
  /// run) asks `still_indexed` (outside the table's lock, from the reading
  /// thread; it must be thread-safe) before anything is read: OK, and the
  /// file is read, with its new change time as its identity; an error, and
  /// the pin is the error naming the file. Without it such a file is read on
  /// and asked about at the next check_open_files.
  void check_reopens_with(std::function<absl::Status(uint32_t id)> still_indexed);
  /// False: a file opened before in this table (its bytes read, and maybe
  /// kept elsewhere: the MPI job cache) whose reopen finds only its change
  /// time new is an error naming it, not indexed again (the first open of a
  /// file still asks check_reopens_with's function). True by default.
  void reindex_reopened(bool on) { reindex_reopened_ = on; }
  size_t max_open() const { return max_open_; }
  bool direct() const { return direct_; }
  FileTableStats stats() const;

  /// min(RLIMIT_NOFILE soft limit / 2, 1024), at least 1.
  static size_t default_max_open();

 private:
  struct Impl;
  absl::StatusOr<Pin> pin_impl(uint32_t id, bool may_exceed);
  void unpin(uint32_t id, int fd) noexcept;

  size_t max_open_;
  std::function<absl::Status(uint32_t id)> reopen_check_;  // check_reopens_with's (set before reads)
  bool reindex_reopened_ = true;                           // reindex_reopened's (set before reads)
  std::atomic<uint64_t> redirections_{0};
  bool direct_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlfeed
