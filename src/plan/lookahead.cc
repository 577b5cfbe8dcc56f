// SPDX-License-Identifier: Apache-2.0
#include "plan/lookahead.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/io/object_store.h"
#include "io/stream_copy.h"

#include "counters/record.h"

namespace dlfeed::inline DLFEED_ABI::plan {
namespace {
constexpr uint64_t kCopyPiece = 1 << 20;         // a deferred copy's largest piece
constexpr uint64_t kSpreadAtLeast = 1 << 20;     // a batch copying less stays on one thread
constexpr uint64_t kBytesPerThread = 256 << 10;  // and one with more gets at most a thread per this many
}  // namespace

Lookahead::Lookahead(const SourceParts& parts, OrderCursor cursor, uint64_t epoch, uint64_t first_batch)
    : parts_(parts), cursor_(std::move(cursor)), epoch_(epoch), batch_index_(first_batch) {
  if (parts_.on_epoch) parts_.on_epoch(cursor_, epoch_, batch_index_);
}

batch::Work* Lookahead::next() {
  const std::atomic<bool>& stop = *parts_.stop;
  while (!stop) {
    if (staged_ == nullptr && !exhausted_) {
      std::shared_ptr<batch::Work> w;
      if (!*parts_.failed) w = parts_.planner->next(cursor_, epoch_, batch_index_);
      if (!w) {
        exhausted_ = true;
      } else {
        staged_ = w.get();
        staged_->self = std::move(w);  // the pipeline's reference, dropped at the collator
      }
    }
    if (staged_ == nullptr) break;
    if (!admit_and_read(*staged_, /*wait=*/ahead_.empty())) break;
    ahead_.push_back(staged_);
    staged_ = nullptr;
  }
  if (ahead_.empty() || stop) return nullptr;
  batch::Work* w = ahead_.front();
  ahead_.pop_front();
  return w;
}

void Lookahead::drop() {
  for (batch::Work* w : ahead_) w->self.reset();
  ahead_.clear();
  if (staged_) staged_->self.reset();
  staged_ = nullptr;
}

void Lookahead::flush_copies(uint64_t bytes) {
  auto copy = [](const Copy& c) {
    if (c.length >= 16) {
      detail::copy_large(c.dest, c.from, c.length);
    } else {
      std::memcpy(c.dest, c.from, c.length);
    }
  };
  const uint64_t threads = std::min<uint64_t>(parts_.copy_threads, bytes / kBytesPerThread);
  if (bytes < kSpreadAtLeast || threads < 2 || copies_.size() < 2) {
    for (const Copy& c : copies_) copy(c);
    copies_.clear();
    return;
  }
  // Consecutive copies in `threads` groups of about the same bytes.
  std::vector<size_t> starts{0};
  const uint64_t share = (bytes + threads - 1) / threads;
  uint64_t acc = 0;
  for (size_t i = 0; i < copies_.size(); ++i) {
    if (acc >= share * starts.size() && i > starts.back()) starts.push_back(i);
    acc += copies_[i].length;
  }
  starts.push_back(copies_.size());
  parts_.spread(starts.size() - 1, [&](size_t g) {
    for (size_t i = starts[g]; i < starts[g + 1]; ++i) copy(copies_[i]);
  });
  copies_.clear();
}

bool Lookahead::admit_and_read(batch::Work& w, bool wait) {
  // Only a wait is timed (trace events of 1 µs or more).
  counters::Span span(wait ? parts_.counters : nullptr, counters::kAdmitWaitSpan);
  const bool admitted = admit(parts_.budget, *w.ticket, parts_.rule, wait, *parts_.stop);
  span.args(w.epoch, w.index);
  span.end();
  if (!admitted) return false;
  issue_reads(w);
  return true;
}

namespace {

// The CRCs the engine took of split values (crc_reads: split, read index)
// into their records (a read not answered: the check takes it from the bytes).
void take_crcs(batch::Work& w, const detail::ReadBatch& b, const Lookahead::CrcReads& crc_reads) {
  for (const auto& [split, k] : crc_reads) {
    if (b.crc_known[k] == 0) continue;
    w.splits[split].value_crc = b.crcs[k];
    w.splits[split].value_crc_known = true;
  }
}

}  // namespace

template <typename Read>
void Lookahead::add_split_read(batch::Work& w, const batch::Work::DirectRead& d, detail::ReadBatch& batch, Read& read,
                               CrcReads& crc_reads) const {
  // One scattered read: the bytes before and after the value into the
  // record's region of the read buffer, the value into its slot.
  batch::Work::SplitRead& s = w.splits[d.split];
  std::byte* region = w.raw.data() + s.region;
  ReadPiece* p = &w.pieces[3 * d.split];
  p[0] = {region, s.before};
  p[1] = {w.out[d.field].data() + d.dest, s.value};
  p[2] = {region + s.before + s.value, s.after};
  if (!parts_.scattered_reads) {  // piece by piece
    for (uint64_t k = 0, at = s.offset; k < 3; at += p[k].length, ++k) read(s.file, at, p[k].length, p[k].dest);
    return;
  }
  // Held or not, the engine takes it: a held file's record (64 KiB and more)
  // is copied by the engines' held-files backend, spread over the engines as
  // reads are, its value's CRC taken as it is copied, rather than copied here
  // on this one thread and checked later from memory. When its CRCs are
  // checked, the value's is asked of the engine, taken as it lands.
  if (parts_.resident != nullptr) parts_.resident->wait(s.file, parts_.stop);  // then a copy, if it is held
  if (s.want_crc) crc_reads.emplace_back(d.split, static_cast<uint32_t>(batch.reads.size()));
  batch.reads.push_back({s.file, s.offset, s.before + s.value + s.after, p[1].dest, 0, s.want_crc, p, 3, 1});
}

namespace {

// The batch's read buffer and the buffers of its fields of known (or predicted) sizes.
void take_buffers(batch::Work& w, BufferPool& pool) {
  w.raw = pool.take(w.plan.buffer_bytes);
  for (size_t f = 0; f < w.known.size(); ++f) {
    if (w.laid_out(f)) w.out[f] = pool.take(w.out_offsets[f].back());
  }
}

}  // namespace

void Lookahead::issue_reads(batch::Work& w) {
  take_buffers(w, *parts_.pool);
  auto batch = std::make_shared<detail::ReadBatch>();
  batch->reads.reserve(w.plan.reads.size() + w.direct_reads.size());
  counters::Counters* c = parts_.counters;
  const detail::ResidentFiles* held = parts_.resident;
  if (held != nullptr && c != nullptr && c->tracing()) held = nullptr;  // read events come from the engine
  // Copies are gathered to be spread only in batches big enough to spread
  // (their buffers' bytes); small samples keep the inline copies below.
  uint64_t batch_bytes = w.plan.buffer_bytes;
  for (size_t f = 0; f < w.known.size(); ++f) batch_bytes += w.laid_out(f) ? w.out_offsets[f].back() : 0;
  const bool defer = held != nullptr && parts_.copy_threads > 1 && parts_.spread && batch_bytes >= kSpreadAtLeast;
  absl::Status copy_status;
  uint64_t copies = 0, copied = 0;
  [[maybe_unused]] const uint64_t t0 = held != nullptr && c != nullptr ? detail::now_of(*c) : 0;
  // A read of a held file is a copy, here and now; any other goes to the
  // engine. A file still being held is waited for (the hold reads files in
  // the order the first epoch first uses them).
  auto read = [&](uint32_t file, uint64_t offset, uint64_t length, std::byte* dest) {
    const bool is_held = parts_.resident != nullptr && parts_.resident->wait(file, parts_.stop);
    if (held == nullptr || !is_held) {  // while tracing, the engine copies it
      batch->reads.push_back({file, offset, length, dest, 0});
      return;
    }
    const uint64_t size = held->size(file);
    if (offset > size || length > size - offset) {
      const uint64_t available = offset < size ? size - offset : 0;
      if (copy_status.ok()) {
        copy_status = format_error(held->path(file), offset, absl::StrCat(length, " bytes"),
                                   absl::StrCat("only ", available, " bytes before the end of the file"));
      }
      return;
    }
    const std::byte* from = held->data(file) + offset;
    ++copies;
    copied += length;
    if (defer) {
      for (uint64_t done = 0; done < length; done += kCopyPiece) {  // large runs split, to spread
        copies_.push_back({dest + done, from + done, std::min(kCopyPiece, length - done)});
      }
      return;
    }
    switch (length) {  // tiny samples: a fixed-size copy the compiler inlines, not a call
      case 0: break;
      case 1: *dest = *from; break;
      case 2: std::memcpy(dest, from, 2); break;
      case 4: std::memcpy(dest, from, 4); break;
      case 8: std::memcpy(dest, from, 8); break;
      default: detail::copy_large(dest, from, length);
    }
  };
  for (const prefetch::PlannedRead& r : w.plan.reads) read(r.file, r.offset, r.length, w.raw.data() + r.buffer_offset);
  CrcReads crc_reads;
  w.pieces.assign(3 * w.splits.size(), ReadPiece{});  // never grows while the reads are out
  for (const batch::Work::DirectRead& d : w.direct_reads) {
    if (d.split == batch::Work::kNoSplit) {
      read(d.file, d.offset, d.length, w.out[d.field].data() + d.dest);
    } else {
      add_split_read(w, d, *batch, read, crc_reads);
    }
  }
  if (!crc_reads.empty()) {
    batch->crcs.assign(batch->reads.size(), 0);
    batch->crc_known.assign(batch->reads.size(), 0);
  }
  if (defer) flush_copies(copied);
  if (copies > 0 && parts_.copied_bytes != nullptr) parts_.copied_bytes->fetch_add(copied, std::memory_order_relaxed);
  if (copies > 0 && parts_.copied_reads != nullptr) parts_.copied_reads->fetch_add(copies, std::memory_order_relaxed);
  DLFEED_REC({
    if (copies > 0 && c != nullptr) detail::record_reads(*c, t0, detail::now_of(*c), copies, copied);  // as the engine
  });
  if (batch->reads.empty()) {
    w.reads_finished(copy_status);
    return;
  }
  if (parts_.fadvise != nullptr) advise_willneed(*parts_.fadvise, batch->reads);
  for (ReadRequest& r : batch->reads) r.use_at = ObjectUses::step(epoch_, w.index);
  // The engine keeps the work (and so the buffers the reads land in) alive
  // until its reads are done.
  batch->done = [keep = w.self, copy_status, b = batch.get(), crc_reads = std::move(crc_reads)](const absl::Status& s) {
    take_crcs(*keep, *b, crc_reads);
    keep->reads_finished(copy_status.ok() ? s : copy_status);
  };
  parts_.engines->submit(w.index, std::move(batch));
}

}  // namespace dlfeed::plan
