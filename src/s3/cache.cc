// SPDX-License-Identifier: Apache-2.0
#include "s3/cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  // What the folder holds counts against the bound, but for folders of an
  // earlier format (their `id` says another), which are never read.
  uint64_t used = 0;
  for (auto it = fs::recursive_directory_iterator(o.dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it.depth() == 0 && it->is_directory(ec)) {
      const std::string id = read_small((it->path() / "id").string());
      if (id.substr(0, id.find('\n')) != kFormatLine) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(ec)) used += it->file_size(ec);
  }
  return std::shared_ptr<PieceCache>(new PieceCache(o.dir, o.max_bytes, used));
}

PieceCache::PieceCache(std::string dir, uint64_t max_bytes, uint64_t used)
    : dir_(std::move(dir)), max_(max_bytes), used_(used) {
  fork_guard(&mu_);
}

PieceCache::~PieceCache() { fork_unguard(&mu_); }

std::string PieceCache::folder_of(const ObjectInfo& o) {
  const std::string id = id_of(o);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = folders_.find(id); it != folders_.end()) return it->second;
  const std::string folder = absl::StrFormat("%s/%016x-%016x", dir_, fnv1a(o.url), fnv1a(id));
  std::string usable;
  std::error_code ec;
  fs::create_directories(folder, ec);
  const std::string id_path = folder + "/id";
  const std::string have = read_small(id_path);  // "" also for a FIFO or other non-file, which publish replaces
  if (have == id || (have.empty() && publish(id_path, id.data(), id.size(), nullptr, 0))) {
    // Written by another process meanwhile: it is the same id, or it is not ours.
    if (read_small(id_path) == id) usable = folder;
  }
  folders_[id] = usable;
  return usable;
}

bool PieceCache::has_room(uint64_t bytes) const { return max_ == 0 || used() + bytes <= max_; }

uint64_t PieceCache::smallest_missing(const ObjectInfo& o, uint64_t start, uint64_t end) {
  const std::string folder = folder_of(o);
  if (folder.empty()) return 0;
  uint64_t smallest = 0;
  for (uint64_t k = start / kPiece; k * kPiece < end; ++k) {
    const uint64_t len = piece_length(o, k);
    if (len == 0) break;
    if (::access(absl::StrCat(folder, "/", k).c_str(), F_OK) != 0 && (smallest == 0 || len + 4 < smallest)) {
      smallest = len + 4;
    }
  }
  return smallest;
}

bool PieceCache::reserve(uint64_t bytes) {
  uint64_t now = used_.load(std::memory_order_relaxed);
  do {
    if (max_ != 0 && now + bytes > max_) return false;
  } while (!used_.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
  return true;
}

bool PieceCache::read(const ObjectInfo& o, uint64_t offset, std::span<std::byte> dest) {
  if (dest.empty() || offset + dest.size() > o.size) return false;
  const std::string folder = folder_of(o);
  if (folder.empty()) return false;
  thread_local std::vector<std::byte> piece;
  uint64_t at = offset;
  size_t done = 0;
  while (done < dest.size()) {
    const uint64_t k = at / kPiece;
    const uint64_t len = piece_length(o, k);
    const std::string path = absl::StrCat(folder, "/", k);
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO: not waited on
    if (fd < 0) return false;
    if (struct stat kind{}; ::fstat(fd, &kind) != 0 || !S_ISREG(kind.st_mode)) {
      ::close(fd);
      ::unlink(path.c_str());  // not a piece: fetched again
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
      counters().cache_damaged.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    const uint64_t in_piece = at - k * kPiece;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len - in_piece, dest.size() - done));
    std::memcpy(dest.data() + done, piece.data() + in_piece, n);
    done += n;
    at += n;
  }
  return true;
}

void PieceCache::keep(const ObjectInfo& o, uint64_t start, std::span<const std::byte> bytes) {
  if (start % kPiece != 0) return;
  const std::string folder = folder_of(o);
  if (folder.empty()) return;
  for (uint64_t k = start / kPiece;; ++k) {
    const uint64_t len = piece_length(o, k);
    const uint64_t rel = k * kPiece - start;
    if (len == 0 || rel + len > bytes.size()) break;
    const std::string path = absl::StrCat(folder, "/", k);
    if (::access(path.c_str(), F_OK) == 0) continue;
    if (!reserve(len + 4)) break;
    const uint32_t crc = piece_crc(o, k, bytes.data() + rel, len);
    if (publish(path, bytes.data() + rel, len, &crc, 4, /*replace=*/false)) {
      counters().cache_kept.fetch_add(len, std::memory_order_relaxed);
    } else {
      used_.fetch_sub(len + 4, std::memory_order_relaxed);  // not written: its room back
    }
  }
}

}  // namespace dlfeed::s3::detail
