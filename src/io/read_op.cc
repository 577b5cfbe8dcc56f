// SPDX-License-Identifier: Apache-2.0
#include "io/read_op.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI::detail {

namespace {

uint64_t align_down(uint64_t v) { return v & ~(kDirectAlign - 1); }
uint64_t align_up(uint64_t v) { return (v + kDirectAlign - 1) & ~(kDirectAlign - 1); }

std::atomic<ReadFaultInjector*> g_fault_injector{nullptr};

size_t round_capacity(size_t size) {
  size_t cap = kDirectAlign;
  while (cap < size) cap <<= 1;
  return cap;
}

}  // namespace

AlignedBuffer::AlignedBuffer(size_t capacity) : capacity_(capacity) {
  data_ = static_cast<std::byte*>(std::aligned_alloc(kDirectAlign, capacity));
  if (data_ == nullptr) throw std::bad_alloc();
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = std::exchange(o.data_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer BouncePool::take(size_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Smallest kept buffer that fits.
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].capacity() >= size && (best == free_.size() || free_[i].capacity() < free_[best].capacity())) {
        best = i;
      }
    }
    if (best != free_.size()) {
      AlignedBuffer buf = std::move(free_[best]);
      free_[best] = std::move(free_.back());
      free_.pop_back();
      return buf;
    }
  }
  return AlignedBuffer(round_capacity(size));
}

void BouncePool::give(AlignedBuffer buf) {
  if (buf.data() == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.size() < kMaxKept) free_.push_back(std::move(buf));
}

IoStats StatsCounters::snapshot() const {
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  IoStats s;
  s.requests = ld(requests);
  s.completions = ld(completions);
  s.errors = ld(errors);
  s.bytes = ld(bytes);
  s.device_bytes = ld(device_bytes);
  s.reads = ld(reads);
  s.short_reads = ld(short_reads);
  s.eagain = ld(eagain);
  s.eintr = ld(eintr);
  s.retries = s.short_reads + s.eagain + s.eintr;
  s.submit_calls = ld(submit_calls);
  s.peak_bytes_in_kernel = ld(peak_bytes_in_kernel);
  s.completed_at_submit = ld(completed_at_submit);
  s.handed_off = ld(handed_off);
  return s;
}

bool ReadOp::prepare(bool direct_mode, BouncePool* pool, std::byte* fixed_buf, uint64_t fixed_capacity) {
  direct = direct_mode;
  done = 0;
  if (!direct && req.piece_count > 0) {  // scattered: into the pieces (next_iovecs)
    target = nullptr;
    target_offset = req.offset;
    target_length = req.length;
    need = req.length;
    return false;
  }
  if (!direct) {
    target = req.dest;
    target_offset = req.offset;
    target_length = req.length;
    need = req.length;
    return false;
  }
  target_offset = align_down(req.offset);
  uint64_t end = align_up(req.offset + req.length);
  target_length = end - target_offset;
  need = req.offset + req.length - target_offset;
  bool aligned = req.piece_count == 0 && target_offset == req.offset && target_length == req.length &&
                 reinterpret_cast<uintptr_t>(req.dest) % kDirectAlign == 0;
  if (aligned) {
    target = req.dest;
    return false;
  }
  if (fixed_buf != nullptr && target_length <= fixed_capacity) {
    target = fixed_buf;
    return true;
  }
  bounce = pool->take(target_length);
  target = bounce.data();
  return false;
}

int ReadOp::next_iovecs() {
  int n = 0;
  uint64_t skip = done, budget = next_length();
  for (uint32_t k = 0; k < req.piece_count && budget > 0; ++k) {
    const ReadPiece& p = req.pieces[k];
    if (skip >= p.length) {
      skip -= p.length;
      continue;
    }
    const uint64_t len = std::min(p.length - skip, budget);
    iov[n++] = {p.dest + skip, static_cast<size_t>(len)};
    budget -= len;
    skip = 0;
  }
  return n;
}

uint64_t ReadOp::next_length() const {
  uint64_t left = target_length - done;
  return left < kMaxChunk ? left : kMaxChunk;
}

void set_read_fault_injector(ReadFaultInjector* injector) {
  g_fault_injector.store(injector, std::memory_order_release);
}

ReadOp::Step ReadOp::on_result(int64_t res, const FileTable& files, StatsCounters& stats) {
  if (ReadFaultInjector* inject = g_fault_injector.load(std::memory_order_acquire)) [[unlikely]] {
    res = inject->on_read(req, next_offset(), next_dest(), next_length(), direct, res);  // null dest: scattered
  }
  if (res < 0) {
    int err = static_cast<int>(-res);
    if (err == EINTR || err == EAGAIN) {
      StatsCounters::add(err == EINTR ? stats.eintr : stats.eagain);
      if (++retries <= kMaxRetries) return Step::kAgain;
    }
    status = io_error(files.path(req.file), next_offset(), direct ? "read (O_DIRECT)" : "read", err);
    return Step::kFailed;
  }
  done += static_cast<uint64_t>(res);
  StatsCounters::add(stats.device_bytes, static_cast<uint64_t>(res));
  if (done >= need) return Step::kDone;
  // With O_DIRECT a read ending off a block boundary means end of file: asking
  // again at an unaligned offset would only fail with EINVAL.
  bool eof = res == 0 || (direct && done % kDirectAlign != 0);
  if (!eof) {
    StatsCounters::add(stats.short_reads);
    return Step::kAgain;
  }
  uint64_t skip = req.offset - target_offset;
  uint64_t available = done > skip ? done - skip : 0;
  status = format_error(files.path(req.file), req.offset, absl::StrCat(req.length, " bytes"),
                        absl::StrCat("only ", available, " bytes before the end of the file (file shrank?)"));
  return Step::kFailed;
}

ReadCompletion ReadOp::finish(BouncePool* pool, StatsCounters& stats) {
  ReadCompletion c;
  c.user_data = req.user_data;
  if (status.ok()) {
    if (target != nullptr && target != req.dest && req.length > 0) {  // out of the bounce buffer
      copy_out(req, target + (req.offset - target_offset),
               [](std::byte* to, const std::byte* from, uint64_t n) { std::memcpy(to, from, n); });
    }
    c.bytes = req.length;
    StatsCounters::add(stats.bytes, req.length);
    take_checksum(req, c);  // now, while the bytes are in this core's caches
  } else {
    c.status = std::move(status);
    StatsCounters::add(stats.errors);
  }
  if (pool != nullptr) pool->give(std::move(bounce));
  pin.reset();
  StatsCounters::add(stats.completions);
  return c;
}

absl::Status validate_pieces(const std::string& path, const ReadRequest& r) {
  auto bad = [&](auto&&... what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": at offset ", r.offset, ": scattered read of ", r.length, " bytes: ", what...));
  };
  if (r.pieces == nullptr || r.piece_count > kMaxReadPieces) {
    return bad(r.piece_count, " pieces (at most ", kMaxReadPieces, ", and an array of them)");
  }
  uint64_t sum = 0;
  for (uint32_t k = 0; k < r.piece_count; ++k) {
    if (r.pieces[k].dest == nullptr && r.pieces[k].length > 0) return bad("piece ", k, " has no destination");
    sum += r.pieces[k].length;
  }
  if (sum != r.length) return bad("its pieces add up to ", sum, " bytes");
  if (r.checksum && r.checksum_piece >= r.piece_count) {
    return bad("checksum of piece ", r.checksum_piece, " of ", r.piece_count);
  }
  return absl::OkStatus();
}

void take_checksum(const ReadRequest& r, ReadCompletion& c) {
  if (!r.checksum) return;
  const ReadPiece whole{r.dest, r.length};
  const ReadPiece& p = r.piece_count > 0 ? r.pieces[r.checksum_piece] : whole;
  c.crc32c = crc32c(p.dest, p.length);
  c.has_crc32c = true;
}

absl::Status validate_requests(const FileTable& files, std::span<const ReadRequest> requests) {
  size_t n = files.size();
  for (size_t i = 0; i < requests.size(); ++i) {
    const ReadRequest& r = requests[i];
    if (r.file >= n) {
      return absl::InvalidArgumentError(absl::StrCat("read request ", i, " (user_data ", r.user_data,
                                                     "): unknown file id ", r.file, ", the table has ", n, " files"));
    }
    if (r.piece_count > 0) {
      DLFEED_RETURN_IF_ERROR(validate_pieces(files.path(r.file), r));
    } else if (r.dest == nullptr && r.length > 0) {
      return absl::InvalidArgumentError(absl::StrCat(files.path(r.file), ": at offset ", r.offset, ": read request of ",
                                                     r.length, " bytes has no destination"));
    }
    if (r.offset + r.length < r.offset) {
      return absl::InvalidArgumentError(absl::StrCat(files.path(r.file), ": at offset ", r.offset, ": read of ",
                                                     r.length, " bytes overflows the offset range"));
    }
  }
  return absl::OkStatus();
}

ReadCompletion failed_completion(const ReadRequest& req, const FileTable& files, absl::Status status,
                                 StatsCounters& stats) {
  const std::string prefix = absl::StrCat(files.path(req.file), ": ");
  if (absl::StartsWith(status.message(), prefix)) {
    status = absl::Status(status.code(),
                          absl::StrCat(prefix, "at offset ", req.offset, ": ", status.message().substr(prefix.size())));
  }
  StatsCounters::add(stats.errors);
  StatsCounters::add(stats.completions);
  return ReadCompletion{req.user_data, std::move(status), 0};
}

}  // namespace dlfeed::detail
