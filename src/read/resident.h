// SPDX-License-Identifier: Apache-2.0
// Private: a dataset held in memory. When every file of a loader's dataset
// fits in half its memory budget, the loader reads each file once, whole and
// in order, at create (LoaderOptions::resident), and every later read is a
// copy from memory: no system call and no ring per sample, which for small
// samples costs far more than the bytes (issue 17: ~1.7 µs per 64-byte read
// against ~0.1 µs to copy it). The copy is a snapshot: a file changed after
// create is not seen.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dlfeed/batch/batch.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/io/io_backend.h"
#include "dlfeed/loader.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// The whole bytes of some of a FileTable's files, read once.
class ResidentFiles {
 public:
  /// Reads files `ids` of `files` whole (one pread_full each).
  /// Errors name the file and the offset of the failed read.
  static absl::StatusOr<std::shared_ptr<const ResidentFiles>> load(FileTable& files, const std::vector<uint32_t>& ids);

  /// Whether file `id` is held (its bytes and size then valid).
  bool has(uint32_t id) const { return id < held_.size() && held_[id]; }
  const std::byte* data(uint32_t id) const { return buffers_[id].data(); }
  uint64_t size(uint32_t id) const { return sizes_[id]; }
  const std::string& path(uint32_t id) const { return paths_[id]; }
  /// Bytes held, all files.
  uint64_t bytes() const { return bytes_; }
  size_t files() const { return files_; }

 private:
  std::vector<uint8_t> held_;
  std::vector<ByteBuffer> buffers_;
  std::vector<uint64_t> sizes_;
  std::vector<std::string> paths_;
  uint64_t bytes_ = 0;
  size_t files_ = 0;
};

/// What LoaderOptions::resident decided for a loader over `files`.
struct ResidentChoice {
  std::shared_ptr<const ResidentFiles> files;  // null: read the files
  std::string reason;                          // why (LoaderStats::resident_reason)
};
/// Decides (auto: every file of `files` together within half of
/// memory_budget, and no io.direct, stage or io_factory other than the
/// object store's own, `objects`) and, if so, reads the files (objects
/// whole, through their store). `on` that cannot be is FailedPrecondition
/// saying why; a value other than auto, on, off is InvalidArgument.
absl::StatusOr<ResidentChoice> choose_resident(const LoaderOptions& options, FileTable& files, bool objects = false);

/// A backend that serves reads of held files by copying from `held`, and
/// hands every other read to `inner`. Completions of copies are ready at
/// once (counted in IoStats::completed_at_submit, as page-cache hits are).
std::unique_ptr<IoBackend> make_resident_backend(std::unique_ptr<IoBackend> inner,
                                                 std::shared_ptr<const ResidentFiles> held);

}  // namespace dlfeed::detail
