// SPDX-License-Identifier: Apache-2.0
#include "s3/cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "dlfeed/detail/crc32c.h"
#include "s3/client.h"

namespace dlfeed::inline DLFEED_ABI::s3::detail {

namespace fs = std::filesystem;

namespace {

// FNV-1a, 64 bits: a stable name (the id file, not the name, tells versions apart).
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// A small file's bytes, or "" when it is absent or not a regular file (a
// FIFO in the folder is never waited on: opened without blocking, checked).
std::string read_small(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st {};
  std::string out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= (1 << 16)) {
    out.resize(static_cast<size_t>(st.st_size));
    size_t total = 0;
    ssize_t got = 0;
    while (total < out.size() &&
           (got = ::pread(fd, out.data() + total, out.size() - total, static_cast<off_t>(total))) > 0) {
      total += static_cast<size_t>(got);
    }
    out.resize(total);
  }
  ::close(fd);
  return out;
}

bool write_whole(const std::string& path, const void* data, size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, p + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  return ::close(fd) == 0 && done == n;
}

// Writes `data` to `path` whole: under a name of this thread's, then renamed.
bool publish(const std::string& path, const void* a, size_t na, const void* b, size_t nb, bool replace = true) {
  std::ostringstream tid;
  tid << std::this_thread::get_id();
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", tid.str());
  std::vector<char> all(na + nb);
  if (na) std::memcpy(all.data(), a, na);
  if (nb) std::memcpy(all.data() + na, b, nb);
  if (!write_whole(tmp, all.data(), all.size())) {
    ::unlink(tmp.c_str());
    return false;
  }
  // Not replacing: link() refuses a name that is there (another connection
  // or process kept the piece first: its bytes stay, counted once); a file
  // system without hard links takes the rename.
  if (!replace && ::link(tmp.c_str(), path.c_str()) == 0) {
    ::unlink(tmp.c_str());
    return true;
  }
  const bool taken = !replace && errno == EEXIST;
  if (taken || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

// What names a version of an object in the cache, its folder's `id` file.
// The first line is the pieces' format: pieces of another format are in
// other folders, never read.
constexpr absl::string_view kFormatLine = "dlfeed object cache 2";

std::string id_of(const ObjectInfo& o) {
  return absl::StrCat(kFormatLine, "\n", o.url, "\n", o.etag, "\n", o.size, "\n");
}

// A piece's CRC32C: of its version's id and its number, then its bytes, so
// a piece of another object, version or place fails it as a damaged one.
uint32_t piece_crc(const ObjectInfo& o, uint64_t k, const std::byte* bytes, size_t n) {
  const std::string id = id_of(o);
  const uint32_t seed = dlfeed::detail::crc32c_extend(dlfeed::detail::crc32c(id.data(), id.size()), &k, sizeof(k));
  return dlfeed::detail::crc32c_extend(seed, bytes, n);
}

uint64_t piece_length(const ObjectInfo& o, uint64_t k) {
  const uint64_t at = k * PieceCache::kPiece;
  return at >= o.size ? 0 : std::min<uint64_t>(PieceCache::kPiece, o.size - at);
}

std::string folder_name(const std::string& url, const std::string& id) {
  return absl::StrFormat("%016x-%016x", fnv1a(url), fnv1a(id));
}

// What a folder of the cache's is: a version's folder (its name the hashes
// of its id's URL and whole id), one damaged, or another's (left alone). A
// damaged one holds the cache's files alone (pieces, `id`, pieces being
// written) under a name of the cache's, with an id of this format that is
// not its own, or not the cache's at all, or none a minute after it was
// made: its pieces unreadable, uncounted, never let go. Folders of the
// cache's other formats (other releases, which may be running) are another's.
enum class FolderState { kOurs, kDamaged, kOther };

bool hex_name(const std::string& name) {
  if (name.size() != 33 || name[16] != '-') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (i != 16 && !((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return false;
  }
  return true;
}

// A piece's name: its number in decimal, as keep() writes it (not "01" or
// "+1", which would count one piece twice), below 2^32 (key_of).
bool piece_number(const std::string& name, uint64_t& k) {
  return absl::SimpleAtoi(name, &k) && k <= 0xffffffffu && absl::StrCat(k) == name;
}

// A piece, or a piece or id being written (publish's NAME.tmp.PID.THREAD).
bool piece_or_temporary(const std::string& name) {
  uint64_t k = 0;
  return piece_number(name, k) || name.find(".tmp.") != std::string::npos;
}

bool only_cache_files(const fs::path& folder) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
    const std::string n = e.path().filename().string();
    if (!e.is_regular_file(ec) || !(n == "id" || piece_or_temporary(n))) return false;
  }
  return !ec;
}

// The URL and size an id names ("" when it is not of this format): the URL
// is what lies between the format line and the last two (ETag and size),
// as a key may hold a line break.
std::string url_of_id(const std::string& id, uint64_t* size) {
  if (!absl::StartsWith(id, absl::StrCat(kFormatLine, "\n")) || id.back() != '\n') {
    return "";
  }
  const size_t size_at = id.rfind('\n', id.size() - 2);
  const size_t etag_at = size_at == std::string::npos ? std::string::npos : id.rfind('\n', size_at - 1);
  if (etag_at == std::string::npos || etag_at <= kFormatLine.size() ||
      !absl::SimpleAtoi(id.substr(size_at + 1, id.size() - size_at - 2), size)) {
    return "";
  }
  return id.substr(kFormatLine.size() + 1, etag_at - kFormatLine.size() - 1);
}

FolderState folder_state(const fs::path& folder, std::string& url, uint64_t& size) {
  url.clear();  // set for kOurs alone
  const std::string name = folder.filename().string();
  if (!hex_name(name)) return FolderState::kOther;
  const std::string id = read_small((folder / "id").string());
  url = url_of_id(id, &size);
  if (!url.empty() && name == folder_name(url, id)) return FolderState::kOurs;
  url.clear();
  if (absl::StartsWith(id, "dlfeed object cache ") && !absl::StartsWith(id, absl::StrCat(kFormatLine, "\n"))) {
    return FolderState::kOther;  // another release's format (`... 20` too)
  }
  if (id.empty()) {  // no id yet: another process may have just made the folder
    struct stat st {};
    if (::stat(folder.c_str(), &st) != 0 || st.st_mtime + 60 >= ::time(nullptr)) return FolderState::kOther;
  }
  return only_cache_files(folder) ? FolderState::kDamaged : FolderState::kOther;
}

// A piece or id being written (NAME.tmp.PID.THREAD) over a minute ago by a
// process that is gone (killed while writing it), or over an hour ago (its
// PID may be another's now, or in another PID namespace: a container's):
// never renamed, and removed. A piece is written in well under a minute.
bool stale_temporary(const fs::path& path) {
  const std::string name = path.filename().string();
  const size_t at = name.find(".tmp.");
  if (at == std::string::npos) return false;
  const size_t dot = name.find('.', at + 5);
  int64_t pid = 0;
  if (dot == std::string::npos || !absl::SimpleAtoi(name.substr(at + 5, dot - at - 5), &pid) || pid <= 0) return false;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  const time_t now = ::time(nullptr);
  if (st.st_mtime + 3600 < now) return true;
  return st.st_mtime + 60 < now && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

absl::StatusOr<std::shared_ptr<PieceCache>> PieceCache::open(const ObjectCacheOptions& o) {
  std::error_code ec;
  if (fs::is_symlink(o.dir, ec) && !fs::exists(o.dir, ec)) {
    return absl::FailedPreconditionError(absl::StrCat("object cache ", o.dir, ": a symbolic link to ",
                                                      fs::read_symlink(o.dir, ec).string(), ", which does not exist"));
  }
  fs::create_directories(o.dir, ec);
  if (ec || !fs::is_directory(o.dir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("object cache ", o.dir, ": cannot make the folder: ", ec ? ec.message() : "not a folder"));
  }
  // The pieces the folder holds count against the bound, but for folders
  // of an earlier format (their `id` says another), which are never read.
  // They are known from now on, to be let go by their next use.
  uint64_t used = 0;
  struct Found {
    std::string folder, url;
    uint64_t k, bytes;
  };
  std::vector<Found> found;
  std::vector<fs::path> damaged;
  absl::flat_hash_map<std::string, std::vector<Version>> versions;  // URL -> its versions' folders
  std::string folder, url;
  uint64_t size = 0;
  for (auto it = fs::recursive_directory_iterator(o.dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it.depth() == 0 && it->is_directory(ec)) {
      folder = it->path().string();
      switch (folder_state(it->path(), url, size)) {
        case FolderState::kOurs: versions[url].push_back({folder, size}); break;
        case FolderState::kDamaged: damaged.push_back(it->path()); [[fallthrough]];
        case FolderState::kOther: it.disable_recursion_pending(); break;
      }
      continue;
    }
    if (it.depth() == 1 && stale_temporary(it->path())) {
      fs::remove(it->path(), ec);
      ec.clear();
      continue;
    }
    // Pieces count (their bytes and CRC), as the pieces kept later do; the
    // `id` files and another process's pieces being written do not.
    uint64_t k = 0;
    if (!it->is_regular_file(ec) || it.depth() != 1 || !piece_number(it->path().filename().string(), k) ||
        it->path().parent_path() != folder) {
      continue;
    }
    const uint64_t bytes = it->file_size(ec);
    used += bytes;
    if (o.max_bytes != 0) found.push_back({folder, url, k, bytes});
  }
  for (const fs::path& d : damaged) {
    if (folder_state(d, url, size) != FolderState::kDamaged) continue;  // mended meanwhile by another process
    fs::remove_all(d, ec);
    counters().cache_damaged.fetch_add(1, std::memory_order_relaxed);
  }
  std::shared_ptr<PieceCache> cache(new PieceCache(o.dir, o.max_bytes, used));
  cache->versions_ = std::move(versions);
  std::lock_guard<std::mutex> lock(cache->evict_mu_);
  for (const Found& f : found) {
    const uint32_t number = cache->folder_number(f.folder, f.url);
    cache->known_[key_of(number, f.k)] = Known{number, f.bytes, 0, false, true, ObjectUses::kNever, false};
  }
  return cache;
}

PieceCache::PieceCache(std::string dir, uint64_t max_bytes, uint64_t used)
    : dir_(std::move(dir)), max_(max_bytes), used_(used) {
  fork_guard(&mu_);
  fork_guard(&evict_mu_);
}

PieceCache::~PieceCache() {
  fork_unguard(&evict_mu_);
  fork_unguard(&mu_);
}

uint32_t PieceCache::folder_number(const std::string& folder, const std::string& url) {
  // By the folder's name: the same folder whatever the path to it is spelled as.
  const std::string name = fs::path(folder).filename().string();
  const auto [it, added] = folder_numbers_.emplace(name, static_cast<uint32_t>(folder_list_.size()));
  if (added) folder_list_.emplace_back(folder, url);
  return it->second;
}

std::shared_ptr<const ObjectUses> PieceCache::uses() const {
  std::lock_guard<std::mutex> lock(evict_mu_);
  return uses_.lock();
}

void PieceCache::set_uses(const std::shared_ptr<const ObjectUses>& uses) {
  std::lock_guard<std::mutex> lock(evict_mu_);
  uses_ = uses;
  by_next_.clear();
  for (auto& [key, p] : known_) {
    p.ranked = false;
    p.last = ObjectUses::kNever;  // steps of the uses before (another loader's, maybe): not these
    rank(key, p, uses.get());
  }
}

void PieceCache::rank(uint64_t key, Known& p, const ObjectUses* uses) {
  if (!p.counted || uses == nullptr) return;
  const std::string& url = folder_list_[p.folder].second;
  if (!uses->reads(url)) return;
  const uint64_t start = ObjectUses::step(uses->epoch(), 0);
  const uint64_t from = p.last == ObjectUses::kNever ? start : std::max(start, p.last + 1);
  p.next = uses->next_use(url, key & 0xffffffffu, from);
  // A piece the epoch never uses: let go first when this process kept it
  // (an earlier phase's); one found in the folder may be another's in use.
  if (p.next == ObjectUses::kNever && !p.mine) return;
  if (p.next == ObjectUses::kNever) p.next = ObjectUses::kNever - 1;
  p.ranked = true;
  by_next_.emplace(p.next, key);
}

void PieceCache::note(uint32_t folder, uint64_t k, uint64_t bytes, bool counted, uint64_t at, const ObjectUses* uses) {
  if (max_ == 0) return;  // no bound: nothing is let go
  const uint64_t key = key_of(folder, k);
  auto [it, added] = known_.try_emplace(key, Known{folder, bytes, 0, false, counted, ObjectUses::kNever, counted});
  Known& p = it->second;
  p.counted = p.counted || counted;
  p.mine = p.mine || counted;                      // counted when kept here
  if (at == ObjectUses::kNever && !added) return;  // no step: its rank stays
  if (at != ObjectUses::kNever) p.last = p.last == ObjectUses::kNever ? at : std::max(p.last, at);
  if (p.ranked) by_next_.erase({p.next, key});
  p.ranked = false;
  rank(key, p, uses);
}

void PieceCache::forget(const std::string& folder, const ObjectInfo& o, uint64_t k) {
  if (max_ == 0) return;
  std::lock_guard<std::mutex> lock(evict_mu_);
  drop_known(key_of(folder_number(folder, o.url), k));
}

void PieceCache::drop_known(uint64_t key) {
  const auto it = known_.find(key);
  if (it == known_.end()) return;
  if (it->second.ranked) by_next_.erase({it->second.next, key});
  if (it->second.counted) {
    used_.fetch_sub(std::min(it->second.bytes, used_.load(std::memory_order_relaxed)), std::memory_order_relaxed);
  }
  known_.erase(it);
}

bool PieceCache::let_go_one(uint64_t next) {
  if (by_next_.empty() || std::prev(by_next_.end())->first <= next) return false;
  const auto last = std::prev(by_next_.end());
  const uint64_t key = last->second;
  const auto it = known_.find(key);
  if (it == known_.end()) {  // never (a ranked piece is known): not a piece to let go
    by_next_.erase(last);
    return true;
  }
  // Removed, then forgotten with its room back (a ranked piece is counted).
  ::unlink(absl::StrCat(folder_list_[it->second.folder].first, "/", key & 0xffffffffu).c_str());
  drop_known(key);
  counters().cache_let_go.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::string PieceCache::folder_of(const ObjectInfo& o) {
  const std::string id = id_of(o);
  std::string usable;
  std::vector<Version> old;  // removed after the lock: reads of other objects go on
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = folders_.find(id); it != folders_.end()) return it->second;
    const std::string folder = absl::StrCat(dir_, "/", folder_name(o.url, id));
    std::error_code ec;
    fs::create_directories(folder, ec);
    const std::string id_path = folder + "/id";
    std::string have = read_small(id_path);  // "" also for a FIFO or other non-file, which publish replaces
    if (!have.empty() && have != id) {
      // Another id under this version's name (which is the id's hash): the
      // id is damaged. Its pieces are removed (their room back) and it is
      // written again: else the object was never kept, and its pieces never
      // counted nor let go.
      for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
        if (piece_or_temporary(e.path().filename().string())) fs::remove_all(e.path(), ec);
      }
      ec.clear();
      forget_folder(folder, o.url, o.size);
      counters().cache_damaged.fetch_add(1, std::memory_order_relaxed);
      have.clear();
    }
    if (have == id || (have.empty() && publish(id_path, id.data(), id.size(), nullptr, 0))) {
      // Written by another process meanwhile: it is the same id, or it is not ours.
      if (read_small(id_path) == id) usable = folder;
    }
    folders_[id] = usable;
    // The object's other versions found at open (it was rewritten: their
    // bytes are never read again by a loader that lists it now) go.
    if (auto it = versions_.find(o.url); it != versions_.end() && !usable.empty()) {
      for (Version& v : it->second) {
        if (fs::path(v.folder).filename() != fs::path(folder).filename()) old.push_back(std::move(v));
      }
      versions_.erase(it);
    }
  }
  for (const Version& v : old) {
    std::error_code ec;
    fs::remove_all(v.folder, ec);
    forget_folder(v.folder, o.url, v.size);  // their room back
    counters().cache_old_versions.fetch_add(1, std::memory_order_relaxed);
  }
  return usable;
}

void PieceCache::forget_folder(const std::string& folder, const std::string& url, uint64_t size) {
  if (max_ == 0) return;  // nothing known
  std::lock_guard<std::mutex> evict(evict_mu_);
  const uint32_t number = folder_number(folder, url);
  for (uint64_t k = 0; k * kPiece < size; ++k) drop_known(key_of(number, k));
}

void PieceCache::folder_gone(const ObjectInfo& o, const std::string& piece) {
  const std::string folder = piece.substr(0, piece.rfind('/'));
  if (::access(folder.c_str(), F_OK) == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  folders_.erase(id_of(o));  // made again at the next read or keep
}

bool PieceCache::has_room(uint64_t bytes) const { return max_ == 0 || used() + bytes <= max_; }

bool PieceCache::wants(const ObjectInfo& o, uint64_t start, uint64_t end, uint64_t at) {
  const std::string folder = folder_of(o);
  if (folder.empty()) return false;
  const std::shared_ptr<const ObjectUses> u = at == ObjectUses::kNever ? nullptr : uses();
  // Which pieces are here: a file system call each, made before the lock.
  std::vector<std::pair<uint64_t, bool>> pieces;  // (number, here)
  for (uint64_t k = start / kPiece; k * kPiece < end && piece_length(o, k) > 0; ++k) {
    pieces.emplace_back(k, ::access(absl::StrCat(folder, "/", k).c_str(), F_OK) == 0);
  }
  std::lock_guard<std::mutex> lock(evict_mu_);
  const uint32_t number = folder_number(folder, o.url);
  bool wanted = false;
  for (const auto& [k, here] : pieces) {
    const uint64_t len = piece_length(o, k);
    if (here) {
      note(number, k, len + 4, false, at, u.get());  // used now: ranked by its next use
      continue;
    }
    // Known but gone from the folder (removed by hand, or by another
    // process): its room back. Not while a connection keeps it, nor when
    // one kept it since it was looked at.
    const uint64_t key = key_of(number, k);
    if (!keeping_.contains(key) && known_.contains(key) && ::access(absl::StrCat(folder, "/", k).c_str(), F_OK) != 0) {
      drop_known(key);
    }
    if (wanted) continue;
    // Whole pieces are fetched while one missing here is kept: asking room
    // for the whole span left a bound just above the dataset without the
    // pieces read last, fetched every epoch.
    wanted = has_room(len + 4) ||
             (u != nullptr && !by_next_.empty() && u->next_use(o.url, k, at + 1) < std::prev(by_next_.end())->first);
  }
  return wanted;
}

bool PieceCache::reserve(uint64_t bytes) {
  uint64_t now = used_.load(std::memory_order_relaxed);
  do {
    if (max_ != 0 && now + bytes > max_) return false;
  } while (!used_.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
  return true;
}

bool PieceCache::read(const ObjectInfo& o, uint64_t offset, std::span<std::byte> dest, uint64_t at) {
  if (dest.empty() || offset + dest.size() > o.size) return false;
  const std::string folder = folder_of(o);
  if (folder.empty()) return false;
  thread_local std::vector<std::byte> piece;
  uint64_t from = offset;
  size_t done = 0;
  while (done < dest.size()) {
    const uint64_t k = from / kPiece;
    const uint64_t len = piece_length(o, k);
    const std::string path = absl::StrCat(folder, "/", k);
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO: not waited on
    if (fd < 0) return false;
    if (struct stat kind{}; ::fstat(fd, &kind) != 0 || !S_ISREG(kind.st_mode)) {
      ::close(fd);
      std::error_code ec;
      fs::remove_all(path, ec);  // not a piece (a folder too): fetched again, and kept in its place
      forget(folder, o, k);
      counters().cache_damaged.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    piece.resize(len + 4);
    ssize_t got = 0;
    size_t total = 0;
    while (total < piece.size() &&
           (got = ::pread(fd, piece.data() + total, piece.size() - total, static_cast<off_t>(total))) > 0) {
      total += static_cast<size_t>(got);
    }
    struct stat st {};
    const bool sized = ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == len + 4;
    ::close(fd);
    uint32_t crc = 0;
    if (total == piece.size()) std::memcpy(&crc, piece.data() + len, 4);
    if (!sized || total != piece.size() || piece_crc(o, k, piece.data(), len) != crc) {
      ::unlink(path.c_str());  // damaged: fetched again
      forget(folder, o, k);
      counters().cache_damaged.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    const uint64_t in_piece = from - k * kPiece;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len - in_piece, dest.size() - done));
    std::memcpy(dest.data() + done, piece.data() + in_piece, n);
    done += n;
    from += n;
  }
  // Used now: ranked by the next use.
  const std::shared_ptr<const ObjectUses> u = at == ObjectUses::kNever ? nullptr : uses();
  if (u == nullptr) return true;
  std::lock_guard<std::mutex> lock(evict_mu_);
  const uint32_t number = folder_number(folder, o.url);
  for (uint64_t k = offset / kPiece; k * kPiece < offset + dest.size(); ++k) {
    note(number, k, piece_length(o, k) + 4, false, at, u.get());
  }
  return true;
}

void PieceCache::keep(const ObjectInfo& o, uint64_t start, std::span<const std::byte> bytes, uint64_t at) {
  if (start % kPiece != 0) return;
  const std::string folder = folder_of(o);
  if (folder.empty()) return;
  const std::shared_ptr<const ObjectUses> u = at == ObjectUses::kNever ? nullptr : uses();
  for (uint64_t k = start / kPiece;; ++k) {
    const uint64_t len = piece_length(o, k);
    const uint64_t rel = k * kPiece - start;
    if (len == 0 || rel + len > bytes.size()) break;
    const std::string path = absl::StrCat(folder, "/", k);
    if (::access(path.c_str(), F_OK) == 0) continue;
    // One connection keeps a piece at a time: another fetching it at once
    // neither takes room for it nor lets a piece go for it.
    uint64_t key = 0;
    {
      std::lock_guard<std::mutex> lock(evict_mu_);
      key = key_of(folder_number(folder, o.url), k);
      if (!keeping_.insert(key).second) continue;
    }
    // Looked at once this connection keeps it (another may have just kept it).
    if (::access(path.c_str(), F_OK) != 0) {
      {
        // Known but not there (another process let it go, or it was
        // damaged): its room given back, and taken again below.
        std::lock_guard<std::mutex> lock(evict_mu_);
        drop_known(key);
      }
      try {
        keep_one(o, static_cast<uint32_t>(key >> 32), k, path, bytes.subspan(rel, len), at, u.get());
      } catch (const std::bad_alloc&) {  // no memory to write it: not kept
      }
    }
    std::lock_guard<std::mutex> lock(evict_mu_);
    keeping_.erase(key);  // a piece after it may be smaller (an object's last), and fit
  }
}

void PieceCache::keep_one(const ObjectInfo& o, uint32_t folder, uint64_t k, const std::string& path,
                          std::span<const std::byte> bytes, uint64_t at, const ObjectUses* u) {
  const uint64_t room = bytes.size() + 4;
  if (!reserve(room)) {
    if (u == nullptr) return;
    // Full: in place of the piece used last, when used before it.
    std::lock_guard<std::mutex> lock(evict_mu_);
    const uint64_t next = u->next_use(o.url, k, at + 1);
    bool fits = false;
    while (!(fits = reserve(room)) && let_go_one(next)) {}
    if (!fits) return;
  }
  const uint32_t crc = piece_crc(o, k, bytes.data(), bytes.size());
  if (publish(path, bytes.data(), bytes.size(), &crc, 4, /*replace=*/false)) {
    counters().cache_kept.fetch_add(bytes.size(), std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(evict_mu_);
    note(folder, k, room, true, at, u);
  } else {
    used_.fetch_sub(room, std::memory_order_relaxed);  // not written: its room back
    folder_gone(o, path);                              // removed by another process (damaged, an old version)?
  }
}

}  // namespace dlfeed::s3::detail
