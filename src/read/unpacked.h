// SPDX-License-Identifier: Apache-2.0
// Private: arrays unpacked once (LoaderOptions::unpack). Two layouts make
// reading per sample cost far more than the sample: a deflated NPZ member
// (np.savez_compressed), where each sample's extent is the whole compressed
// member and its decode inflates all of it (time and bytes quadratic in the
// samples of a file), and a strided array (the DLIO layout, samples on the
// last axis), where each sample spans nearly the whole array. For those,
// when they fit in what half of memory_budget leaves after the held files
// (LoaderOptions::resident), the loader keeps the array's data: the first
// sample decoded from a file in an epoch reads its member or array once,
// whole (a view when the file is held), inflates and checks it, and every
// later sample of the file in that epoch is gathered from memory. Each epoch
// starts afresh (reset()), so an epoch reads every array once, as a cold
// epoch must, and a file changed between epochs is read again, with the
// checks every read has. The bytes kept come out of
// memory_budget at create, as the held files do. Files that do not fit are
// read per sample as before.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dlfeed/batch/batch.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/loader.h"
#include "dlfeed/sample.h"
#include "read/resident.h"

namespace dlfeed::inline DLFEED_ABI::detail {

class ArraySource;
class UnpackedFiles;

/// What LoaderOptions::unpack decided.
struct UnpackChoice {
  std::shared_ptr<UnpackedFiles> files;  // null: nothing unpacked
  std::string reason;                    // LoaderStats::unpacked_reason
};
/// Decides (auto: every deflated or strided array source, in field and file
/// order, while their bytes fit in half of memory_budget less `held`'s; not
/// with io.direct, stage or an io_factory other than the object store's own,
/// `objects`, which want every read to go to the files or the given
/// backend). `unpack` other than auto or off is InvalidArgument. Nothing is
/// read here.
absl::StatusOr<UnpackChoice> choose_unpacked(const LoaderOptions& options, const std::vector<SampleIndex>& indices,
                                             const std::vector<std::vector<uint32_t>>& file_ids, FileTable& table,
                                             std::shared_ptr<const ResidentFiles> held, bool objects,
                                             counters::Counters* counters);

/// The unpacked arrays of a loader's fields: which (field, file) are, and
/// their data once loaded. Thread-safe; a file's array is loaded once (the
/// first decode needing it loads it, others wait for it).
class UnpackedFiles {
 public:
  /// Whether sample refs of file `file` of field `field` decode from here.
  bool has(size_t field, uint32_t file) const {
    return field < slots_.size() && file < slots_[field].size() && slots_[field][file] != nullptr;
  }
  /// Decodes `ref` (of field `field`, has() true) from the array's data,
  /// loading it first if no sample of its file was decoded yet. Errors
  /// (a failed read, a corrupt or truncated deflate stream, a CRC-32
  /// mismatch) name the file and offset; a failed load is tried again by
  /// the next sample that needs it.
  absl::StatusOr<DecodedSample> decode(size_t field, const SampleRef& ref, std::vector<std::byte>& scratch) const;

  /// Bytes reserved out of memory_budget: what every unpacked file keeps
  /// once loaded.
  uint64_t reserved_bytes() const { return reserved_; }
  /// (field, file) pairs unpacked.
  size_t files() const { return files_; }
  /// Bytes read (or copied from held files) by loads, and the loads.
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  uint64_t loads() const { return loads_.load(std::memory_order_relaxed); }

  /// Drops every loaded array (the next sample of a file loads it again).
  /// Only while no decode runs (between epochs).
  void reset();

 private:
  friend absl::StatusOr<UnpackChoice> choose_unpacked(const LoaderOptions&, const std::vector<SampleIndex>&,
                                                      const std::vector<std::vector<uint32_t>>&, FileTable&,
                                                      std::shared_ptr<const ResidentFiles>, bool, counters::Counters*);
  // One load's bytes: decodes hold a reference while they gather, so
  // reset() never frees bytes a decode still reads.
  struct Loaded {
    ByteBuffer raw;       // the bytes read (a raw array's data; empty for a view of held bytes)
    ByteBuffer inflated;  // a deflated member, inflated
    std::span<const std::byte> data;
  };
  struct Entry {
    const ArraySource* source = nullptr;
    uint32_t table_id = 0;  // FileTable id
    std::mutex mu;
    std::shared_ptr<Loaded> loaded;  // under mu; null until loaded this epoch
    // Under mu: the buffer the last epoch's load kept (the inflated member,
    // or a raw array's data), reused by the next load: a buffer freed and
    // allocated again each epoch came back as fresh pages, which the kernel
    // zeroes (30% of the CPU of a deflated NPZ epoch).
    ByteBuffer spare;
  };
  absl::StatusOr<std::shared_ptr<Loaded>> load(Entry& e) const;
  // Read buffers for compressed members, kept between loads (at most one
  // per load running at once, as many as were ever needed together).
  ByteBuffer take_read_buffer() const;
  void give_read_buffer(ByteBuffer&& b) const;

  std::vector<std::vector<std::unique_ptr<Entry>>> slots_;  // [field][file]
  FileTable* table_ = nullptr;
  std::shared_ptr<const ResidentFiles> held_;
  counters::Counters* counters_ = nullptr;
  uint64_t reserved_ = 0;
  size_t files_ = 0;
  mutable std::atomic<uint64_t> bytes_read_{0}, loads_{0};
  mutable std::mutex read_buffers_mu_;
  mutable std::vector<ByteBuffer> read_buffers_;  // under read_buffers_mu_
};

}  // namespace dlfeed::detail
