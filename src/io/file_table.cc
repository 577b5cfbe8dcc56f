// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/io/file_table.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <deque>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI {

// Invariants (under mu): an entry is in `lru` iff fd >= 0 and pins == 0;
// open == number of entries with fd >= 0; opening == opens in progress
// outside the lock (they hold a reserved slot).
struct FileTable::Impl {
  // What a file was when registered (or first opened): a reopen after
  // eviction must find the same file, or the extents indexed from it may
  // point anywhere in another one.
  struct Identity {
    bool known = false;
    bool dev_known = false;  // false: an identity from another host (its device numbers may differ)
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    uint64_t mtime_ns = 0;
    uint64_t ctime_ns = 0;  // 0: not known (an identity recorded without it), not compared
    static Identity of(const struct stat& st) { return of(detail::identity_of(st)); }
    static Identity of(const FileIdentity& f) {
      Identity id;
      id.known = true;
      id.dev_known = f.device != 0;
      id.dev = static_cast<dev_t>(f.device);
      id.ino = static_cast<ino_t>(f.inode);
      id.size = static_cast<off_t>(f.size);
      id.mtime_ns = f.mtime_ns;
      id.ctime_ns = f.ctime_ns;
      return id;
    }
    // The inverse of of(): the device 0 when it is not known.
    FileIdentity file_identity() const {
      FileIdentity f;
      f.size = static_cast<uint64_t>(size);
      f.mtime_ns = mtime_ns;
      f.inode = static_cast<uint64_t>(ino);
      f.device = dev_known ? static_cast<uint64_t>(dev) : 0;
      f.ctime_ns = ctime_ns;
      return f;
    }
    // `o` is what an open found (its device and change time known).
    bool same(const Identity& o) const { return difference(o).empty(); }
    // Only the change time differs: metadata, or bytes written with the mtime set back.
    bool only_ctime_differs(const Identity& o) const {
      return ctime_ns != 0 && ctime_ns != o.ctime_ns && (!dev_known || dev == o.dev) && ino == o.ino &&
             size == o.size && mtime_ns == o.mtime_ns;
    }
    // What differs from `o`, field by field ("" when nothing does).
    std::string difference(const Identity& o) const {
      auto time = [](uint64_t ns) {
        return absl::StrCat(ns / 1000000000ull, ".", absl::Dec(ns % 1000000000ull, absl::kZeroPad9));
      };
      std::vector<std::string> d;
      if (dev_known && dev != o.dev) d.push_back(absl::StrCat("device ", dev, " -> ", o.dev));
      if (ino != o.ino) d.push_back(absl::StrCat("inode ", ino, " -> ", o.ino));
      if (size != o.size) d.push_back(absl::StrCat("size ", size, " -> ", o.size, " bytes"));
      if (mtime_ns != o.mtime_ns) d.push_back(absl::StrCat("modified time ", time(mtime_ns), " -> ", time(o.mtime_ns)));
      if (ctime_ns != 0 && ctime_ns != o.ctime_ns) {
        d.push_back(absl::StrCat("change time (ctime) ", time(ctime_ns), " -> ", time(o.ctime_ns),
                                 d.empty() ? " (size and modified time the same: written in place with its "
                                             "modified time set back, as rsync -t, tar -x or os.utime leave it)"
                                           : ""));
      }
      return absl::StrJoin(d, ", ");
    }
  };
  struct Entry {
    std::string path;
    Identity identity;
    int fd = -1;
    uint32_t pins = 0;
    bool in_lru = false;
    bool stale = false;  // fd is of a path redirected away: close it when unpinned
    // Descriptors of paths redirected away that were still pinned when the
    // next pin wanted the new path: each closes when its own pins are gone.
    std::vector<std::pair<int, uint32_t>> retired;  // (fd, pins)
    int8_t direct = -1;                             // O_DIRECT for this file: -1 the table's, else 0/1
    bool recheck = false;  // a reopen found only its change time new: check_open_files asks whether it is still indexed
    bool opened = false;   // opened before (its bytes may have been read)
    // A copy the file was redirected to (staging): it must hold the bytes
    // indexed, so a new change time alone is a change, not a reindex.
    bool copy = false;
    // Neighbours in `lru` (kNone at its ends): an intrusive list, so that
    // unpinning (a Pin's destructor) allocates nothing and cannot fail.
    uint32_t lru_prev = kNone, lru_next = kNone;
  };
  static constexpr uint32_t kNone = UINT32_MAX;

  mutable std::mutex mu;
  std::deque<Entry> entries;
  absl::flat_hash_map<std::string, uint32_t> ids;
  uint32_t lru_front = kNone, lru_back = kNone;  // lru: front least recently used
  absl::flat_hash_set<uint32_t> open_ids;        // entries whose fd >= 0 (check_open_files asks these only)
  size_t open = 0;
  size_t opening = 0;
  FileTableStats stats;

  void lru_remove(Entry& e) {
    if (!e.in_lru) return;
    (e.lru_prev == kNone ? lru_front : entries[e.lru_prev].lru_next) = e.lru_next;
    (e.lru_next == kNone ? lru_back : entries[e.lru_next].lru_prev) = e.lru_prev;
    e.lru_prev = e.lru_next = kNone;
    e.in_lru = false;
  }
  void lru_push_back(uint32_t id) {
    Entry& e = entries[id];
    e.lru_prev = lru_back;
    e.lru_next = kNone;
    (lru_back == kNone ? lru_front : entries[lru_back].lru_next) = id;
    lru_back = id;
    e.in_lru = true;
  }
  // Takes the least recently used unpinned fd from its entry, for the
  // caller to close (outside the lock); -1 when every open fd is pinned.
  int evict_fd() {
    if (lru_front == kNone) return -1;
    const uint32_t id = lru_front;
    Entry& e = entries[id];
    lru_remove(e);
    open_ids.erase(id);
    --open;
    ++stats.evictions;
    return std::exchange(e.fd, -1);
  }
  // evict_fd(), appended to `to_close` (closed now, under the lock, when
  // there is no memory to keep it for later). False when every open fd is
  // pinned.
  bool evict_one(std::vector<int>& to_close) {
    if (lru_front == kNone) return false;
    const int fd = evict_fd();
    try {
      to_close.push_back(fd);
    } catch (const std::bad_alloc&) {
      ::close(fd);
    }
    return true;
  }
  void note_open() {
    ++open;
    ++stats.opens;
    stats.peak_open = std::max<uint64_t>(stats.peak_open, open);
  }
  // Whether the file just opened at `path`, `found`, is `e`'s as registered
  // (`expect`): an error naming it when not (`reindexed`: what indexing it
  // again said, when only its change time was new). Else `e`'s identity
  // takes what is now known, or `e` is marked to be asked about at the next
  // check_open_files (`recheck_later`). Under mu.
  static absl::Status accept(Entry& e, const std::string& path, const Identity& expect, const Identity& found,
                             const absl::Status& reindexed, bool recheck_later) {
    if (!reindexed.ok() && reindexed.code() == absl::StatusCode::kAborted) {  // reindex_reopened(false)
      return file_error(path, "the file as it was registered",
                        absl::StrCat("a new change time: changed in place since it was read (or its metadata "
                                     "changed); not indexed again: ",
                                     reindexed.message()));
    }
    if (!reindexed.ok()) {
      return file_error(path, "the file as it was registered",
                        absl::StrCat("a new change time: changed in place since it was indexed; indexed again, its "
                                     "samples are not where they were: ",
                                     reindexed.message()));
    }
    const bool ctime_only = expect.known && expect.only_ctime_differs(found);
    if (const std::string d = expect.known && !ctime_only ? expect.difference(found) : std::string(); !d.empty()) {
      return file_error(path, "the file as it was registered",
                        absl::StrCat(d, ": replaced or modified while being read"));
    }
    if (e.path != path) return absl::OkStatus();  // redirected meanwhile: its entry is the copy's
    e.opened = true;
    if (ctime_only && !recheck_later) e.identity.ctime_ns = found.ctime_ns;  // indexed again: still indexed
    if (!e.identity.known || !e.identity.dev_known || e.identity.ctime_ns == 0) e.identity = found;
    if (recheck_later) e.recheck = true;
    return absl::OkStatus();
  }
  // Opens `path` (O_DIRECT if `direct`) and fstat's it into `st`, outside
  // the lock; -1 with the errno in `err` when either fails. `to_close` is
  // empty and left empty.
  int open_and_stat(const std::string& path, bool direct, std::vector<int>& to_close, struct stat& st, int& err);
};

namespace {
void close_all(const std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
}
}  // namespace

int FileTable::Impl::open_and_stat(const std::string& path, bool direct, std::vector<int>& to_close, struct stat& st,
                                   int& err) {
  // Not blocking: a FIFO put in a file's place would wait for a writer (the
  // identity check then refuses it); a regular file's reads do not care.
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | (direct ? O_DIRECT : 0);
  int fd = ::open(path.c_str(), flags);
  err = fd < 0 ? errno : 0;
  if (fd < 0 && (err == EMFILE || err == ENFILE)) {
    // The process is out of descriptors (others use them too): give back
    // every unpinned one and try once more.
    {
      std::lock_guard<std::mutex> lock(mu);
      while (evict_one(to_close)) {}
    }
    close_all(to_close);
    to_close.clear();
    fd = ::open(path.c_str(), flags);
    err = fd < 0 ? errno : 0;
  }
  if (fd >= 0 && ::fstat(fd, &st) != 0) {
    err = errno;
    ::close(fd);
    fd = -1;
  }
  // Blocking again for a regular file (io_uring may hand EAGAIN back for one that is not).
  if (fd >= 0 && S_ISREG(st.st_mode)) ::fcntl(fd, F_SETFL, direct ? O_DIRECT : 0);
  return fd;
}

FileTable::Pin::Pin(Pin&& o) noexcept
    : table_(std::exchange(o.table_, nullptr)), id_(o.id_), fd_(std::exchange(o.fd_, -1)) {}

FileTable::Pin& FileTable::Pin::operator=(Pin&& o) noexcept {
  if (this != &o) {
    reset();
    table_ = std::exchange(o.table_, nullptr);
    id_ = o.id_;
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void FileTable::Pin::reset() noexcept {
  if (table_ != nullptr) table_->unpin(id_, fd_);
  table_ = nullptr;
  fd_ = -1;
}

size_t FileTable::default_max_open() {
  struct rlimit rl {};
  size_t cap = 1024;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    cap = std::min<size_t>(cap, static_cast<size_t>(rl.rlim_cur / 2));
  }
  return std::max<size_t>(cap, 1);
}

FileTable::FileTable(FileTableOptions options)
    : max_open_(options.max_open == 0 ? default_max_open() : options.max_open),
      direct_(options.direct),
      impl_(std::make_unique<Impl>()) {}

FileTable::~FileTable() {
  for (auto& e : impl_->entries) {
    if (e.fd >= 0) ::close(e.fd);
  }
}

uint32_t FileTable::add(absl::string_view path) {
  std::string p(path);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->ids.find(p);
    if (it != impl_->ids.end()) return it->second;
  }
  // Outside the lock: a file that cannot be stat'ed now (missing) gets its
  // identity at its first open instead.
  struct stat st {};
  const bool known = detail::stat_path(p.c_str(), &st) == 0;
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto [it, inserted] = impl_->ids.try_emplace(p, 0);
  if (inserted) {
    it->second = static_cast<uint32_t>(impl_->entries.size());
    Impl::Entry& e = impl_->entries.emplace_back();
    e.path = std::move(p);
    if (known) e.identity = Impl::Identity::of(st);
  }
  return it->second;
}

uint32_t FileTable::add(absl::string_view path, const FileIdentity& identity) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto [it, inserted] = impl_->ids.try_emplace(std::string(path), 0);
  if (inserted) {
    it->second = static_cast<uint32_t>(impl_->entries.size());
    Impl::Entry& e = impl_->entries.emplace_back();
    e.path = std::string(path);
    e.identity = Impl::Identity::of(identity);
  }
  return it->second;
}

void FileTable::reserve(size_t n) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->ids.reserve(n);
}

void FileTable::reserve_descriptors() const {
  const size_t n = std::min(size(), max_open_);
  if (n == 0) return;
  // The lowest free descriptor: about as many as are open now.
  const int probe = ::open("/", O_PATH | O_CLOEXEC);
  if (probe < 0) return;
  struct rlimit rl {};
  // Slack for the few the loader opens beside its files (rings, event fds).
  constexpr size_t kSlack = 64;
  size_t top = std::min<size_t>(static_cast<size_t>(probe) + n + kSlack, INT_MAX - 1);
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    top = std::min<size_t>(top, static_cast<size_t>(rl.rlim_cur) - 1);
  }
  // A duplicate at the top grows the table to hold it, at once.
  if (top > static_cast<size_t>(probe)) {
    const int high = ::fcntl(probe, F_DUPFD_CLOEXEC, static_cast<int>(top));
    if (high >= 0) ::close(high);
  }
  ::close(probe);
}

std::optional<FileIdentity> FileTable::identity(uint32_t id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (id >= impl_->entries.size() || !impl_->entries[id].identity.known) return std::nullopt;
  return impl_->entries[id].identity.file_identity();
}

std::optional<uint64_t> FileTable::known_size(uint32_t id) const {
  const std::optional<FileIdentity> known = identity(id);
  if (!known) return std::nullopt;
  return known->size;
}

absl::Status FileTable::redirect(uint32_t id, absl::string_view path, std::optional<bool> direct) {
  int to_close = -1;
  Impl::Identity copy_identity;
  struct stat st {};
  if (detail::stat_path(std::string(path).c_str(), &st) == 0) copy_identity = Impl::Identity::of(st);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (id >= impl_->entries.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("redirect: unknown file id ", id, ", the table has ", impl_->entries.size(), " files"));
    }
    Impl::Entry& e = impl_->entries[id];
    e.path = std::string(path);
    e.copy = true;
    e.direct = direct ? static_cast<int8_t>(*direct) : int8_t{-1};
    // From now on opens must find the copy as it is now (or, if it cannot be
    // stat'ed yet, as the first open finds it).
    e.identity = copy_identity;
    if (e.fd >= 0) {
      if (e.pins == 0) {
        impl_->lru_remove(e);
        to_close = std::exchange(e.fd, -1);
        impl_->open_ids.erase(id);
        --impl_->open;
      } else {
        e.stale = true;
      }
    }
  }
  redirections_.fetch_add(1, std::memory_order_acq_rel);
  if (to_close >= 0) ::close(to_close);
  return absl::OkStatus();
}

size_t FileTable::size() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->entries.size();
}

std::string FileTable::path(uint32_t id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (id >= impl_->entries.size()) return absl::StrCat("<invalid file id ", id, ">");
  return impl_->entries[id].path;
}

FileTableStats FileTable::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  FileTableStats s = impl_->stats;
  s.open_now = impl_->open;
  return s;
}

absl::Status FileTable::check_open_files(const std::function<absl::Status(uint32_t id)>& still_indexed) {
  // Under the lock: each open file's fstat; the files whose change time
  // alone is new (and those a reopen found so) are asked about outside it
  // (indexing a file again reads it). Called with no read in flight.
  std::vector<std::pair<uint32_t, Impl::Identity>> ask;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (uint32_t id : impl_->open_ids) {
      Impl::Entry& e = impl_->entries[id];
      if (e.fd < 0 || e.stale || !e.identity.known) continue;
      struct stat st {};
      if (::fstat(e.fd, &st) != 0) return io_error(e.path, "fstat", errno);
      const Impl::Identity found = Impl::Identity::of(st);
      if (e.identity.only_ctime_differs(found) || (e.recheck && e.identity.same(found))) {
        // Deleted, renamed or renamed over (the unlink or rename set its
        // change time): no path reaches this inode any more, and the
        // descriptor still reads the bytes indexed.
        struct stat at {};
        if (::stat(e.path.c_str(), &at) != 0 || at.st_dev != st.st_dev || at.st_ino != st.st_ino) {
          e.identity.ctime_ns = found.ctime_ns;
          e.recheck = false;
          continue;
        }
        if (still_indexed && !e.copy) {
          ask.emplace_back(id, found);
          continue;
        }
      }
      if (const std::string d = e.identity.difference(found); !d.empty()) {
        return file_error(e.path, "the file as it was registered",
                          absl::StrCat(d,
                                       ": changed in place (rewritten, truncated or appended to) while the loader "
                                       "held it open"));
      }
    }
    for (uint32_t id = 0; id < impl_->entries.size(); ++id) {
      Impl::Entry& e = impl_->entries[id];
      if (!e.recheck || e.fd >= 0) continue;
      struct stat st {};
      if (::stat(e.path.c_str(), &st) != 0) continue;  // its next open reports it
      ask.emplace_back(id, Impl::Identity::of(st));
    }
  }
  for (const auto& [id, found] : ask) {
    const absl::Status again = still_indexed ? still_indexed(id) : absl::UnknownError("not indexed again");
    std::lock_guard<std::mutex> lock(impl_->mu);
    Impl::Entry& e = impl_->entries[id];
    if (!again.ok()) {
      const std::string d = e.identity.difference(found);
      return file_error(e.path, "the file as it was registered",
                        absl::StrCat(d.empty() ? "a new change time" : d,
                                     ": changed in place while the loader held it; indexed again, its samples are not "
                                     "where they were: ",
                                     again.message()));
    }
    e.identity.ctime_ns = found.ctime_ns;  // a metadata change, or new bytes that read alike
    e.recheck = false;
  }
  return absl::OkStatus();
}

void FileTable::check_reopens_with(std::function<absl::Status(uint32_t id)> still_indexed) {
  reopen_check_ = std::move(still_indexed);
}

absl::StatusOr<FileTable::Pin> FileTable::pin(uint32_t id) { return pin_impl(id, true); }
absl::StatusOr<FileTable::Pin> FileTable::try_pin(uint32_t id) { return pin_impl(id, false); }

absl::StatusOr<FileTable::Pin> FileTable::pin_impl(uint32_t id, bool may_exceed) {
  Impl& im = *impl_;
  std::vector<int> to_close;
  std::string path;
  Impl::Identity expect;  // what `path` must be (a redirect may change both meanwhile)
  bool direct = direct_;
  bool reopened = false;
  bool copy = false;
  {
    std::lock_guard<std::mutex> lock(im.mu);
    if (id >= im.entries.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown file id ", id, ", the table has ", im.entries.size(), " files"));
    }
    Impl::Entry& e = im.entries[id];
    if (e.fd >= 0 && e.stale) {
      // Redirected while others hold it (another I/O engine's registered
      // file): they keep the old file until they let go; this pin gets the
      // new path. Handing out the old fd would read the redirected-away file.
      e.retired.emplace_back(std::exchange(e.fd, -1), std::exchange(e.pins, 0));
      im.open_ids.erase(id);
      e.stale = false;
    }
    if (e.fd >= 0) {  // hit
      im.lru_remove(e);
      ++e.pins;
      return Pin(this, id, e.fd);
    }
    // Make room: one slot for this open.
    while (im.open + im.opening >= max_open_ && im.evict_one(to_close)) {}
    if (im.open + im.opening >= max_open_ && !may_exceed) {
      close_all(to_close);  // (empty: evict_one failed on the first try)
      return Pin();
    }
    ++im.opening;
    path = e.path;
    expect = e.identity;
    reopened = e.opened;
    copy = e.copy;
    if (e.direct >= 0) direct = e.direct != 0;
  }
  close_all(to_close);
  to_close.clear();

  struct stat st {};
  int err = 0;
  const int fd = im.open_and_stat(path, direct, to_close, st, err);
  const Impl::Identity found = Impl::Identity::of(st);
  // Only its change time new: its metadata changed (chmod, a link) or its
  // bytes were rewritten with the mtime set back. Which, only indexing it
  // again tells: before anything is read from it when the loader gave the
  // way (check_reopens_with), else it is read on and the next epoch's check
  // (check_open_files) indexes it again.
  const bool ctime_only = fd >= 0 && expect.known && expect.only_ctime_differs(found);
  const bool refused = ctime_only && ((reopened && !reindex_reopened_) || copy);
  const bool recheck_later = ctime_only && !reopen_check_ && !refused;
  const absl::Status reindexed =
      refused ? absl::AbortedError(copy ? "a staged copy must hold the bytes indexed from its source"
                                        : "its bytes read before may be served from elsewhere (the MPI job cache)")
      : ctime_only && reopen_check_ ? reopen_check_(id)
                                    : absl::OkStatus();

  std::lock_guard<std::mutex> lock(im.mu);
  --im.opening;
  if (fd < 0) {
    return io_error(path, direct ? "open (O_DIRECT)" : "open", err);
  }
  Impl::Entry& e = im.entries[id];
  if (absl::Status st = Impl::accept(e, path, expect, found, reindexed, recheck_later); !st.ok()) {
    ::close(fd);
    return st;
  }
  if (e.fd >= 0) {
    // Another thread opened it meanwhile: use theirs.
    to_close.push_back(fd);
    im.lru_remove(e);
  } else {
    e.fd = fd;
    im.open_ids.insert(id);
    im.note_open();
    // Redirected while we opened the old path: serve this read, then close it.
    if (e.path != path) e.stale = true;
  }
  ++e.pins;
  Pin pin(this, id, e.fd);
  // Closing outside the lock would be nicer, but this is the rare race path.
  close_all(to_close);
  return pin;
}

void FileTable::unpin(uint32_t id, int fd) noexcept {
  // Allocates nothing (a Pin's destructor calls it): descriptors to close
  // wait in a fixed array; any past it are closed under the lock.
  Impl& im = *impl_;
  std::array<int, 8> to_close{};
  size_t closing = 0;
  auto close_later = [&](int d) {
    if (closing < to_close.size()) {
      to_close[closing++] = d;
    } else {
      ::close(d);
    }
  };
  {
    std::lock_guard<std::mutex> lock(im.mu);
    Impl::Entry& e = im.entries[id];
    if (fd != e.fd) {  // a retired descriptor
      for (auto it = e.retired.begin(); it != e.retired.end(); ++it) {
        if (it->first != fd) continue;
        if (--it->second == 0) {
          close_later(it->first);
          e.retired.erase(it);
          --im.open;
        }
        break;
      }
    } else if (--e.pins == 0 && e.stale) {
      // Redirected while this read held it: the next pin opens the new path.
      e.stale = false;
      close_later(std::exchange(e.fd, -1));
      im.open_ids.erase(id);
      --im.open;
    } else if (e.pins == 0) {
      im.lru_push_back(id);
      // Over the cap (pin() exceeded it while everything was pinned): shrink.
      for (int d = 0; im.open > max_open_ && (d = im.evict_fd()) >= 0;) close_later(d);
    }
  }
  for (size_t k = 0; k < closing; ++k) ::close(to_close[k]);
}

}  // namespace dlfeed
