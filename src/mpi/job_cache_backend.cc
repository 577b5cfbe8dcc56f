// SPDX-License-Identifier: Apache-2.0
// The job cache's I/O backend (job_cache_state.h): a read whose bytes are all
// held extents that are filled is served from the cache (this rank's part and
// those of its node's ranks that share its memory by memcpy, another rank's
// by MPI_Get); any other read goes to the files, and the held extents of this
// rank that it brings are kept.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/io/io_backend.h"
#include "job_cache_state.h"

namespace dlfeed::inline DLFEED_ABI::mpi {
namespace {

using Clock = std::chrono::steady_clock;

// The part of held extent `x` a read covers: bytes [start, start + length) of
// the extent, at `rel` bytes into the read.
struct Segment {
  const HeldExtent* x = nullptr;
  uint64_t start = 0, length = 0, rel = 0;
};

// The held extents that [offset, offset + length) overlaps, in order, and
// whether they cover it without a gap.
bool overlap(const std::vector<HeldExtent>& held, uint64_t offset, uint64_t length, std::vector<Segment>& out) {
  out.clear();
  const uint64_t end = offset + length;
  auto it =
      std::upper_bound(held.begin(), held.end(), offset, [](uint64_t v, const HeldExtent& x) { return v < x.offset; });
  if (it != held.begin()) --it;
  uint64_t at = offset;
  bool covered = true;
  for (; it != held.end() && it->offset < end; ++it) {
    const uint64_t x_end = it->offset + it->length;
    if (x_end <= offset) continue;
    const uint64_t a = std::max(offset, it->offset), b = std::min(end, x_end);
    if (a != at) covered = false;
    out.push_back({&*it, a - it->offset, b - a, a - offset});
    at = b;
  }
  return covered && at == end;
}

// Calls fn(dest, n) for the destination bytes [rel, rel + n) of `r`, in order.
template <class F>
void for_each_dest(const ReadRequest& r, uint64_t rel, uint64_t n, F&& fn) {
  if (r.piece_count == 0) {
    fn(r.dest + rel, n);
    return;
  }
  uint64_t at = 0;
  for (uint32_t i = 0; i < r.piece_count && n > 0; ++i) {
    const ReadPiece& p = r.pieces[i];
    if (rel < at + p.length) {
      const uint64_t skip = rel - at, take = std::min(n, p.length - skip);
      fn(p.dest + skip, take);
      rel += take;
      n -= take;
    }
    at += p.length;
  }
}

uint64_t* stamp_at(std::byte* base, uint64_t slot) {
  return reinterpret_cast<uint64_t*>(base + slot);  // 8-aligned: windows and slots are
}

class CacheBackend final : public IoBackend {
 public:
  CacheBackend(std::shared_ptr<JobCache::State> s, std::shared_ptr<FileTable> files, std::unique_ptr<IoBackend> inner)
      : s_(std::move(s)), files_(std::move(files)), inner_(std::move(inner)) {}
  ~CacheBackend() override {
    inner_.reset();  // drops the reads in flight (their buffers are still here)
    for (const auto& [slot, fill] : fills_) s_->fill_started[fill.x->index].store(0, std::memory_order_release);
  }
  CacheBackend(const CacheBackend&) = delete;
  CacheBackend& operator=(const CacheBackend&) = delete;

  absl::Status submit(std::span<const ReadRequest> requests) override {
    for (const ReadRequest& r : requests) {
      if (r.file >= files_->size())
        return absl::InvalidArgumentError(absl::StrCat("job cache: unknown file id ", r.file));
      if (r.length > 0 && r.dest == nullptr && r.piece_count == 0) {
        return absl::InvalidArgumentError(absl::StrCat("job cache: null dest for ", files_->path(r.file)));
      }
      if (absl::Status st = check_pieces(r); !st.ok()) return st;
    }
    std::shared_lock<std::shared_mutex> lock(s_->window_mu);  // close() waits for this batch's window work
    const bool open = s_->open.load(std::memory_order_acquire);
    // Which reads the cache can serve, once unknown peers' stamps are read.
    plans_.assign(requests.size(), Plan{});
    stamps_.clear();
    for (size_t i = 0; i < requests.size(); ++i) {
      const ReadRequest& r = requests[i];
      const std::vector<HeldExtent>* held = open ? held_of(r.file) : nullptr;
      if (held == nullptr || r.length == 0) continue;
      Plan& p = plans_[i];
      p.first = segs_.size();
      p.covered = overlap(*held, r.offset, r.length, seg_scratch_);
      segs_.insert(segs_.end(), seg_scratch_.begin(), seg_scratch_.end());
      p.last = segs_.size();
      for (size_t k = p.first; k < p.last; ++k) {
        const HeldExtent& x = *segs_[k].x;
        if (x.holder == s_->rank || s_->filled[x.index].load(std::memory_order_acquire) != 0) continue;
        if (const std::byte* at = s_->load_base[static_cast<size_t>(x.holder)]; at != nullptr) {
          check_stamp(x, load_stamp(at, x.slot));  // a part this rank maps: a plain load
        } else {
          stamps_.push_back({&x, 0});
        }
      }
    }
    if (!stamps_.empty()) read_stamps();
    absl::Status st = serve(requests);
    segs_.clear();
    return st;
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_completions, std::chrono::nanoseconds timeout) override {
    const auto deadline =
        timeout == std::chrono::nanoseconds::max() ? Clock::time_point::max() : Clock::now() + timeout;
    size_t n = 0;
    while (true) {
      while (!ready_.empty()) {
        out.push_back(std::move(ready_.front()));
        ready_.pop_front();
        ++n;
      }
      if (inner_->in_flight() == 0) return n;
      const size_t want = min_completions > n ? min_completions - n : 0;
      const auto now = Clock::now();
      const auto left = want == 0 || now >= deadline ? std::chrono::nanoseconds::zero()
                        : deadline == Clock::time_point::max()
                            ? std::chrono::nanoseconds::max()
                            : std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
      got_.clear();
      inner_->reap(got_, want, left);
      for (ReadCompletion& c : got_) n += take(c, out);
      // Done when enough, out of time, or only this backend's own fills are left.
      if (n >= min_completions || left == std::chrono::nanoseconds::zero() || Clock::now() >= deadline ||
          in_flight() == ready_.size()) {
        return n;
      }
    }
  }

  // Fill reads are this backend's own, and a split read is one for the caller.
  size_t in_flight() const override {
    return ready_.size() + inner_->in_flight() - fills_.size() - (sub_parent_.size() - parents_.size());
  }
  void cancel() override { inner_->cancel(); }
  std::string name() const override { return "job_cache+" + inner_->name(); }
  IoStats stats() const override {
    IoStats st = inner_->stats();
    st.requests += served_;
    st.completions += served_;
    st.bytes += served_bytes_;
    return st;
  }

 private:
  struct Plan {
    size_t first = 0, last = 0;
    bool covered = false;
  };
  struct StampRead {
    const HeldExtent* x = nullptr;
    uint64_t value = 0;
  };

  absl::Status check_pieces(const ReadRequest& r) const {
    if (r.piece_count == 0) return absl::OkStatus();
    uint64_t sum = 0;
    bool null = false;
    for (uint32_t i = 0; i < std::min(r.piece_count, kMaxReadPieces); ++i) {
      sum += r.pieces[i].length;
      null = null || (r.pieces[i].dest == nullptr && r.pieces[i].length > 0);
    }
    if (r.pieces == nullptr || r.piece_count > kMaxReadPieces || sum != r.length || null ||
        (r.checksum && r.checksum_piece >= r.piece_count)) {
      return absl::InvalidArgumentError(absl::StrCat("job cache: a scattered read of ", files_->path(r.file),
                                                     " at offset ", r.offset, " with ", r.piece_count,
                                                     " pieces that do not add up to its ", r.length, " bytes"));
    }
    return absl::OkStatus();
  }

  const std::vector<HeldExtent>* held_of(uint32_t file) {
    if (!s_->plan_ready.load(std::memory_order_acquire)) return nullptr;  // no epoch started yet: the files
    if (file >= by_id_.size()) {
      by_id_.resize(file + 1, nullptr);
      looked_.resize(file + 1, 0);
    }
    if (!looked_[file]) {
      by_id_[file] = s_->extents_of(files_->path(file));
      looked_[file] = 1;
    }
    return by_id_[file];
  }

  // One round: the stamps of peers' extents not yet seen filled.
  void read_stamps() {
    const auto t0 = Clock::now();
    for (StampRead& sr : stamps_) {
      MPI_Get(&sr.value, 8, MPI_BYTE, sr.x->holder, static_cast<MPI_Aint>(sr.x->slot), 8, MPI_BYTE, s_->win);
    }
    MPI_Win_flush_all(s_->win);
    MPI_Win_sync(s_->win);  // the stamps seen before the bytes they vouch for are read
    note_round(t0, "job_cache_stamps", stamps_.size(), stamps_.size() * 8);
    for (const StampRead& sr : stamps_) check_stamp(*sr.x, sr.value);
  }

  // A peer's extent is filled once its stamp is there: read from it from now on.
  void check_stamp(const HeldExtent& x, uint64_t value) {
    if (value == s_->stamp_of(x)) s_->filled[x.index].store(1, std::memory_order_release);
  }

  // The stamp at `slot` of a part mapped here; its bytes are read after it.
  static uint64_t load_stamp(const std::byte* part, uint64_t slot) {
    return std::atomic_ref<uint64_t>(*stamp_at(const_cast<std::byte*>(part), slot)).load(std::memory_order_acquire);
  }

  // A round of gets (`what`: the stamps, or the bytes of `bytes` bytes) that began at t0.
  void note_round(Clock::time_point t0, const char* what, uint64_t gets, uint64_t bytes) {
    const auto ns =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
    if (counters::Counters* c = s_->trace.load(std::memory_order_acquire); c != nullptr && c->tracing()) {
      const uint64_t end = c->now();
      c->trace(what, "job_cache", end - std::min(end, ns), ns, gets, bytes);
    }
    s_->remote_gets.fetch_add(1, std::memory_order_relaxed);
    s_->remote_ns.fetch_add(ns, std::memory_order_relaxed);
    uint64_t prev = s_->remote_ns_max.load(std::memory_order_relaxed);
    while (prev < ns && !s_->remote_ns_max.compare_exchange_weak(prev, ns, std::memory_order_relaxed)) {}
  }

  bool available(const Plan& p) const {
    if (!p.covered) return false;
    for (size_t k = p.first; k < p.last; ++k) {
      if (s_->filled[segs_[k].x->index].load(std::memory_order_acquire) == 0) return false;
    }
    return true;
  }

  absl::Status serve(std::span<const ReadRequest> requests) {
    forward_.clear();
    gets_ = false;
    round_gets_ = round_bytes_ = 0;
    const auto t0 = Clock::now();
    for (size_t i = 0; i < requests.size(); ++i) {
      const ReadRequest& r = requests[i];
      const Plan& p = plans_[i];
      if (!available(p)) {
        if (!split(r, p, i)) forward_whole(r, p);
        continue;
      }
      for (size_t k = p.first; k < p.last; ++k) copy_in(r, segs_[k]);
      complete_served(r, i);
    }
    if (gets_) {
      MPI_Win_flush_all(s_->win);
      note_round(t0, "job_cache_gets", round_gets_, round_bytes_);
    }
    // Checksums once the bytes are all there.
    for (const auto& [at, i] : crc_due_) set_crc(requests[i], ready_[at]);
    crc_due_.clear();
    if (!forward_.empty()) submit_forward();
    return absl::OkStatus();
  }

  // Read `i` of the batch is all from the cache: its completion is ready
  // (its checksum taken after the batch's flush).
  void complete_served(const ReadRequest& r, size_t i) {
    served_ += 1;
    served_bytes_ += r.length;
    ReadCompletion c;
    c.user_data = r.user_data;
    c.bytes = r.length;
    if (r.checksum) crc_due_.emplace_back(ready_.size(), i);
    ready_.push_back(std::move(c));
  }

  // The bytes of segment `g` of `r` from its holder: this rank's part and
  // those mapped here by memcpy, another's by MPI_Get (complete at the
  // batch's flush).
  void copy_in(const ReadRequest& r, const Segment& g) {
    const uint64_t from = g.x->slot + 8 + g.start;
    if (const std::byte* part = s_->load_base[static_cast<size_t>(g.x->holder)]; part != nullptr) {
      const std::byte* src = part + from;
      for_each_dest(r, g.rel, g.length, [&](std::byte* d, uint64_t n) {
        std::memcpy(d, src, n);
        src += n;
      });
      (g.x->holder == s_->rank ? s_->bytes_read_local : s_->bytes_read_node)
          .fetch_add(g.length, std::memory_order_relaxed);
      return;
    }
    uint64_t disp = from;
    for_each_dest(r, g.rel, g.length, [&](std::byte* d, uint64_t n) {
      while (n > 0) {
        const int count = static_cast<int>(std::min<uint64_t>(n, 1u << 30));
        MPI_Get(d, count, MPI_BYTE, g.x->holder, static_cast<MPI_Aint>(disp), count, MPI_BYTE, s_->win);
        d += count;
        disp += static_cast<uint64_t>(count);
        n -= static_cast<uint64_t>(count);
      }
    });
    gets_ = true;
    round_gets_ += 1;
    round_bytes_ += g.length;
    const bool same_node = s_->node_of[static_cast<size_t>(g.x->holder)] == s_->node_of[static_cast<size_t>(s_->rank)];
    (same_node ? s_->bytes_read_node : s_->bytes_read_peers).fetch_add(g.length, std::memory_order_relaxed);
  }

  static void set_crc(const ReadRequest& r, ReadCompletion& c) {
    const std::byte* d = r.piece_count > 0 ? r.pieces[r.checksum_piece].dest : r.dest;
    const uint64_t n = r.piece_count > 0 ? r.pieces[r.checksum_piece].length : r.length;
    c.crc32c = detail::crc32c_extend(0, d, n);
    c.has_crc32c = true;
  }

  // Held bytes of `x` a read takes from the files: missed, but for this
  // rank's own not kept yet (the read keeps them).
  void count_missed(const HeldExtent& x, uint64_t n) {
    if (x.holder != s_->rank || s_->filled[x.index].load(std::memory_order_acquire) != 0) {
      s_->bytes_missed.fetch_add(n, std::memory_order_relaxed);
    }
  }

  void forward_whole(const ReadRequest& r, const Plan& p) {
    for (size_t k = p.first; k < p.last; ++k) count_missed(*segs_[k].x, segs_[k].length);
    s_->bytes_read_source.fetch_add(r.length, std::memory_order_relaxed);
    ReadRequest f = r;
    f.user_data = next_slot_++;
    pending_.emplace(f.user_data, r);
    forward_.push_back(f);
    for (size_t k = p.first; k < p.last; ++k) start_fill(r.file, *segs_[k].x);
  }

  // A read partly held and filled: the filled segments from the cache, the
  // rest in reads of the files of its own; one completion when all are in.
  // False (nothing done) for a scattered read or one with no filled segment.
  bool split(const ReadRequest& r, const Plan& p, size_t i) {
    auto usable = [&](const Segment& g) { return s_->filled[g.x->index].load(std::memory_order_acquire) != 0; };
    if (r.piece_count > 0 || std::none_of(segs_.begin() + static_cast<std::ptrdiff_t>(p.first),
                                          segs_.begin() + static_cast<std::ptrdiff_t>(p.last), usable)) {
      return false;
    }
    const uint64_t parent = next_slot_++;
    parents_.emplace(parent, Parent{r, 0, absl::OkStatus()});
    uint64_t at = 0;
    for (size_t k = p.first; k < p.last; ++k) {
      const Segment& g = segs_[k];
      if (!usable(g)) {
        count_missed(*g.x, g.length);
        start_fill(r.file, *g.x);
        continue;
      }
      if (g.rel > at) add_sub(parent, r, at, g.rel - at);
      copy_in(r, g);
      at = g.rel + g.length;
    }
    if (at < r.length) add_sub(parent, r, at, r.length - at);
    if (parents_[parent].left == 0) {
      // Every segment was filled by now (another engine kept the last one since
      // available() looked): served whole from the cache.
      parents_.erase(parent);
      complete_served(r, i);
    }
    return true;
  }

  void add_sub(uint64_t parent, const ReadRequest& r, uint64_t at, uint64_t n) {
    ReadRequest f = r;
    f.offset = r.offset + at;
    f.length = n;
    f.dest = r.dest + at;
    f.checksum = false;
    f.hand_off = false;
    f.user_data = next_slot_++;
    pending_.emplace(f.user_data, f);
    sub_parent_.emplace(f.user_data, parent);
    parents_[parent].left += 1;
    s_->bytes_read_source.fetch_add(n, std::memory_order_relaxed);
    forward_.push_back(f);
  }

  // A part of `parent` is done (`st`); its completion once all are.
  void sub_done(uint64_t parent, const absl::Status& st, std::vector<ReadCompletion>* out) {
    const auto it = parents_.find(parent);
    Parent& p = it->second;
    if (!st.ok() && p.status.ok()) p.status = st;
    if (--p.left > 0) return;
    ReadCompletion c;
    c.user_data = p.r.user_data;
    c.status = p.status;
    c.bytes = p.status.ok() ? p.r.length : 0;
    if (p.status.ok() && p.r.checksum) set_crc(p.r, c);
    if (out != nullptr) {
      out->push_back(std::move(c));
    } else {
      ready_.push_back(std::move(c));
    }
    parents_.erase(it);
  }

  void submit_forward() {
    absl::Status st = inner_->submit(forward_);
    if (st.ok()) return;
    // The files' backend refused the batch: each read is an error completion.
    for (const ReadRequest& f : forward_) {
      const absl::Status err(st.code(), absl::StrCat(files_->path(f.file), ": ", st.message()));
      if (const auto fill = fills_.find(f.user_data); fill != fills_.end()) {
        s_->fill_started[fill->second.x->index].store(0, std::memory_order_release);
        fills_.erase(fill);
        continue;
      }
      const auto it = pending_.find(f.user_data);
      if (const auto sub = sub_parent_.find(f.user_data); sub != sub_parent_.end()) {
        const uint64_t parent = sub->second;
        sub_parent_.erase(sub);
        pending_.erase(it);
        sub_done(parent, err, nullptr);
        continue;
      }
      ReadCompletion c;
      c.user_data = it->second.user_data;
      c.status = err;
      ready_.push_back(std::move(c));
      pending_.erase(it);
    }
  }

  // One completion from the files: a fill (kept, not handed on) or a caller's read.
  size_t take(ReadCompletion& c, std::vector<ReadCompletion>& out) {
    if (const auto f = fills_.find(c.user_data); f != fills_.end()) {
      const HeldExtent& x = *f->second.x;
      bool kept = false;
      if (c.status.ok()) {
        std::shared_lock<std::shared_mutex> lock(s_->window_mu);
        if (s_->open.load(std::memory_order_acquire)) {
          std::memcpy(s_->base + x.slot + 8, f->second.bytes.data(), x.length);
          filled(x);
          kept = true;
        }
      }
      if (!kept) s_->fill_started[x.index].store(0, std::memory_order_release);  // a later read tries again
      fills_.erase(f);
      return 0;
    }
    const auto it = pending_.find(c.user_data);
    if (it == pending_.end()) return 0;  // not ours: cannot happen
    const ReadRequest r = it->second;
    pending_.erase(it);
    if (const auto sub = sub_parent_.find(c.user_data); sub != sub_parent_.end()) {
      const uint64_t parent = sub->second;
      sub_parent_.erase(sub);
      if (c.status.ok()) keep(r);
      const size_t before = out.size();
      sub_done(parent, c.status, &out);
      return out.size() - before;
    }
    c.user_data = r.user_data;
    if (c.status.ok()) keep(r);
    out.push_back(std::move(c));
    return 1;
  }

  // A merged run of this rank's, first touched: read whole into its slot.
  void start_fill(uint32_t file, const HeldExtent& x) {
    if (!x.merged || x.holder != s_->rank || s_->filled[x.index].load(std::memory_order_acquire) != 0 ||
        s_->fill_started[x.index].exchange(1) != 0) {
      return;
    }
    // Into a buffer of its own, copied into the window when it is all in: the
    // kernel never writes into a window that close() may free meanwhile.
    Fill& fill = fills_[next_slot_];
    fill.x = &x;
    fill.bytes.resize(x.length);
    ReadRequest f;
    f.file = file;
    f.offset = x.offset;
    f.length = x.length;
    f.dest = fill.bytes.data();
    f.user_data = next_slot_++;
    s_->bytes_read_source.fetch_add(x.length, std::memory_order_relaxed);
    forward_.push_back(f);
  }

  // All of `x`'s bytes are in this rank's slot (the caller holds window_mu, shared).
  void filled(const HeldExtent& x) {
    // Once, whichever engine kept the last byte; this rank's own reads need only the flag.
    if (s_->filled[x.index].exchange(1, std::memory_order_acq_rel) != 0) return;
    if (s_->win != MPI_WIN_NULL) MPI_Win_sync(s_->win);  // the bytes before the stamp, for other ranks' gets
    // The release store orders them before it for the node's ranks, whose acquire load of it precedes their copy.
    std::atomic_ref<uint64_t>(*stamp_at(s_->base, x.slot)).store(s_->stamp_of(x), std::memory_order_release);
    s_->bytes_kept.fetch_add(x.length, std::memory_order_relaxed);
    s_->extents_kept.fetch_add(1, std::memory_order_relaxed);
  }

  // Keeps the bytes of a read from the files that belong to this rank's held extents.
  void keep(const ReadRequest& r) {
    std::shared_lock<std::shared_mutex> lock(s_->window_mu);
    if (!s_->open.load(std::memory_order_acquire)) return;
    const std::vector<HeldExtent>* held = held_of(r.file);
    if (held == nullptr) return;
    overlap(*held, r.offset, r.length, seg_scratch_);
    for (const Segment& g : seg_scratch_) {
      const HeldExtent& x = *g.x;
      if (x.merged || x.holder != s_->rank || s_->filled[x.index].load(std::memory_order_acquire) != 0) continue;
      std::byte* to = s_->base + x.slot + 8 + g.start;
      for_each_dest(r, g.rel, g.length, [&](std::byte* d, uint64_t n) {
        std::memcpy(to, d, n);
        to += n;
      });
      if (mark(x, g.start, g.length)) filled(x);
    }
  }

  // Records bytes [start, start + n) of `x` as written; true when all of it is.
  bool mark(const HeldExtent& x, uint64_t start, uint64_t n) {
    if (start == 0 && n == x.length) return true;
    std::lock_guard<std::mutex> lock(s_->fill_mu);
    auto& runs = s_->partial[x.index];
    runs.emplace_back(start, start + n);
    std::sort(runs.begin(), runs.end());
    std::vector<std::pair<uint64_t, uint64_t>> merged;
    for (const auto& [a, b] : runs) {
      if (!merged.empty() && a <= merged.back().second) {
        merged.back().second = std::max(merged.back().second, b);
      } else {
        merged.emplace_back(a, b);
      }
    }
    runs = std::move(merged);
    if (runs.size() == 1 && runs[0].first == 0 && runs[0].second >= x.length) {
      s_->partial.erase(x.index);
      return true;
    }
    return false;
  }

  std::shared_ptr<JobCache::State> s_;
  std::shared_ptr<FileTable> files_;
  std::unique_ptr<IoBackend> inner_;
  std::vector<const std::vector<HeldExtent>*> by_id_;
  std::vector<uint8_t> looked_;
  std::deque<ReadCompletion> ready_;
  absl::flat_hash_map<uint64_t, ReadRequest> pending_;  // forwarded slot -> the caller's request
  struct Fill {
    const HeldExtent* x = nullptr;
    std::vector<std::byte> bytes;
  };
  absl::flat_hash_map<uint64_t, Fill> fills_;  // fill reads in flight (a rehash moves a Fill, not its buffer)
  struct Parent {
    ReadRequest r;  // the caller's
    uint32_t left = 0;
    absl::Status status;
  };
  absl::flat_hash_map<uint64_t, Parent> parents_;       // split reads in flight
  absl::flat_hash_map<uint64_t, uint64_t> sub_parent_;  // a split read's part -> the read
  bool gets_ = false;                                   // this batch issued MPI_Gets
  uint64_t round_gets_ = 0, round_bytes_ = 0;           // ... this many, of this many bytes
  uint64_t next_slot_ = 0;
  uint64_t served_ = 0, served_bytes_ = 0;
  // Per submit (kept for their storage).
  std::vector<Plan> plans_;
  std::vector<Segment> segs_, seg_scratch_;
  std::vector<StampRead> stamps_;
  std::vector<ReadRequest> forward_;
  std::vector<std::pair<size_t, size_t>> crc_due_;  // (into ready_, into the batch)
  std::vector<ReadCompletion> got_;
};

}  // namespace

std::unique_ptr<IoBackend> make_cache_backend(std::shared_ptr<JobCache::State> state, std::shared_ptr<FileTable> files,
                                              std::unique_ptr<IoBackend> inner) {
  // What the source says it read is checked before it is kept: bytes kept
  // here go to other ranks, past any check of the loader's.
  std::unique_ptr<IoBackend> checked = make_checked_backend(std::move(inner), files);
  return std::make_unique<CacheBackend>(std::move(state), std::move(files), std::move(checked));
}

}  // namespace dlfeed::mpi
