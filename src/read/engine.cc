// SPDX-License-Identifier: Apache-2.0
#include "read/engine.h"

#include <algorithm>
#include <chrono>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "base/thread_name.h"
#include "counters/record.h"

namespace dlfeed::inline DLFEED_ABI::detail {
namespace {

using counters::Component;
using CId = counters::Id;

uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t wall_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// user_data: the batch's pointer, with the read's index in the top 16 bits
// (x86-64 and AArch64 user pointers fit in 48 bits) so a completion names
// its read for the trace; 0xFFFF: not traced (a read's later pieces).
constexpr unsigned kIndexShift = 48;
constexpr uint64_t kPtrMask = (uint64_t{1} << kIndexShift) - 1;
constexpr uint64_t kUntraced = 0xFFFF;

ReadBatch* batch_of(uint64_t user_data) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the pointer travels tagged in io_uring's 64-bit user_data
  return reinterpret_cast<ReadBatch*>(user_data & kPtrMask);
}

}  // namespace

bool BusyMeter::update(uint64_t wall_ns, uint64_t cpu_ns, uint64_t reads, uint64_t hits) {
  if (!due(wall_ns)) return false;
  const uint64_t permille = (cpu_ns - cpu_) * 1000 / (wall_ns - wall_);
  busy_.store(static_cast<uint32_t>(std::min<uint64_t>(permille, 1000)), std::memory_order_relaxed);
  const uint64_t window_reads = reads - reads_;
  const uint64_t window_hits = hits - hits_total_;
  const uint32_t share =
      window_reads ? static_cast<uint32_t>(std::min<uint64_t>(window_hits * 1000 / window_reads, 1000)) : 0;
  hits_.store(share, std::memory_order_relaxed);
  if (window_reads) last_hits_.store(share, std::memory_order_relaxed);
  wall_ = wall_ns;
  cpu_ = cpu_ns;
  reads_ = reads;
  hits_total_ = hits;
  return true;
}

size_t Spreader::pick(std::span<const Load> loads, uint64_t index, bool always) {
  if (loads.size() <= 1) return 0;
  if (!spreading_) {
    spreading_ = loads[0].busy_permille >= kOnBusy && loads[0].hits_permille >= kOnHits;
  } else {
    uint32_t busy = 0, hits = 0;
    for (const Load& l : loads) {
      busy += l.busy_permille;
      hits = std::max(hits, l.hits_permille);
    }
    spreading_ = busy >= kOffBusy && hits >= kOffHits;
  }
  if (always) spreading_ = true;
  if (!spreading_) return 0;
  return index % loads.size();
}

void accumulate(IoStats& a, const IoStats& b) {
  a.requests += b.requests;
  a.completions += b.completions;
  a.errors += b.errors;
  a.bytes += b.bytes;
  a.device_bytes += b.device_bytes;
  a.reads += b.reads;
  a.retries += b.retries;
  a.short_reads += b.short_reads;
  a.eagain += b.eagain;
  a.eintr += b.eintr;
  a.submit_calls += b.submit_calls;
  a.peak_bytes_in_kernel = std::max(a.peak_bytes_in_kernel, b.peak_bytes_in_kernel);
  a.completed_at_submit += b.completed_at_submit;
  a.handed_off += b.handed_off;
}

IoEngine::IoEngine(std::unique_ptr<IoBackend> backend, counters::Counters* counters, uint64_t max_piece,
                   uint32_t number, uint64_t split_above, uint64_t split_piece, uint64_t split_piece_cold,
                   uint64_t large_above, uint64_t large_piece)
    : backend_(std::move(backend)),
      counters_(counters),
      max_piece_(max_piece),
      split_above_(split_above),
      split_piece_(split_piece),
      split_piece_cold_(split_piece_cold),
      large_above_(large_above),
      large_piece_(large_piece),
      number_(number) {
  thread_ = std::thread([this] { loop(); });
  name_thread(thread_, number_ == 0 ? "dlfeed-io" : absl::StrCat("dlfeed-io", number_).c_str());
}

IoEngine::~IoEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  // Reads that wait on a network end now, as errors of batches nobody takes.
  backend_->cancel();
  cv_.notify_all();
  thread_.join();
}

void IoEngine::submit(std::shared_ptr<ReadBatch> batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(batch));
  }
  cv_.notify_all();
}

void IoEngine::cancel_pending() {
  std::deque<std::shared_ptr<ReadBatch>> drop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.store(true, std::memory_order_release);
    drop.swap(pending_);
  }
  for (auto& b : drop) b->done(absl::CancelledError("epoch cancelled"));
  // Reads in the backend that wait on a network end soon too (as errors of
  // batches nobody takes); a file's finish as they are.
  backend_->cancel();
}

void IoEngine::resume() { cancelled_.store(false, std::memory_order_release); }

// One read as requests of at most max_piece_ bytes (split_piece_ for a read
// longer than split_above_, large_piece_ handed off for one of at least
// large_above_); the first carries `user_data` (it stands for the read in the
// counters' trace), the rest `rest`.
void IoEngine::add_pieces(std::vector<ReadRequest>& reqs, const ReadRequest& r, uint64_t user_data,
                          uint64_t rest) const {
  uint64_t piece = max_piece_ ? max_piece_ : r.length;
  const bool large = large_above_ != 0 && large_piece_ != 0 && r.length >= large_above_ && r.piece_count == 0;
  if (large) {
    // Copies of this size outweigh a hand-off to a kernel worker many times
    // over (a 2 MiB copy is ~0.3 ms, a hand-off some microseconds). Marked
    // warm or cold: the io_uring backend hands them off only while the page
    // cache holds them (src/io/uring_backend.cc).
    piece = max_piece_ ? std::min(large_piece_, max_piece_) : large_piece_;  // max_read still bounds a read
  } else if (split_above_ != 0 && split_piece_ != 0 && r.length > split_above_) {
    // Cold (the last window's reads mostly waited on the device, or none
    // yet): the smaller piece.
    const bool cold = split_piece_cold_ != 0 && meter_.last_hits_permille() < kWarmHits;
    piece = std::min(piece, cold ? split_piece_cold_ : split_piece_);
  }
  if (r.piece_count > 0) {  // scattered: one read, never in pieces
    reqs.push_back(r);
    reqs.back().user_data = user_data;
    return;
  }
  // A checksum is of a whole read: one that goes in pieces asks for none
  // (its reader takes the CRC from the bytes).
  const bool checksum = r.checksum && r.length <= piece;
  uint64_t at = 0;
  do {
    const uint64_t n = std::min(piece, r.length - at);
    reqs.push_back({r.file, r.offset + at, n, r.dest + at, at == 0 ? user_data : rest, checksum});
    reqs.back().hand_off = large;
    reqs.back().use_at = r.use_at;
    at += n;
  } while (at < r.length);
}

// When a batch's large reads (those in pieces, large_runs_) are of at least
// two files: its other requests in their order, then the large reads'
// pieces in turns of kInterleaveBytes from each file in turn (a file's
// large reads one after the other, in their order, as one stream), so that
// the batch's files are read side by side (each with the kernel's
// read-ahead) rather than one after the other. Cold, on the 2-core VM's
// virtual disk, 16 and 64 MiB one-sample files read at 1.06-1.45 times the
// file-by-file order in the medians of runs side by side, 0.81-1.19 times in
// their total time (some 64 MiB runs are slow); turns of one 2 MiB piece
// swung more widely (bench/results/vm-2026-11-30-interleave).
void IoEngine::interleave_large(std::vector<ReadRequest>& reqs) {
  // The files' streams: each a list of runs, in first-seen order.
  streams_.clear();
  for (const auto& [begin, end] : large_runs_) {
    const uint32_t file = reqs[begin].file;
    auto it = std::find_if(streams_.begin(), streams_.end(), [&](const Stream& st) { return st.file == file; });
    if (it == streams_.end()) {
      streams_.push_back({file, {}, 0});
      it = std::prev(streams_.end());
    }
    it->runs.emplace_back(begin, end);
    it->pieces += end - begin;
  }
  if (streams_.size() < 2) return;
  scratch_.clear();
  scratch_.reserve(reqs.size());
  size_t at = 0;
  for (const auto& [begin, end] : large_runs_) {
    scratch_.insert(scratch_.end(), reqs.begin() + static_cast<ptrdiff_t>(at),
                    reqs.begin() + static_cast<ptrdiff_t>(begin));
    at = end;
  }
  scratch_.insert(scratch_.end(), reqs.begin() + static_cast<ptrdiff_t>(at), reqs.end());
  // Pieces of large reads are of one length (large_piece, within max_piece)
  // but each read's last.
  const size_t turn = std::max<size_t>(1, kInterleaveBytes / std::max<uint64_t>(1, reqs[large_runs_[0].first].length));
  size_t longest = 0;
  for (const Stream& st : streams_) longest = std::max(longest, st.pieces);
  for (size_t step = 0; step < longest; step += turn) {
    for (Stream& st : streams_) {
      // The stream's next `turn` pieces, across its runs.
      for (size_t left = turn; left > 0 && !st.runs.empty();) {
        auto& [begin, end] = st.runs.front();
        const size_t n = std::min(left, end - begin);
        scratch_.insert(scratch_.end(), reqs.begin() + static_cast<ptrdiff_t>(begin),
                        reqs.begin() + static_cast<ptrdiff_t>(begin + n));
        begin += n;
        left -= n;
        if (begin == end) st.runs.erase(st.runs.begin());
      }
    }
  }
  // Every request once (always): else the order as it came, never one lost.
  if (scratch_.size() == reqs.size()) reqs.swap(scratch_);
}

void IoEngine::start_batch(const std::shared_ptr<ReadBatch>& b, std::vector<ReadRequest>& reqs) {
  if (cancelled_.load(std::memory_order_acquire)) {  // its epoch was given up
    b->done(absl::CancelledError("epoch cancelled"));
    return;
  }
  if (b->reads.empty()) {
    b->done(absl::OkStatus());
    return;
  }
  reqs.clear();
  const uint64_t ptr = reinterpret_cast<uint64_t>(b.get());
  const uint64_t untagged = ptr | (kUntraced << kIndexShift);
  uint64_t k = 0;
  large_runs_.clear();
  for (const ReadRequest& r : b->reads) {
    const uint64_t index = std::min<uint64_t>(k++, kUntraced);
    const size_t begin = reqs.size();
    if (r.checksum && (index == kUntraced || index >= b->crcs.size())) {  // no place for its CRC
      ReadRequest plain = r;
      plain.checksum = false;
      add_pieces(reqs, plain, ptr | (index << kIndexShift), untagged);
    } else {
      add_pieces(reqs, r, ptr | (index << kIndexShift), untagged);
    }
    if (reqs.size() - begin > 1 && reqs[begin].hand_off) large_runs_.emplace_back(begin, reqs.size());
  }
  if (large_runs_.size() > 1) interleave_large(reqs);
  Active a{b, reqs.size(), absl::OkStatus(), 0};
  // The I/O interval opens as it is stamped, before the submit: opened after
  // it with the earlier stamp, a stall or compute span begun meanwhile
  // counted I/O from before it began (io_exposed above io_busy).
  DLFEED_REC({
    a.submit_ns = now_of(*counters_);
    counters_->interval_begin(Component::kIo, a.submit_ns);
  });
  absl::Status st = backend_->submit(reqs);
  if (!st.ok()) {
    DLFEED_REC(counters_->interval_end(Component::kIo, now_of(*counters_)));
    b->done(st);
    return;
  }
  // Given up while these went in: they end as the others did.
  if (cancelled_.load(std::memory_order_acquire)) backend_->cancel();
  DLFEED_REC({
    if (staged_ != nullptr) {
      uint64_t staged_bytes = 0;
      for (const ReadRequest& q : reqs) {
        if (q.file < staged_n_ && staged_[q.file].load(std::memory_order_relaxed)) staged_bytes += q.length;
      }
      if (staged_bytes) counters_->add(CId::kBytesReadStaged, staged_bytes);
    }
  });
  active_[b.get()] = std::move(a);
}

void IoEngine::loop() {
  name_thread_once(*counters_, number_ == 0 ? "dlfeed io engine" : "dlfeed io engine (more)");
  meter_.start(wall_ns(), thread_cpu_ns());
  std::vector<ReadRequest> reqs;
  std::vector<ReadCompletion> done;
  while (true) {
    std::deque<std::shared_ptr<ReadBatch>> take;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (active_.empty()) {
        cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      }
      stopping = stop_;
      take.swap(pending_);
    }
    if (const uint64_t wall = wall_ns(); meter_.due(wall)) {
      const IoStats& now = stats_;  // written by this thread only
      // Reads handed to kernel workers never complete at submit: they say
      // nothing of the cache, so they are left out of its share.
      meter_.update(wall, thread_cpu_ns(), now.reads - now.handed_off, now.completed_at_submit);
    }
    if (stopping) {
      for (auto& b : take) b->done(absl::CancelledError("loader destroyed"));
      if (active_.empty()) break;
      take.clear();
    }
    for (auto& b : take) start_batch(b, reqs);
    if (backend_->in_flight() > 0) {
      done.clear();
      backend_->reap(done, 1, std::chrono::milliseconds(1));
      {
        // Before any batch's done(): a consumer that sees its batch also
        // sees its bytes in stats() (Loader::stats, at the end of an epoch).
        std::lock_guard<std::mutex> lock(stats_mu_);
        stats_ = backend_->stats();
      }
      [[maybe_unused]] const uint64_t t_reap = now_of(*counters_);
      [[maybe_unused]] const bool tracing = counters_->tracing();
      for (const ReadCompletion& c : done) {
        auto it = active_.find(batch_of(c.user_data));
        if (it == active_.end()) continue;
        Active& a = it->second;
        DLFEED_REC({
          const uint64_t lat = t_reap > a.submit_ns ? t_reap - a.submit_ns : 0;
          counters_->sample(CId::kIoLatency, lat);
          counters_->add(CId::kIoOperations, 1);
          if (c.status.ok()) {
            counters_->add(CId::kBytesRead, c.bytes);
          } else {
            counters_->add(CId::kReadErrors, 1);
          }
          const uint64_t k = c.user_data >> kIndexShift;
          if (tracing && k < kUntraced && k < a.batch->reads.size() && sampled_++ % counters_->io_sample_every() == 0) {
            const ReadRequest& r = a.batch->reads[k];
            counters_->trace("read", "io", a.submit_ns, lat, r.file, r.offset, r.length);
          }
        });
        if (!c.status.ok() && a.status.ok()) a.status = c.status;
        if (c.has_crc32c) {
          const uint64_t k = c.user_data >> kIndexShift;
          if (k < a.batch->crcs.size() && k < a.batch->crc_known.size()) {
            a.batch->crcs[k] = c.crc32c;
            a.batch->crc_known[k] = 1;
          }
        }
        if (--a.left == 0) {
          a.batch->done(a.status);
          active_.erase(it);
          DLFEED_REC(counters_->interval_end(Component::kIo, t_reap));
        }
      }
    }
  }
  // Stopping: every read handed to the backend has completed (active_ is empty).
}

uint32_t EngineSet::active() const {
  const uint32_t n = active_.load(std::memory_order_relaxed);
  const auto all = static_cast<uint32_t>(engines_.size());
  return n == 0 || n > all ? all : n;
}

uint32_t EngineSet::active_busy_permille() const {
  const uint32_t n = active();
  if (n == 0) return 0;
  uint64_t busy = 0;
  for (uint32_t k = 0; k < n; ++k) busy += engines_[k]->busy_permille();
  return static_cast<uint32_t>(busy / n);
}

void EngineSet::submit(uint64_t index, std::shared_ptr<ReadBatch> batch) {
  size_t k = 0;
  const uint32_t n = active();
  if (n > 1) {
    loads_.clear();
    for (uint32_t j = 0; j < n; ++j) loads_.push_back(engines_[j]->load());
    k = spreader_.pick(loads_, index, spread_always_);
    if (k != 0) spread_.fetch_add(1, std::memory_order_relaxed);
  }
  engines_[k]->submit(std::move(batch));
}

void EngineSet::cancel_pending() {
  for (auto& e : engines_) e->cancel_pending();
}

void EngineSet::resume() {
  for (auto& e : engines_) e->resume();
}

void EngineSet::set_staged_flags(const std::atomic<uint8_t>* flags, size_t n) {
  for (auto& e : engines_) e->set_staged_flags(flags, n);
}

IoStats EngineSet::stats() const {
  IoStats io;
  for (const auto& e : engines_) accumulate(io, e->stats());
  return io;
}

}  // namespace dlfeed::detail
