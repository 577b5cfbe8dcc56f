// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/detail/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <vector>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "dlfeed/io/object_store.h"

namespace dlfeed::inline DLFEED_ABI::detail {

namespace {
std::atomic<uint64_t> g_opens{0};
std::atomic<uint64_t> g_stats{0};
}  // namespace

uint64_t file_opens() { return g_opens.load(std::memory_order_relaxed); }
uint64_t file_stats() { return g_stats.load(std::memory_order_relaxed); }

int stat_path(const char* path, struct stat* st) {
  g_stats.fetch_add(1, std::memory_order_relaxed);
  return ::stat(path, st);
}

uint64_t mtime_ns_of(const struct stat& st) {
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + static_cast<uint64_t>(st.st_mtim.tv_nsec);
}

FileIdentity identity_of(const struct stat& st) {
  return {static_cast<uint64_t>(st.st_size), mtime_ns_of(st), static_cast<uint64_t>(st.st_ino),
          static_cast<uint64_t>(st.st_dev),
          static_cast<uint64_t>(st.st_ctim.tv_sec) * 1000000000ull + static_cast<uint64_t>(st.st_ctim.tv_nsec)};
}

bool same_file_as_known(const FileIdentity& known, const FileIdentity& now) {
  return known.size == now.size && known.mtime_ns == now.mtime_ns && known.inode == now.inode &&
         (known.device == 0 || known.device == now.device) && (known.ctime_ns == 0 || known.ctime_ns == now.ctime_ns);
}

std::string file_changes(const FileIdentity& known, const FileIdentity& now) {
  std::string what;
  if (now.size != known.size) absl::StrAppend(&what, "size ", known.size, " -> ", now.size, " bytes; ");
  if (known.device != 0 && now.device != known.device) absl::StrAppend(&what, "another device; ");
  if (now.inode != known.inode) absl::StrAppend(&what, "another inode; ");
  if (now.mtime_ns != known.mtime_ns) absl::StrAppend(&what, "a new modification time; ");
  if (known.ctime_ns != 0 && now.ctime_ns != known.ctime_ns) absl::StrAppend(&what, "a new change time; ");
  if (!what.empty()) what.resize(what.size() - 2);
  return what;
}

// An object's bytes, read a block at a time: parsing a header asks for a
// few bytes here and there, each of which would be a request.
struct File::Remote {
  static constexpr uint64_t kBlock = 256 * 1024;
  std::shared_ptr<ObjectStore> store;
  ObjectInfo object;  // the version opened: every read is of it
  std::mutex mu;
  std::vector<std::byte> block;
  uint64_t block_at = 0;
};

FileIdentity object_identity_of(const ObjectInfo& info) {
  FileIdentity id;
  id.size = info.size;
  // The ETag bare (no W/, no quotes): a HEAD and a listing may quote it apart.
  absl::string_view etag = info.etag;
  absl::ConsumePrefix(&etag, "W/");
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  if (etag.empty()) return id;         // inode 0: no version to tell apart
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the ETag
  for (const char c : etag) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  id.inode = h | 1;
  return id;
}

absl::StatusOr<FileIdentity> object_identity(const std::string& url) {
  DLFEED_ASSIGN_OR_RETURN(std::shared_ptr<ObjectStore> store, object_store_for(url));
  DLFEED_ASSIGN_OR_RETURN(ObjectInfo info, store->head(url));
  return object_identity_of(info);
}

namespace {
absl::Status object_version_error(const std::string& url, const FileIdentity& indexed, const FileIdentity& now,
                                  absl::string_view etag_now) {
  if (now.size == indexed.size && (indexed.inode == 0 || now.inode == indexed.inode)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      url, ": the object changed since it was indexed (", indexed.size, " bytes then; ", now.size, " bytes",
      etag_now.empty() ? "" : absl::StrCat(" and ETag ", etag_now), now.inode != indexed.inode ? ", another ETag" : "",
      " now): its new bytes are not read with the old index; make the loader again to read them"));
}
}  // namespace

absl::Status check_object_version(const std::string& url, const FileIdentity& indexed, const ObjectInfo& now) {
  return object_version_error(url, indexed, object_identity_of(now), now.etag);
}

absl::Status check_object_version(const std::string& url, const FileIdentity& indexed, const FileIdentity& now) {
  return object_version_error(url, indexed, now, "");
}

absl::StatusOr<File> open_object_version(const std::string& url, const std::optional<FileIdentity>& indexed) {
  DLFEED_ASSIGN_OR_RETURN(File object, File::open(url));
  if (indexed) DLFEED_RETURN_IF_ERROR(check_object_version(url, *indexed, object.identity()));
  return object;
}

absl::StatusOr<File> File::open_remote(const std::string& url) {
  DLFEED_ASSIGN_OR_RETURN(std::shared_ptr<ObjectStore> store, object_store_for(url));
  DLFEED_ASSIGN_OR_RETURN(ObjectInfo info, store->head(url));
  File f;
  f.path_ = url;
  f.size_ = info.size;
  f.identity_ = object_identity_of(info);
  f.remote_ = std::make_shared<Remote>();
  f.remote_->store = std::move(store);
  f.remote_->object = std::move(info);
  return f;
}

absl::StatusOr<File> File::open(const std::string& path) {
  g_opens.fetch_add(1, std::memory_order_relaxed);
  if (is_object_url(path)) return open_remote(path);
  File f;
  f.path_ = path;
  // Not blocking: a FIFO's open waits for a writer, its reads for data.
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (f.fd_ < 0) return io_error(path, "open", errno);
  struct stat st {};
  if (::fstat(f.fd_, &st) != 0) return io_error(path, "fstat", errno);
  if (S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, expected a file"));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is not a regular file (",
                                                   S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket",
                                                   "), expected a data file"));
  }
  ::fcntl(f.fd_, F_SETFL, ::fcntl(f.fd_, F_GETFL) & ~O_NONBLOCK);
  f.size_ = static_cast<uint64_t>(st.st_size);
  f.identity_ = identity_of(st);
  return f;
}

File::File(File&& o) noexcept
    : remote_(std::move(o.remote_)),
      fd_(std::exchange(o.fd_, -1)),
      size_(o.size_),
      identity_(o.identity_),
      path_(std::move(o.path_)) {}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    remote_ = std::move(o.remote_);
    fd_ = std::exchange(o.fd_, -1);
    size_ = o.size_;
    identity_ = o.identity_;
    path_ = std::move(o.path_);
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status File::read_exact(uint64_t offset, std::span<std::byte> out, absl::string_view what) const {
  if (offset > size_ || out.size() > size_ - offset) {
    return format_error(path_, offset, absl::StrCat(out.size(), " bytes of ", what),
                        absl::StrCat(offset > size_ ? 0 : size_ - offset, " bytes before the end of the file (file is ",
                                     size_, " bytes)"));
  }
  DLFEED_ASSIGN_OR_RETURN(size_t got, read_some(offset, out));
  if (got != out.size()) {
    return format_error(path_, offset + got, absl::StrCat(out.size(), " bytes of ", what),
                        absl::StrCat("end of file after ", got, " bytes (file shrank while reading?)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> File::read_some(uint64_t offset, std::span<std::byte> out) const {
  if (!remote_) return pread_full(fd_, out, offset, path_);
  if (offset >= size_ || out.empty()) return 0;
  const size_t want = static_cast<size_t>(std::min<uint64_t>(out.size(), size_ - offset));
  Remote& r = *remote_;
  // Large reads go straight to the caller's buffer.
  if (want >= Remote::kBlock) return r.store->read(r.object, offset, out.first(want));
  std::lock_guard<std::mutex> lock(r.mu);
  if (offset < r.block_at || offset + want > r.block_at + r.block.size()) {
    r.block.resize(static_cast<size_t>(std::min<uint64_t>(Remote::kBlock, size_ - offset)));
    absl::StatusOr<size_t> got = r.store->read(r.object, offset, std::span<std::byte>(r.block));
    if (!got.ok()) {  // no partial block kept
      r.block.clear();
      r.block_at = 0;
      return got.status();
    }
    r.block.resize(*got);
    r.block_at = offset;
  }
  const size_t have = static_cast<size_t>(std::min<uint64_t>(want, r.block_at + r.block.size() - offset));
  std::memcpy(out.data(), r.block.data() + (offset - r.block_at), have);
  return have;
}

absl::StatusOr<size_t> pread_full(int fd, std::span<std::byte> out, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return io_error(path, offset + done, "pread", errno);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace dlfeed::detail
