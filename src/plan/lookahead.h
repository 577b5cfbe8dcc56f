// SPDX-License-Identifier: Apache-2.0
// Private: the pipeline's source, run by the pipeline thread outside the
// loader's task arena. It keeps the reads of every batch the prefetch policy
// and the memory budget admit in flight (the look-ahead), and hands the
// pipeline the oldest; it waits only when nothing at all is in flight for
// the pipeline. So the look-ahead is the policy's, not the thread count's,
// and no decode thread waits for reads (DecodeFeed decodes a batch once its
// reads completed).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "batch/budget.h"
#include "batch/work.h"
#include "dlfeed/batch/batch.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/order/order.h"
#include "plan/planner.h"
#include "read/engine.h"
#include "read/resident.h"

namespace dlfeed::inline DLFEED_ABI::plan {

/// What the look-ahead draws on, the same for every epoch (all outlive it).
struct SourceParts {
  Planner* planner = nullptr;
  std::shared_ptr<batch::Budget> budget;
  batch::AdmitRule rule;
  BufferPool* pool = nullptr;            // the read and batch buffers
  FileTable* fadvise = nullptr;          // non-null: hint each batch's reads (WILLNEED) before issuing them
  detail::EngineSet* engines = nullptr;  // issues the reads
  counters::Counters* counters = nullptr;
  const std::atomic<bool>* stop = nullptr;    // the epoch is cancelled
  const std::atomic<bool>* failed = nullptr;  // a batch failed: plan no more
  // Non-null: the files held in memory (LoaderOptions::resident). Reads of
  // them are copied here, a batch at a time, instead of going through an I/O
  // engine one request per extent (unless tracing, whose read events come
  // from the engine); `copied_bytes` and `copied_reads` count them for
  // LoaderStats::bytes_read and io_operations.
  const detail::ResidentFiles* resident = nullptr;
  std::atomic<uint64_t>* copied_bytes = nullptr;
  std::atomic<uint64_t>* copied_reads = nullptr;
  // More than 1: a batch's copies from held files (1 MiB and more of them)
  // are spread over up to this many threads by `spread` (body(0) ..
  // body(n - 1) in parallel, returning when all are done: the pipeline's
  // arena); else they are made one after another on the planner's thread.
  uint32_t copy_threads = 1;
  std::function<void(size_t n, const std::function<void(size_t)>& body)> spread;
  // A split record (split_reads.h) is one scattered read (ReadRequest::pieces)
  // when true, else three plain reads (a backend from AdvancedOptions::io_factory,
  // which may not know pieces), whose value's CRC the check takes itself.
  bool scattered_reads = true;
  // Set: called as each epoch's look-ahead is made, with the cursor where
  // the epoch starts and its first batch (the loader's ObjectUses).
  std::function<void(const OrderCursor& cursor, uint64_t epoch, uint64_t first_batch)> on_epoch;
};

/// One epoch's source: batches of `cursor` from `first_batch` on.
class Lookahead {
 public:
  // Split values whose CRC the engine is asked for: (split, read index).
  using CrcReads = std::vector<std::pair<uint32_t, uint32_t>>;

  Lookahead(const SourceParts& parts, OrderCursor cursor, uint64_t epoch, uint64_t first_batch);
  ~Lookahead() { drop(); }
  Lookahead(const Lookahead&) = delete;
  Lookahead& operator=(const Lookahead&) = delete;

  /// The oldest admitted batch, its reads issued (the pipeline owns it from
  /// now on, through Work::self); null at the end of the epoch or on stop.
  batch::Work* next();
  /// Drops the batches planned but never handed to the pipeline.
  void drop();
  /// Batches admitted and not yet handed out.
  size_t ahead() const { return ahead_.size(); }

 private:
  // Admits `w` (waiting when `wait`, else refusing at once), then takes its
  // buffers and issues its reads.
  bool admit_and_read(batch::Work& w, bool wait);
  void issue_reads(batch::Work& w);
  // A split record (its value's DirectRead `d`): one scattered read into
  // `batch`, or three plain reads through `read(file, offset, length, dest)`
  // (a caller's backend). Defined and used in lookahead.cc only.
  template <typename Read>
  void add_split_read(batch::Work& w, const batch::Work::DirectRead& d, detail::ReadBatch& batch, Read& read,
                      CrcReads& crc_reads) const;
  // Makes copies_ (deferred copies from held files), spread when there are
  // enough bytes, and clears them.
  void flush_copies(uint64_t bytes);

  struct Copy {
    std::byte* dest;
    const std::byte* from;
    uint64_t length;
  };
  std::vector<Copy> copies_;

  SourceParts parts_;
  OrderCursor cursor_;
  uint64_t epoch_;
  uint64_t batch_index_;
  std::deque<batch::Work*> ahead_;  // admitted, reads issued, in order
  batch::Work* staged_ = nullptr;   // planned, waiting for admission
  bool exhausted_ = false;
};

}  // namespace dlfeed::plan
