// SPDX-License-Identifier: Apache-2.0
// Private: read planning. A batch's ids become its reads: raw samples read
// straight into the batch buffer (direct reads), everything else coalesced
// by prefetch::plan_reads into few large reads of a read buffer. Nothing is
// read here, and nothing admitted.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "batch/work.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/order/order.h"
#include "dlfeed/plan/plan.h"
#include "dlfeed/sample.h"
#include "format/split_record.h"
#include "read/resident.h"
#include "read/unpacked.h"

namespace dlfeed::inline DLFEED_ABI::plan {

/// Raw samples at least this big are read straight into the batch buffer
/// whatever their neighbours.
inline constexpr uint64_t kDirectMinBytes = 64 * 1024;

struct PlannerOptions {
  uint32_t batch_size = 32;
  bool drop_last_batch = false;
  prefetch::CoalesceOptions coalesce;
  // Strided batches: neighbours in file and batch become one copy (false:
  // a copy per sample, as CoalesceOptions::enabled = false asks of reads).
  bool merge_runs = true;
};

class Planner {
 public:
  /// `indices`: one per field; `file_ids[f][file]`: field f's file as a
  /// FileTable id. Both outlive the planner. `counters` may be null.
  /// Samples of files `unpacked` has (may be null) need no read: their
  /// decode gathers them from the unpacked array.
  /// When `held` (may be null) holds every file of every field and each
  /// field's sources are all SampleSource::strided() alike, batches are
  /// planned as strided ones (Work::strided): no SampleRef per sample.
  Planner(const std::vector<SampleIndex>& indices, const std::vector<std::vector<uint32_t>>& file_ids,
          PlannerOptions options, counters::Counters* counters, const detail::UnpackedFiles* unpacked = nullptr,
          const detail::ResidentFiles* held = nullptr);

  /// Plans strided batches from now on when `held` (may be null) holds
  /// every file as the constructor says, else no longer. Only while no batch
  /// is planned (between epochs).
  void set_held(const detail::ResidentFiles* held);

  /// True when every batch is a strided one: its reads are copies from held
  /// files straight into the batch, and it has nothing to decode. Any thread.
  bool copies_only() const { return strided_on_.load(std::memory_order_acquire); }

  /// The next batch of `cursor` (batch `batch_index` of `epoch`, which then
  /// counts up), planned; null when the cursor is done or only a short last
  /// batch is left and drop_last_batch is set. One thread at a time.
  std::shared_ptr<batch::Work> next(OrderCursor& cursor, uint64_t epoch, uint64_t& batch_index);

  /// Plans `w` (its ids set): the direct-read decision, the read plan, the
  /// known output sizes and the ticket's bytes (read buffer + output).
  void plan(batch::Work& w);

  /// Totals over every batch planned: extents asked for, reads planned
  /// (coalesced and direct).
  uint64_t extents() const { return extents_.load(std::memory_order_relaxed); }
  uint64_t planned_reads() const { return planned_reads_.load(std::memory_order_relaxed); }

 private:
  // Which (sample, field) slots are read directly: raw samples (one extent,
  // decode is the identity) whose sizes are known, unless small and near
  // another extent of the batch that does not follow it in the batch too.
  void choose_direct(const batch::Work& w, std::vector<uint8_t>& raw_ok);
  // The gap this batch merges across (CoalesceOptions::adaptive_gap).
  uint64_t batch_gap(const batch::Work& w) const;
  // plan() for a strided batch: a direct read per sample (or run of
  // neighbours) from each field's layout.
  void plan_strided(batch::Work& w);

  // Per field when copies_only(): each file's layout.
  struct StridedField {
    std::vector<SampleSource::Strided> files;
    // Samples per file when every file but the last holds that many and the
    // last no more: a sample's file is then its id / per_file (0: search).
    uint64_t per_file = 0;
  };
  std::vector<StridedField> strided_;
  std::atomic<bool> strided_on_{false};  // !strided_.empty(), for copies_only() on any thread
  // Per field and source: the source as detail::SplitRecords (split_reads.h).
  std::vector<std::vector<const detail::SplitRecords*>> split_src_;

  const std::vector<SampleIndex>& indices_;
  const std::vector<std::vector<uint32_t>>& file_ids_;
  PlannerOptions options_;
  uint64_t gap_ = 0;  // the batch being planned's (batch_gap)
  counters::Counters* counters_;
  const detail::UnpackedFiles* unpacked_;
  std::atomic<uint64_t> extents_{0}, planned_reads_{0};
  // Scratch (one thread at a time).
  std::vector<uint8_t> direct_scratch_;
  std::vector<uint8_t> split_done_;
  std::vector<size_t> last_direct_scratch_;
  std::vector<std::pair<uint64_t, uint64_t>> small_scratch_;
  std::vector<prefetch::ExtentRef> ext_scratch_;
};

}  // namespace dlfeed::plan
