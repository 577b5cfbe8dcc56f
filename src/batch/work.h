// SPDX-License-Identifier: Apache-2.0
// Private: one batch in flight through the pipeline, the token its stages
// pass along (docs/architecture.md):
//
//   lookahead (planner, budget, I/O engine) -> decoder -> collator
//
// The planner fills the ids and the reads, admission the buffers and the
// ticket, the engine the bytes, the decoder the batch (or the error).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "batch/budget.h"
#include "dlfeed/batch/batch.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/io/io_backend.h"
#include "dlfeed/plan/plan.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::batch {

struct Work {
  uint64_t epoch = 0;
  uint64_t index = 0;     // the batch's index in the epoch
  uint64_t position = 0;  // the rank position of its first sample
  std::vector<uint64_t> ids;
  // Planned without refs (Planner::copies_only): every sample of every field
  // is a direct read of its strided source's layout, of the sample shape
  // every source of the field shares (refs, piece_begin and plan are empty).
  bool strided = false;
  // refs[i * fields + f]: sample i of field f as its index describes it,
  // made once by the planner for every later stage.
  std::vector<SampleRef> refs;
  prefetch::ReadPlan plan;
  // piece_begin[i * fields + f] is the first plan piece of sample i, field f.
  std::vector<uint32_t> piece_begin;
  ByteBuffer raw;  // the plan's read buffer
  // Fields whose sample sizes are known before decode get their batch buffer
  // at admission; samples whose decode is the identity (raw contiguous bytes)
  // are read straight into it (direct[i * fields + f]) and skip decode.
  static constexpr uint32_t kNoSplit = ~uint32_t{0};
  struct DirectRead {
    uint32_t file;
    uint64_t offset, length;
    uint32_t field;
    uint64_t dest;              // offset in out[field]
    uint32_t split = kNoSplit;  // the split record whose value this is (splits[split])
  };
  std::vector<uint8_t> known;  // per field
  // Per field of unknown sizes whose every sample is a split record's value
  // of one predicted length (predict_split_layout): laid out as if known, the
  // values read into place; decode confirms the sizes (or lays them out again).
  std::vector<uint8_t> predicted;
  std::vector<std::vector<uint64_t>> out_offsets;  // per known or predicted field: n + 1
  std::vector<uint64_t> unknown_bytes;             // per other field: the bytes read for it (a size hint)
  std::vector<uint8_t> direct;                     // per (sample, field)
  std::vector<DirectRead> direct_reads;
  std::vector<ByteBuffer> out;  // per field (known and predicted ones allocated)
  /// Field f has out_offsets and a batch buffer before decode.
  bool laid_out(size_t f) const { return known[f] || (!predicted.empty() && predicted[f]); }
  // Records read around their value (src/format/split_record.h): the value
  // straight into its slot, the bytes before and after it into the read
  // buffer at their places in the record's region there, whose middle (the
  // value's place) is left unwritten. split_of[i * fields + f] names the
  // split record sample i of field f decodes from (kNoSplit: none; empty
  // when the batch has none). Checked before any field decodes.
  struct SplitRead {
    uint32_t slot;                  // i * fields + f of the field whose value is read into its slot
    uint32_t file;                  // FileTable id
    uint64_t offset;                // the record's in the file
    uint64_t before, value, after;  // the record's lengths: before | value | after
    uint64_t region = 0;            // the record's place in the read buffer
    uint8_t state = 0;              // 0 unchecked, 1 passed check_split, 2 failed: use `whole`
    std::vector<std::byte> whole;   // the record put back together (state 2)
    // The source checks CRCs: the value's read asks the backend for its
    // CRC32C, taken as it lands (ReadRequest::checksum); value_crc_known when
    // the backend gave it (held files copied by the look-ahead: not).
    bool want_crc = false;
    bool value_crc_known = false;
    uint32_t value_crc = 0;
  };
  std::vector<uint32_t> split_of;
  std::vector<SplitRead> splits;
  // splits[s]'s one scattered read: before, value, after (pieces[3s..3s+2]).
  std::vector<ReadPiece> pieces;
  std::shared_ptr<Ticket> ticket;

  // Read completion (set through the engine's callback).
  std::mutex mu;
  std::condition_variable cv;
  bool reads_done = false;
  absl::Status read_status;
  std::function<void()> on_read;  // when_read()'s continuation, until the reads finish

  // Its place in the epoch's hand-out order (DecodeFeed: collated in it).
  uint64_t handed = 0;

  // Output.
  std::shared_ptr<Batch> batch;
  absl::Status error;

  // The pipeline passes plain Work* tokens (stored in place by oneTBB); this
  // keeps the work alive from planning until the collator lets go.
  std::shared_ptr<Work> self;

  /// Every sample was read into place (or the batch is strided): decode
  /// only fills in the batch's offsets and shapes, no sample's bytes.
  bool nothing_to_decode() const {
    if (strided) return true;
    for (uint8_t k : known) {
      if (!k) return false;
    }
    for (uint8_t d : direct) {
      if (!d) return false;
    }
    return true;
  }

  /// Every read landed (OK) or the first error.
  void reads_finished(const absl::Status& s) {
    std::function<void()> then;
    {
      std::lock_guard<std::mutex> lock(mu);
      read_status = s;
      reads_done = true;
      then = std::move(on_read);
    }
    cv.notify_all();
    if (then) then();
  }
  /// Runs `then` once every read finished: at once on this thread when they
  /// have, else on the thread that finishes them (the engine's, or one
  /// cancelling). Once per work.
  void when_read(std::function<void()> then) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!reads_done) {
        on_read = std::move(then);
        return;
      }
    }
    then();
  }
  absl::Status wait_reads() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reads_done; });
    return read_status;
  }
};

}  // namespace dlfeed::batch
