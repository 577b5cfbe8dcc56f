// SPDX-License-Identifier: Apache-2.0
// Private: the decode filter (parallel across batches). Each sample's bytes
// (a view into the read buffer, or its pieces gathered when it has several
// extents) go to its source's decode, and the result to its slot in the
// batch buffer; samples read there directly need nothing.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <atomic>
#include "dlfeed/batch/batch.h"
#include "dlfeed/counters/counters.h"

#include "batch/work.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/sample.h"
#include "read/unpacked.h"

namespace dlfeed::inline DLFEED_ABI::decode {

class Decoder {
 public:
  /// `indices` and `field_names`: one per field; they outlive the decoder.
  /// `counters` may be null. Samples of files `unpacked` has (may be null)
  /// are decoded from it (the planner planned no read for them).
  Decoder(const std::vector<SampleIndex>& indices, const std::vector<std::string>& field_names,
          std::shared_ptr<BufferPool> pool, counters::Counters* counters,
          const detail::UnpackedFiles* unpacked = nullptr);

  /// Waits for `w`'s reads, then decodes every sample of every field
  /// straight into the batch's buffers: w.batch, or w.error (the first
  /// failing read or decode, naming file and offset). The read buffer goes
  /// back to the pool either way. Any thread; calls may overlap.
  void decode(batch::Work& w) const;

  /// TFRecord records read around their value (split_reads.h) and checked,
  /// and of those, the ones that failed the check and were decoded whole.
  uint64_t split_records() const { return split_records_.load(std::memory_order_relaxed); }
  uint64_t split_records_whole() const { return split_whole_.load(std::memory_order_relaxed); }

 private:
  void decode_reads(batch::Work& w) const;
  // Field f of a batch whose sample sizes are known before decode: each
  // sample decoded (in parallel when 8 or more) straight into its place.
  void decode_known(batch::Work& w, size_t f, BatchField& out, ByteBuffer& store) const;
  // Field f of a batch whose sample sizes are known only after decode.
  void decode_unknown(batch::Work& w, size_t f, BatchField& out, ByteBuffer& store) const;
  // The bytes of sample i, field f: a view into the read buffer (one extent,
  // or pieces end to end there) or gathered into `tmp` (several extents).
  std::span<std::byte> raw_of(batch::Work& w, size_t i, size_t f, ByteBuffer& tmp) const;
  // The bytes of sample i, field f when they lie end to end in the read
  // buffer (a view); else empty.
  std::span<std::byte> view_of(batch::Work& w, size_t i, size_t f) const;
  // Sample i of field f decoded (from its bytes read, or its unpacked array).
  absl::StatusOr<DecodedSample> decode_one(batch::Work& w, size_t i, size_t f, ByteBuffer& tmp,
                                           std::vector<std::byte>& scratch) const;

  const std::vector<SampleIndex>& indices_;
  const std::vector<std::string>& field_names_;
  std::shared_ptr<BufferPool> pool_;
  counters::Counters* counters_;
  const detail::UnpackedFiles* unpacked_;
  mutable std::atomic<uint64_t> split_records_{0}, split_whole_{0};
};

}  // namespace dlfeed::decode
