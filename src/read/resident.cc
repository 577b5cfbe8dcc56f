// SPDX-License-Identifier: Apache-2.0
#include "read/resident.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/exception_status.h"
#include "base/thread_name.h"
#include "batch/huge_pages.h"
#include "counters/record.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/io/object_store.h"
#include "io/read_op.h"
#include "io/stream_copy.h"

namespace dlfeed::inline DLFEED_ABI::detail {

namespace {
// Most threads reading files at create (each read mostly waits on the file
// system on a cold cache, as in the index build), and files per thread below
// which another is not worth starting.
constexpr unsigned kMaxLoadThreads = 16;
constexpr size_t kFilesPerLoadThread = 64;

// Objects, and files whose size the table knows, are read in pieces of at
// most this, many at once: a large object is several requests in flight
// (each within its time limit, each retried alone), a large file several
// threads' reads (one thread copies a few GB/s from the page cache); a small
// one a read.
constexpr uint64_t kPiece = 8u << 20;

// Runs fn(k) for k in [0, items) on up to `threads` threads (fewer if the
// system gives fewer); the error returned is the first failing item's in
// order, as a serial loop would give; items after a failure are skipped.
absl::Status run_in_parallel(size_t items, unsigned threads, const std::function<absl::Status(size_t)>& fn) {
  std::vector<absl::Status> failed(threads);
  std::vector<size_t> failed_at(threads, SIZE_MAX);
  std::atomic<size_t> next{0};
  std::atomic<size_t> first_failure{SIZE_MAX};
  auto work = [&](unsigned t) {
    try {
      for (size_t k = next.fetch_add(1); k < items && k < first_failure.load(); k = next.fetch_add(1)) {
        absl::Status st = fn(k);
        if (!st.ok()) {
          failed[t] = std::move(st);
          failed_at[t] = k;
          for (size_t f = first_failure.load(); k < f && !first_failure.compare_exchange_weak(f, k);) {}
          return;
        }
      }
    } catch (const std::exception& e) {  // std::bad_alloc on a worker would end the process
      failed[t] = absl::ResourceExhaustedError(absl::StrCat("holding the dataset in memory: ", e.what()));
      failed_at[t] = 0;
      first_failure.store(0);
    }
  };
  std::vector<std::thread> pool;
  try {
    pool.reserve(threads);  // no growth (and no throw) once threads run
  } catch (const std::bad_alloc&) {
    threads = 1;
  }
  for (unsigned t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work, t);
    } catch (const std::system_error&) {
      break;  // read with the threads there are
    }
  }
  work(0);
  for (std::thread& t : pool) t.join();
  size_t worst = SIZE_MAX;
  absl::Status status;
  for (unsigned t = 0; t < threads; ++t) {
    if (failed_at[t] < worst) {
      worst = failed_at[t];
      status = failed[t];
    }
  }
  return status;
}

// Each of `ids` below `n` once, in the order given.
std::vector<uint32_t> once_each(const std::vector<uint32_t>& ids, size_t n) {
  std::vector<uint32_t> out;
  out.reserve(ids.size());
  std::vector<uint8_t> seen(n, 0);
  for (uint32_t id : ids) {
    if (id < n && !seen[id]) {
      seen[id] = 1;
      out.push_back(id);
    }
  }
  return out;
}

// Reads the file open as `pin` whole into `to`, planned for its size then:
// `known` bytes (the size the table checked the open against), else as many
// as fstat gives, which must be that size.
absl::Status read_whole(const FileTable::Pin& pin, const std::string& path, std::optional<uint64_t> known,
                        std::span<std::byte> to) {
  uint64_t size = to.size();
  if (known) {
    size = *known;
  } else {
    struct stat st {};
    if (::fstat(pin.fd(), &st) != 0) return io_error(path, "fstat", errno);
    size = static_cast<uint64_t>(st.st_size);
  }
  if (size != to.size()) {
    return file_error(path, absl::StrCat("the file of ", to.size(), " bytes found when the hold was planned"),
                      absl::StrCat(size, " bytes: changed since"));
  }
  DLFEED_ASSIGN_OR_RETURN(size_t got, pread_full(pin.fd(), to, 0, path));
  if (got != size) {
    return format_error(path, got, absl::StrCat(size - got, " more bytes (the size fstat gave)"),
                        "the end of the file (file shrank while it was read)");
  }
  return absl::OkStatus();
}

// Files of kPack or more get a mapping of their own; smaller ones are
// packed back to back into mappings of up to kPack bytes. A mapping's last
// huge page is backed whole once written: at most 2 MiB more than its
// files, a few percent of what it holds.
constexpr uint64_t kPack = 64u << 20;
constexpr uint64_t kAlign = 64;

// After a read: the file is still as the table registered it. A read
// racing a truncation can come back whole with the cut page's tail zeroed
// (or a rewrite half old, half new); such bytes are not held: the file is
// given up, and read from its source, which names the change.
absl::Status unchanged_since_registered(const FileTable::Pin& pin, const std::string& path,
                                        const std::optional<FileIdentity>& registered) {
  if (!registered) return absl::OkStatus();
  struct stat st {};
  if (::fstat(pin.fd(), &st) != 0) return io_error(path, "fstat", errno);
  const std::string what = file_changes(*registered, identity_of(st));
  if (what.empty()) return absl::OkStatus();
  return file_error(path, "the file as it was registered",
                    absl::StrCat(what, ": changed while it was read into memory"));
}
}  // namespace

bool ResidentFiles::wait(uint32_t id, const std::atomic<bool>* stop) const {
  if (id >= n_) return false;
  uint8_t st = state_[id].load(std::memory_order_acquire);
  if (st != kPending) return st == kHeld;
  std::unique_lock<std::mutex> lock(mu_);
  // Timed, to see `stop` (a flag of the caller's, set without this mutex).
  while ((st = state_[id].load(std::memory_order_acquire)) == kPending) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) return false;
    changed_.wait_for(lock, std::chrono::milliseconds(5));
  }
  return st == kHeld;
}

void ResidentFiles::drop(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id >= n_) return;
  uint8_t held = kHeld;
  if (state_[id].compare_exchange_strong(held, kGivenUp, std::memory_order_acq_rel)) {
    held_files_.fetch_sub(1, std::memory_order_acq_rel);
    dropped_.fetch_add(1, std::memory_order_acq_rel);
  } else if (held == kPending) {
    stale_[id] = 1;  // being read: some pieces may be old bytes; given up when done (finish)
  }
}

absl::Status ResidentFiles::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void ResidentFiles::finish(uint32_t id, bool held, const absl::Status& why, size_t item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool stale = held && stale_[id] != 0;  // changed while it was read (drop)
    uint8_t pending = kPending;
    if (!state_[id].compare_exchange_strong(pending, held && !stale ? kHeld : kGivenUp, std::memory_order_acq_rel)) {
      return;
    }
    if (stale) {
      dropped_.fetch_add(1, std::memory_order_acq_rel);
    } else if (held) {
      held_files_.fetch_add(1, std::memory_order_acq_rel);
    } else {
      given_up_.fetch_add(1, std::memory_order_acq_rel);
      if (failure_.ok() || (item < failure_item_ && !why.ok())) {
        failure_ = why;
        failure_item_ = item;
      }
    }
  }
  changed_.notify_all();
}

void ResidentFiles::Unmap::operator()(std::byte* p) const noexcept { unmap_huge(p, bytes); }

// Files of kPack or more get a mapping each; smaller ones are packed
// (64-byte aligned) in the hold's order, so the reads fill consecutive huge
// pages: 2,000 files of 147 KiB are 150 faults, not one per 4 KiB (0.2 s on
// this VM, most of their hold). Nothing is populated here (create): the
// hold's reads take the faults.
absl::Status ResidentFiles::place(const std::vector<uint32_t>& ids) {
  std::vector<std::pair<uint32_t, uint64_t>> packed;  // file, offset in the mapping being packed
  uint64_t used = 0;
  auto map = [&](uint64_t bytes, const std::string& of) -> absl::StatusOr<std::byte*> {
    try {
      std::unique_ptr<std::byte, Unmap> owned(static_cast<std::byte*>(map_huge(bytes, /*populate=*/false)),
                                              Unmap{bytes});
      std::byte* p = owned.get();
      memory_.push_back(std::move(owned));  // a throw here unmaps it
      return p;
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat("holding the dataset in memory: no memory for the ", bytes, " bytes of ", of));
    }
  };
  auto flush = [&]() -> absl::Status {
    if (packed.empty()) return absl::OkStatus();
    const std::string of = packed.size() == 1 ? paths_[packed[0].first]
                                              : absl::StrCat(packed.size(), " files from ", paths_[packed[0].first]);
    DLFEED_ASSIGN_OR_RETURN(std::byte * p, map(used, of));
    for (const auto& [id, at] : packed) data_[id] = p + at;
    packed.clear();
    used = 0;
    return absl::OkStatus();
  };
  for (uint32_t id : ids) {
    const uint64_t size = sizes_[id];
    if (size >= kPack) {
      DLFEED_ASSIGN_OR_RETURN(data_[id], map(size, paths_[id]));
      continue;
    }
    const uint64_t at = (used + kAlign - 1) / kAlign * kAlign;
    if (at + size > kPack) {
      DLFEED_RETURN_IF_ERROR(flush());
      packed.emplace_back(id, 0);
      used = size;
      continue;
    }
    packed.emplace_back(id, at);
    used = at + size;
  }
  return flush();
}

absl::StatusOr<std::shared_ptr<const ResidentFiles>> ResidentFiles::load(FileTable& files,
                                                                         const std::vector<uint32_t>& ids) {
  // The table outlives the hold, which ends before this returns.
  DLFEED_ASSIGN_OR_RETURN(std::unique_ptr<ResidentHold> hold,
                          ResidentHold::plan(std::shared_ptr<FileTable>(std::shared_ptr<void>(), &files), ids));
  DLFEED_RETURN_IF_ERROR(hold->begin());
  hold->join();
  std::shared_ptr<const ResidentFiles> held = hold->files();
  DLFEED_RETURN_IF_ERROR(held->failure());
  return held;
}

absl::StatusOr<std::unique_ptr<ResidentHold>> ResidentHold::plan(std::shared_ptr<FileTable> table,
                                                                 const std::vector<uint32_t>& ids) {
  std::unique_ptr<ResidentHold> h(new ResidentHold());
  FileTable& files = *table;
  h->table_ = std::move(table);
  auto r = std::make_shared<ResidentFiles>();
  h->held_ = r;  // first: the destructor gives up what was planned if planning fails
  const size_t n = files.size();
  r->n_ = n;
  r->state_ = std::make_unique<std::atomic<uint8_t>[]>(n);
  r->pieces_left_ = std::make_unique<std::atomic<uint32_t>[]>(n);
  r->stale_.assign(n, 0);
  r->data_.assign(n, nullptr);
  r->sizes_.assign(n, 0);
  r->paths_.resize(n);
  const std::vector<uint32_t> todo = once_each(ids, n);
  // Objects (a loader reads files or objects, not both): each one opened
  // (its size from the store's listing), its bytes read in pieces. Files of
  // a known size over one piece: read in pieces; any other file whole, as
  // one item (its size the one stat gives now, checked when it is read).
  h->objects_.resize(n);
  std::vector<uint32_t> planned;
  for (uint32_t id : todo) {
    const std::string path = files.path(id);
    r->paths_[id] = path;
    std::optional<uint64_t> size = files.known_size(id);
    bool whole = false;  // read as one item, else in pieces
    if (is_object_url(path)) {
      h->objects_held_ = true;
      DLFEED_ASSIGN_OR_RETURN(h->objects_[id], open_object_version(path, files.identity(id)));
      size = size.value_or(h->objects_[id].size());
    } else if (!size || *size <= kPiece) {
      if (!size) {
        struct stat st {};
        if (detail::stat_path(path.c_str(), &st) != 0) {  // not held: its reads say what is wrong
          if (r->failure_.ok()) {
            r->failure_ = io_error(path, "stat", errno);
            r->failure_item_ = h->pieces_.size();  // where it would have been read
          }
          continue;
        }
        size = static_cast<uint64_t>(st.st_size);
      }
      whole = true;
    }
    if (whole) {
      h->pieces_.push_back({id, 0, *size, /*whole=*/true});
      ++h->whole_files_;
    } else {  // an object, or a file of a known size over one piece
      for (uint64_t at = 0; at < *size; at += kPiece) h->pieces_.push_back({id, at, std::min(kPiece, *size - at)});
    }
    r->sizes_[id] = *size;
    r->planned_bytes_ += *size;
    ++r->planned_files_;
    planned.push_back(id);
  }
  DLFEED_RETURN_IF_ERROR(r->place(planned));
  // Pending once placed (a failed placement leaves them not held: read from
  // their sources). Only an object of no bytes has no piece to read: held.
  for (const Piece& p : h->pieces_) r->pieces_left_[p.id].fetch_add(1, std::memory_order_relaxed);
  for (uint32_t id : planned) {
    const bool pending = r->pieces_left_[id].load(std::memory_order_relaxed) > 0;
    if (!pending && r->sizes_[id] > 0) {
      return absl::InternalError(
          absl::StrCat(r->paths_[id], ": planned for the hold with no read of its ", r->sizes_[id], " bytes"));
    }
    r->state_[id].store(pending ? ResidentFiles::kPending : ResidentFiles::kHeld, std::memory_order_relaxed);
    if (!pending) r->held_files_.fetch_add(1, std::memory_order_relaxed);
  }
  return h;
}

absl::Status ResidentHold::begin(std::shared_ptr<counters::Counters> counters) {
  if (thread_.joinable()) return absl::OkStatus();
  counters_ = std::move(counters);
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error& e) {
    absl::Status no = absl::ResourceExhaustedError(
        absl::StrCat("holding the dataset in memory: the system gave no thread to read it (", e.what(), ")"));
    for (const Piece& p : pieces_) held_->finish(p.id, false, no);  // read from their sources
    return no;
  }
  name_thread(thread_, "dlfeed-hold");
  return absl::OkStatus();
}

void ResidentHold::join() {
  if (thread_.joinable()) thread_.join();
}

ResidentHold::~ResidentHold() {
  stop_.store(true, std::memory_order_relaxed);
  join();
  // Never begun: no file is left to wait for.
  for (const Piece& p : pieces_) held_->finish(p.id, false, absl::CancelledError("the hold stopped"));
}

void ResidentHold::run() {
  ResidentFiles& r = *held_;
  FileTable& files = *table_;
  // Reads item k (a whole file, or a piece of a file or object) into its
  // buffer; each k is one thread's. A failed item gives its file up (it is
  // read from its source, where the read fails again or not) and the hold
  // goes on.
  auto read_item = [&](size_t k) -> absl::Status {
    const Piece& p = pieces_[k];
    const std::string& path = r.paths_[p.id];
    const std::span<std::byte> to(r.data_[p.id] + p.offset, p.length);
    if (objects_held_) return objects_[p.id].read_exact(p.offset, to, "bytes of the object held in memory");
    DLFEED_ASSIGN_OR_RETURN(FileTable::Pin pin, files.pin(p.id));
    if (p.whole) {
      DLFEED_RETURN_IF_ERROR(read_whole(pin, path, files.known_size(p.id), to));
    } else {
      DLFEED_ASSIGN_OR_RETURN(size_t got, pread_full(pin.fd(), to, p.offset, path));
      if (got != p.length) {
        return format_error(path, p.offset + got, absl::StrCat(p.length - got, " more bytes (the size indexed)"),
                            "the end of the file (file shrank while it was read)");
      }
    }
    return unchanged_since_registered(pin, path, files.identity(p.id));
  };
  auto one = [&](size_t k) -> absl::Status {
    if (stop_.load(std::memory_order_relaxed)) return absl::CancelledError("the hold stopped");
    const uint32_t id = pieces_[k].id;
    if (r.state_[id].load(std::memory_order_acquire) != ResidentFiles::kPending) return absl::OkStatus();
    // I/O busy while it reads (opened as stamped: see IoEngine::submit).
    DLFEED_REC(if (counters_) counters_->interval_begin(counters::Component::kIo, counters_->now()));
    const absl::Status st = read_item(k);
    DLFEED_REC(if (counters_) counters_->interval_end(counters::Component::kIo, counters_->now()));
    if (!st.ok()) {
      r.finish(id, false, st, k);
    } else if (r.pieces_left_[id].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      r.finish(id, true, st);
    }
    return absl::OkStatus();
  };
  // Several threads for many files: on a cold cache (or a parallel file
  // system) each open and read is a round trip. Pieces (objects, large
  // files): a thread per piece up to the most, each GET a round trip, each
  // file's piece a copy of its own.
  const size_t items = pieces_.size();
  const size_t want = whole_files_ / kFilesPerLoadThread + (items - whole_files_);
  const unsigned threads = static_cast<unsigned>(std::clamp<size_t>(
      want, 1, objects_held_ ? kMaxLoadThreads : std::min<size_t>(kMaxLoadThreads, files.max_open())));
  absl::Status stopped;
  try {
    stopped = run_in_parallel(items, threads, one);
  } catch (const std::exception& e) {  // no memory for its own threads' bookkeeping: what is not held is read
    stopped = base::exception_status("holding the dataset in memory", e);
  }
  // What is not held now never will be (memory ran out, or the hold stopped).
  if (stopped.ok()) stopped = absl::CancelledError("the hold stopped");
  for (const Piece& p : pieces_) r.finish(p.id, false, stopped);
  for (File& f : objects_) f = File();  // the connections, closed on this thread
}

absl::StatusOr<ResidentChoice> choose_resident(const LoaderOptions& o, const std::shared_ptr<FileTable>& table,
                                               bool objects, const std::function<std::vector<uint32_t>()>& first_use) {
  FileTable& files = *table;
  ResidentChoice out;
  if (o.resident != Mode::kAuto && o.resident != Mode::kOn && o.resident != Mode::kOff) {
    return absl::InvalidArgumentError(
        absl::StrCat("loader: resident is auto, on or off, not ", static_cast<int>(o.resident)));
  }
  if (o.resident == Mode::kOff) {
    out.reason = "not held in memory: resident is off";
    return out;
  }
  std::string why_not;
  uint64_t total = 0;
  if (o.io.direct) {
    why_not = "io.direct asks for the device";
  } else if (!o.stage.dir.empty()) {
    why_not = "staging copies the files to stage.dir";
  } else if (o.advanced.io_factory && !objects) {
    why_not = "io_factory makes the backend";
  } else if (objects && o.order.world_size > 1) {
    why_not = absl::StrCat("each of the job's ", o.order.world_size,
                           " ranks would fetch every object (the ranks read their shards)");
  } else {
    for (uint32_t id = 0; id < files.size(); ++id) {
      if (const std::optional<uint64_t> size = files.known_size(id)) {  // from the index: no stat
        total += *size;
        continue;
      }
      const std::string path = files.path(id);
      if (objects) {
        DLFEED_ASSIGN_OR_RETURN(FileIdentity id_now, object_identity(path));
        total += id_now.size;
        continue;
      }
      struct stat st {};
      if (detail::stat_path(path.c_str(), &st) != 0) return io_error(path, "stat", errno);
      total += static_cast<uint64_t>(st.st_size);
    }
    if (total > o.memory_budget / 2) {
      why_not = absl::StrCat("the files' ", total, " bytes are more than half of memory_budget (", o.memory_budget,
                             " bytes)");
    }
  }
  if (!why_not.empty()) {
    if (o.resident == Mode::kOn)
      return absl::FailedPreconditionError(absl::StrCat("loader: resident=on, but ", why_not));
    out.reason = absl::StrCat("not held in memory: ", why_not);
    return out;
  }
  std::vector<uint32_t> ids = first_use();
  for (uint32_t id = 0; id < files.size(); ++id) ids.push_back(id);  // once_each keeps the first
  const bool now = o.resident == Mode::kOn;  // asked for: all of it before create returns, or an error
  if (now) {
    DLFEED_ASSIGN_OR_RETURN(out.files, ResidentFiles::load(files, ids));
  } else {
    absl::StatusOr<std::unique_ptr<ResidentHold>> hold = ResidentHold::plan(table, ids);
    if (!hold.ok() && hold.status().code() == absl::StatusCode::kResourceExhausted) {
      out.reason = absl::StrCat("not held in memory: ", hold.status().message());  // no memory for it: read
      return out;
    }
    if (!hold.ok()) return hold.status();
    out.hold = *std::move(hold);
    out.files = out.hold->files();
  }
  out.reason = absl::StrCat("held in memory: ", out.files->files(), objects ? " objects, " : " files, ",
                            out.files->bytes(), " bytes, read ",
                            now ? "once at create" : "once, from create on, in the order the first epoch uses them");
  return out;
}

namespace {

class ResidentBackend final : public IoBackend {
 public:
  ResidentBackend(std::unique_ptr<IoBackend> inner, std::shared_ptr<const ResidentFiles> held)
      : inner_(std::move(inner)), held_(std::move(held)) {
    fallback_reason_ = inner_->fallback_reason();
  }

  absl::Status submit(std::span<const ReadRequest> requests) override {
    // Copies first, in place; the rest go to the inner backend in one call.
    // Whether each is a copy, asked once: a file may become held meanwhile.
    std::vector<ReadRequest> rest;
    std::vector<uint8_t> copy(requests.size());
    size_t copied = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      const ReadRequest& r = requests[i];
      copy[i] = held_->has(r.file) ? 1 : 0;
      if (!copy[i]) {
        rest.push_back(r);
        continue;
      }
      if (r.piece_count > 0) {
        DLFEED_RETURN_IF_ERROR(validate_pieces(held_->path(r.file), r));
      } else if (r.dest == nullptr && r.length > 0) {
        return absl::InvalidArgumentError(absl::StrCat("read of ", r.length, " bytes with no destination"));
      }
    }
    if (!rest.empty()) DLFEED_RETURN_IF_ERROR(inner_->submit(rest));
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < requests.size(); ++i) {
      const ReadRequest& r = requests[i];
      if (!copy[i]) continue;
      ReadCompletion c;
      c.user_data = r.user_data;
      const uint64_t size = held_->size(r.file);
      if (r.offset > size || r.length > size - r.offset) {
        const uint64_t available = r.offset < size ? size - r.offset : 0;
        c.status = format_error(held_->path(r.file), r.offset, absl::StrCat(r.length, " bytes"),
                                absl::StrCat("only ", available, " bytes before the end of the file"));
        ++stats_.errors;
      } else {
        copy_out(r, held_->data(r.file) + r.offset,
                 [](std::byte* to, const std::byte* from, uint64_t n) { copy_large(to, from, n); });
        c.bytes = r.length;
        stats_.bytes += r.length;
        take_checksum(r, c);  // as the read backends do: now, with the bytes in the caches
      }
      ready_.push_back(std::move(c));
      ++copied;
    }
    stats_.requests += copied;
    stats_.completed_at_submit += copied;
    return absl::OkStatus();
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_completions, std::chrono::nanoseconds timeout) override {
    size_t got = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      got = ready_.size();
      stats_.completions += got;
      for (auto& c : ready_) out.push_back(std::move(c));
      ready_.clear();
    }
    if (inner_->in_flight() == 0) return got;
    if (got >= min_completions) timeout = std::chrono::nanoseconds::zero();
    return got + inner_->reap(out, min_completions > got ? min_completions - got : 0, timeout);
  }

  size_t in_flight() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return ready_.size() + inner_->in_flight();
  }

  void cancel() override { inner_->cancel(); }
  std::string name() const override { return inner_->name(); }

  IoStats stats() const override {
    IoStats s = inner_->stats();
    std::lock_guard<std::mutex> lock(mu_);
    s.requests += stats_.requests;
    s.completions += stats_.completions;
    s.errors += stats_.errors;
    s.bytes += stats_.bytes;
    s.completed_at_submit += stats_.completed_at_submit;
    return s;
  }

 private:
  std::unique_ptr<IoBackend> inner_;
  std::shared_ptr<const ResidentFiles> held_;
  mutable std::mutex mu_;
  std::deque<ReadCompletion> ready_;
  IoStats stats_;  // of the copies (under mu_)
};

}  // namespace

std::unique_ptr<IoBackend> make_resident_backend(std::unique_ptr<IoBackend> inner,
                                                 std::shared_ptr<const ResidentFiles> held) {
  return std::make_unique<ResidentBackend>(std::move(inner), std::move(held));
}

}  // namespace dlfeed::detail
