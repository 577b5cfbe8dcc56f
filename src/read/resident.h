// SPDX-License-Identifier: Apache-2.0
// Private: a dataset held in memory. When every file of a loader's dataset
// fits in half its memory budget, the loader reads each file once, whole
// (LoaderOptions::resident), from create on, on threads of its own, in the
// order the first epoch first uses them; a batch waits only for its own
// files, and every later read is a copy from memory: no system call and no
// ring per sample, which for small samples costs far more than the bytes
// (~1.7 µs per 64-byte read against ~0.1 µs to copy it). The copy is a
// snapshot of each file as it was read.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "dlfeed/batch/batch.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/io/io_backend.h"
#include "dlfeed/loader.h"

namespace dlfeed::inline DLFEED_ABI::detail {

class ResidentHold;

/// The whole bytes of some of a FileTable's files, read once: all before
/// load() returns, or (ResidentHold) on threads of their own in a given
/// order while the loader runs, each file published once all its bytes are
/// in.
class ResidentFiles {
 public:
  /// Reads files `ids` of `files` whole, all of them before it returns.
  /// Errors name the file and the offset of the failed read.
  static absl::StatusOr<std::shared_ptr<const ResidentFiles>> load(FileTable& files, const std::vector<uint32_t>& ids);

  /// Whether file `id` is held now (its bytes and size then valid, for good).
  bool has(uint32_t id) const { return id < n_ && state_[id].load(std::memory_order_acquire) == kHeld; }
  /// Whether file `id` is held or being read to be.
  bool will_hold(uint32_t id) const {
    if (id >= n_) return false;
    const uint8_t st = state_[id].load(std::memory_order_acquire);
    return st == kHeld || st == kPending;
  }
  /// Whether file `id` is held, waiting while it is being read: until it is
  /// held or given up (a read failed, or the hold stopped), or `*stop`.
  bool wait(uint32_t id, const std::atomic<bool>* stop = nullptr) const;
  /// Whether the hold is over: every file to hold held, or changed since.
  bool complete() const {
    return held_files_.load(std::memory_order_acquire) + dropped_.load(std::memory_order_acquire) == planned_files_;
  }
  /// File `id` changed in place since it was read (a new change time alone,
  /// its samples where they were): it is read from its source from now on,
  /// as it is now. Only while nothing reads from this copy (between epochs).
  void drop(uint32_t id) const;
  size_t files_dropped() const { return dropped_.load(std::memory_order_acquire); }
  /// Whether no file is being read any more (held, given up or dropped).
  bool over() const {
    return held_files_.load(std::memory_order_acquire) + dropped_.load(std::memory_order_acquire) +
               given_up_.load(std::memory_order_acquire) >=
           planned_files_;
  }
  const std::byte* data(uint32_t id) const { return data_[id]; }
  uint64_t size(uint32_t id) const { return sizes_[id]; }
  const std::string& path(uint32_t id) const { return paths_[id]; }
  /// Bytes and files held once every file to hold is: what the hold takes
  /// of the memory budget from the start.
  uint64_t bytes() const { return planned_bytes_; }
  size_t files() const { return planned_files_; }
  /// Files held so far, and the first error that made the hold give up a
  /// file (OK if none): such a file is read from its source instead.
  size_t files_held() const { return held_files_.load(std::memory_order_acquire); }
  absl::Status failure() const;

 private:
  friend class ResidentHold;
  static constexpr uint8_t kNotHeld = 0, kPending = 1, kHeld = 2, kGivenUp = 3;
  // `item`: the failed piece's place in the hold's order (failure() is the
  // first one's in that order, as a serial read would report).
  void finish(uint32_t id, bool held, const absl::Status& why, size_t item = SIZE_MAX);
  // Memory for files `ids` (in the hold's order), sizes_ bytes each.
  absl::Status place(const std::vector<uint32_t>& ids);
  struct Unmap {
    size_t bytes = 0;
    void operator()(std::byte* p) const noexcept;
  };

  size_t n_ = 0;
  std::unique_ptr<std::atomic<uint8_t>[]> state_;
  std::unique_ptr<std::atomic<uint32_t>[]> pieces_left_;
  std::vector<std::byte*> data_;                           // each file's bytes, in memory_
  std::vector<std::unique_ptr<std::byte, Unmap>> memory_;  // huge pages where the kernel gives them
  std::vector<uint64_t> sizes_;                            // as planned, and held
  std::vector<std::string> paths_;
  uint64_t planned_bytes_ = 0;
  size_t planned_files_ = 0;
  mutable std::atomic<size_t> held_files_{0};
  mutable std::atomic<size_t> dropped_{0};
  std::atomic<size_t> given_up_{0};
  mutable std::vector<uint8_t> stale_;  // under mu_: drop()ped while pending
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  absl::Status failure_;  // under mu_
  size_t failure_item_ = SIZE_MAX;
};

/// Holds files in memory on threads of its own, in the order given (the
/// first epoch's order of first use), while the loader reads: a batch waits
/// only for its own files. Destroying it stops the hold (what is not held
/// then is read from its source) and joins its threads.
class ResidentHold {
 public:
  /// Plans the hold of `ids` (each file's buffer made, untouched); begin()
  /// starts it.
  static absl::StatusOr<std::unique_ptr<ResidentHold>> plan(std::shared_ptr<FileTable> table,
                                                            const std::vector<uint32_t>& ids);
  /// Starts reading, on a thread of its own (once). When the system gives
  /// no thread, every file is given up (read from its source) and the error
  /// returned. Its reads from the files or objects count as I/O busy time
  /// in `counters` (when given): a trainer waiting for the hold waits on I/O.
  absl::Status begin(std::shared_ptr<counters::Counters> counters = nullptr);
  /// Reads no further piece (the destructor then waits only for the pieces
  /// being read).
  void stop() { stop_.store(true, std::memory_order_relaxed); }
  ~ResidentHold();
  ResidentHold(const ResidentHold&) = delete;
  ResidentHold& operator=(const ResidentHold&) = delete;
  std::shared_ptr<const ResidentFiles> files() const { return held_; }
  /// Waits for the hold to end (every file held or given up).
  void join();

 private:
  ResidentHold() = default;
  void run();
  struct Piece {
    uint32_t id = 0;
    uint64_t offset = 0, length = 0;
    bool whole = false;
  };
  std::shared_ptr<FileTable> table_;
  std::shared_ptr<counters::Counters> counters_;
  std::shared_ptr<ResidentFiles> held_;
  std::vector<Piece> pieces_;
  std::vector<File> objects_;  // per table id: the object open (objects only)
  bool objects_held_ = false;
  size_t whole_files_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// What LoaderOptions::resident decided for a loader over `files`.
struct ResidentChoice {
  std::shared_ptr<const ResidentFiles> files;  // null: read the files
  std::unique_ptr<ResidentHold> hold;          // filling `files` (null once it has)
  std::string reason;                          // why (LoaderStats::resident_reason)
};
/// Decides (auto: every file of `files` together within half of
/// memory_budget, and no io.direct, stage or io_factory other than the
/// object store's own, `objects`) and, if so, plans holding the files
/// (objects whole, through their store) in the order `first_use()` gives,
/// asked only then (table ids; files it lacks follow in id order): auto returns the hold
/// for the caller to begin() (a batch waits for its files until then), on
/// holds every file before it returns (a read that fails is its error). `on` that cannot be is FailedPrecondition
/// saying why; a value other than auto, on, off is InvalidArgument.
absl::StatusOr<ResidentChoice> choose_resident(const LoaderOptions& o, const std::shared_ptr<FileTable>& table,
                                               bool objects, const std::function<std::vector<uint32_t>()>& first_use);

/// A backend that serves reads of held files by copying from `held`, and
/// hands every other read to `inner`. Completions of copies are ready at
/// once (counted in IoStats::completed_at_submit, as page-cache hits are).
std::unique_ptr<IoBackend> make_resident_backend(std::unique_ptr<IoBackend> inner,
                                                 std::shared_ptr<const ResidentFiles> held);

}  // namespace dlfeed::detail
