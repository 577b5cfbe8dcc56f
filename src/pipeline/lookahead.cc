#include "pipeline/lookahead.h"

#include "record.h"

namespace dlfeed::inline DLFEED_ABI::pipeline {

Lookahead::Lookahead(const SourceParts& parts, OrderCursor cursor, uint64_t epoch, uint64_t first_batch)
    : parts_(parts), cursor_(std::move(cursor)), epoch_(epoch), batch_index_(first_batch) {}

Work* Lookahead::next() {
  const std::atomic<bool>& stop = *parts_.stop;
  while (!stop) {
    if (staged_ == nullptr && !exhausted_) {
      std::shared_ptr<Work> w;
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
  Work* w = ahead_.front();
  ahead_.pop_front();
  return w;
}

void Lookahead::drop() {
  for (Work* w : ahead_) w->self.reset();
  ahead_.clear();
  if (staged_) staged_->self.reset();
  staged_ = nullptr;
}

bool Lookahead::admit_and_read(Work& w, bool wait) {
  // Only a wait is timed (trace events of 1 µs or more).
  counters::Span span(wait ? parts_.counters : nullptr, counters::kAdmitWaitSpan);
  const bool admitted = admit(parts_.budget, *w.ticket, parts_.rule, wait, *parts_.stop);
  span.args(w.epoch, w.index);
  span.end();
  if (!admitted) return false;
  issue_reads(w);
  return true;
}

void Lookahead::issue_reads(Work& w) {
  BufferPool& pool = *parts_.pool;
  w.raw = pool.take(w.plan.buffer_bytes);
  for (size_t f = 0; f < w.known.size(); ++f) {
    if (w.known[f]) w.out[f] = pool.take(w.out_offsets[f].back());
  }
  auto batch = std::make_shared<detail::ReadBatch>();
  batch->reads.reserve(w.plan.reads.size() + w.direct_reads.size());
  for (const prefetch::PlannedRead& r : w.plan.reads) {
    batch->reads.push_back({r.file, r.offset, r.length, w.raw.data() + r.buffer_offset, 0});
  }
  for (const Work::DirectRead& d : w.direct_reads) {
    batch->reads.push_back({d.file, d.offset, d.length, w.out[d.field].data() + d.dest, 0});
  }
  if (parts_.fadvise != nullptr) advise_willneed(*parts_.fadvise, batch->reads);
  // The engine keeps the work (and so the buffers the reads land in) alive
  // until its reads are done.
  batch->done = [keep = w.self](const absl::Status& s) { keep->reads_finished(s); };
  parts_.engines->submit(w.index, std::move(batch));
}

}  // namespace dlfeed::pipeline
