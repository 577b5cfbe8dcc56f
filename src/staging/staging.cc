// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/staging/staging.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/thread_name.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/order/order.h"
#include "dlfeed/order/random.h"

namespace dlfeed::inline DLFEED_ABI::staging {
namespace {

constexpr size_t kChunk = 4 << 20;

uint64_t hash_path(absl::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, then mixed
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
  return mix64(h);
}

// Closes an fd on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// OK when the open file `fd` is `src` as indexed (its identity, when known).
absl::Status still_as_indexed(int fd, const Source& src) {
  const FileIdentity& want = src.identity;
  if (want == FileIdentity{}) return absl::OkStatus();
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error(src.path, "fstat for staging", errno);
  const FileIdentity now = detail::identity_of(st);
  if (detail::same_file_as_known(want, now)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(src.path, ": expected the file as the loader indexed it, found ",
                                          now.size != want.size     ? absl::StrCat("size ", want.size, " -> ", now.size)
                                          : now.inode != want.inode ? std::string("another inode (replaced)")
                                                                    : std::string("new modification or change times"),
                                          ": changed since, so it is not staged (read from the source, which the "
                                          "next epoch's start checks)"));
}

// The result of putting a finished copy `tmp` in place at `final_path`.
enum class Placed { kPlaced, kThere, kFailed };

// Puts `tmp` at `final_path` unless a file is there already (another
// process's copy of the same source: the same name is the same file's
// bytes, and a loader may be reading it, so it is never replaced).
// RENAME_NOREPLACE where the file system has it, else a hard link (NFS),
// else a plain rename. `keep_there(path)`: whether what is there is a
// complete copy (else it is replaced). Sets errno when it fails.
template <typename KeepThere>
Placed place_copy(const std::string& tmp, const std::string& final_path, KeepThere&& keep_there) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_NOREPLACE) == 0) return Placed::kPlaced;
  int err = errno;
  if (err == EINVAL || err == ENOSYS) {  // no RENAME_NOREPLACE here: link() fails with EEXIST as well
    if (::link(tmp.c_str(), final_path.c_str()) == 0) {
      ::unlink(tmp.c_str());
      return Placed::kPlaced;
    }
    err = errno;
    if (err != EEXIST && ::rename(tmp.c_str(), final_path.c_str()) == 0) return Placed::kPlaced;  // no links either
    if (err != EEXIST) return Placed::kFailed;
  }
  if (err != EEXIST) {
    errno = err;
    return Placed::kFailed;
  }
  if (keep_there(final_path)) {
    ::unlink(tmp.c_str());
    return Placed::kThere;
  }
  // Not a copy (a file of another size under its name; never one of ours): replaced.
  return ::rename(tmp.c_str(), final_path.c_str()) == 0 ? Placed::kPlaced : Placed::kFailed;
}

// A temporary name no other stager (of this or another process) uses.
std::string temporary_name(const std::string& dir, const std::string& name) {
  static std::atomic<uint64_t> next{0};
  return absl::StrCat(dir, "/.", name, ".tmp.", ::getpid(), ".", next.fetch_add(1));
}

}  // namespace

const char* status_name(FileStatus s) {
  switch (s) {
    case FileStatus::kPending: return "pending";
    case FileStatus::kStaged: return "staged";
    case FileStatus::kReused: return "reused";
    case FileStatus::kSkippedLimit: return "skipped (limit)";
    case FileStatus::kSkippedSpace: return "skipped (no space)";
    case FileStatus::kFailed: return "failed";
    case FileStatus::kCancelled: return "cancelled";
  }
  return "?";
}

namespace {
// Gives the copy open as `fd` its source's modified time (find_copy checks
// it); 0, or -1 with errno.
int source_mtime(int fd, const Source& source) {
  if (source.identity.mtime_ns == 0) return 0;
  const struct timespec times[2] = {{0, UTIME_OMIT},
                                    {static_cast<time_t>(source.identity.mtime_ns / 1000000000u),
                                     static_cast<long>(source.identity.mtime_ns % 1000000000u)}};
  return ::futimens(fd, times);
}
}  // namespace

std::string staged_name(const Source& source) {
  const std::string base = std::filesystem::path(source.path).filename().string();
  const FileIdentity& i = source.identity;
  const std::string id =
      absl::StrCat(source.path, "\n", i.size, ":", i.mtime_ns, ":", i.ctime_ns, ":", i.inode, ":", i.device);
  return absl::StrFormat("%016x-%d-%s", hash_path(id), source.size, base);
}

absl::Status stage_dir_outside_data(const std::string& dir, const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path stage = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) return absl::OkStatus();  // Stager::create says what is wrong with it
  for (const std::string& p : paths) {
    if (!fs::is_directory(p, ec)) continue;
    const fs::path data = fs::weakly_canonical(fs::absolute(p, ec), ec);
    if (ec) continue;
    auto d = data.begin(), s = stage.begin();
    while (d != data.end() && s != stage.end() && *d == *s) ++d, ++s;
    if (d == data.end() || (std::next(d) == data.end() && d->empty())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage.dir ", dir, " is inside the data folder ", p,
          ": its copies would be read as data by the next loader over that folder; give a staging folder outside it"));
    }
  }
  return absl::OkStatus();
}

std::vector<uint64_t> owned_files(const FileLayout& layout, const OrderCursor& cursor) {
  const OrderSpec& spec = cursor.spec();
  std::vector<uint64_t> out;
  const std::vector<uint64_t> bounds = cursor.global_order().rank_bounds();
  if (bounds.empty()) {
    for (uint64_t f = spec.rank; f < layout.num_files(); f += spec.world_size) out.push_back(f);
    return out;
  }
  std::set<uint64_t> files;
  const GlobalOrder& g = cursor.global_order();
  for (uint64_t p = bounds[spec.rank]; p < bounds[spec.rank + 1]; ++p) files.insert(layout.file_of(g.at(p)));
  return {files.begin(), files.end()};
}

struct Stager::Impl {
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<FileStatus> status;
  StageStats stats;
  std::atomic<bool> stop{false};
  bool started = false;
  std::thread thread;
};

Stager::Stager(StageOptions options, std::vector<Source> sources, Observer observer)
    : options_(std::move(options)),
      sources_(std::move(sources)),
      observer_(std::move(observer)),
      impl_(std::make_unique<Impl>()) {
  impl_->status.assign(sources_.size(), FileStatus::kPending);
  impl_->stats.files = sources_.size();
  impl_->stats.done = sources_.empty();
}

absl::StatusOr<std::unique_ptr<Stager>> Stager::create(StageOptions options, std::vector<Source> sources,
                                                       Observer observer) {
  if (options.dir.empty()) return absl::InvalidArgumentError("stage: no folder given");
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec)
    return absl::PermissionDeniedError(absl::StrCat(options.dir, ": cannot create the staging folder: ", ec.message()));
  if (!std::filesystem::is_directory(options.dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(options.dir, ": the staging folder is not a directory"));
  }
  if (::access(options.dir.c_str(), W_OK | X_OK) != 0) {
    return io_error(options.dir, "write into the staging folder", errno);
  }
  return std::unique_ptr<Stager>(new Stager(std::move(options), std::move(sources), std::move(observer)));
}

Stager::~Stager() {
  cancel();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void Stager::start() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->started) return;
  impl_->started = true;
  impl_->thread = std::thread([this] { run(); });
  detail::name_thread(impl_->thread, "dlfeed-stage");
}

void Stager::wait() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->cv.wait(lock, [&] { return impl_->stats.done || !impl_->started; });
}

void Stager::cancel() { impl_->stop = true; }

FileStatus Stager::status(size_t i) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->status.at(i);
}

std::string Stager::staged_path(size_t i) const {
  const FileStatus s = status(i);
  if (s != FileStatus::kStaged && s != FileStatus::kReused) return "";
  return (std::filesystem::path(options_.dir) / staged_name(sources_[i])).string();
}

StageStats Stager::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

std::string Stager::find_copy(const std::string& dir, const Source& source) {
  std::string p = (std::filesystem::path(dir) / staged_name(source)).string();
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  // A copy is given its source's modified time when it is placed: one
  // written since (damaged, or half-written by a crash without stage_sync)
  // has another, and is copied again.
  if (static_cast<uint64_t>(st.st_size) != source.size) return "";
  if (source.identity.mtime_ns != 0 && detail::mtime_ns_of(st) != source.identity.mtime_ns) return "";
  return p;
}

bool Stager::supports_direct(const std::string& dir) {
  const std::string p = (std::filesystem::path(dir) / absl::StrCat(".dlfeed-direct-probe.", ::getpid())).string();
  Fd w{::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
  if (w.fd < 0) return false;
  Fd r{::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT)};
  ::unlink(p.c_str());
  return r.fd >= 0;
}

void Stager::run() {
  uint64_t used = 0;
  for (size_t i = 0; i < sources_.size(); ++i) {
    FileStatus s = FileStatus::kCancelled;
    if (!impl_->stop) {
      if (observer_.on_file_begin) observer_.on_file_begin(i);
      s = copy_one(i, used);
      if (observer_.on_file_end) observer_.on_file_end(i, s);
    }
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->status[i] = s;
    StageStats& st = impl_->stats;
    const uint64_t size = sources_[i].size;
    switch (s) {
      case FileStatus::kStaged:
        ++st.staged;
        st.bytes_staged += size;
        break;
      case FileStatus::kReused:
        ++st.reused;
        st.bytes_staged += size;
        break;
      case FileStatus::kSkippedLimit:
        ++st.skipped_limit;
        st.bytes_skipped += size;
        break;
      case FileStatus::kSkippedSpace:
        ++st.skipped_space;
        st.bytes_skipped += size;
        break;
      case FileStatus::kFailed:
        ++st.failed;
        st.bytes_skipped += size;
        break;
      default: break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stats.done = true;
  }
  impl_->cv.notify_all();
}

FileStatus Stager::copy_one(size_t i, uint64_t& used) {
  const Source& src = sources_[i];
  if (!find_copy(options_.dir, src).empty()) {
    used += src.size;
    return FileStatus::kReused;
  }
  if (src.size > options_.limit_bytes || used + src.size > options_.limit_bytes) return FileStatus::kSkippedLimit;
  // Room for the copy's blocks and one more (its metadata): a small folder
  // (a 2 MiB tmpfs) takes the files that fit. A write that still finds the
  // folder full fails that copy, which is then read from the source.
  struct statvfs vfs {};
  if (::statvfs(options_.dir.c_str(), &vfs) == 0 && vfs.f_frsize > 0) {
    const uint64_t block = vfs.f_frsize;
    if (static_cast<uint64_t>(vfs.f_bavail) * block < (src.size + block - 1) / block * block + block) {
      return FileStatus::kSkippedSpace;
    }
  }
  const std::string final_path = (std::filesystem::path(options_.dir) / staged_name(src)).string();
  const std::string tmp_path = temporary_name(options_.dir, staged_name(src));
  auto fail = [&](const absl::Status& st) {
    ::unlink(tmp_path.c_str());
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stats.first_error.empty()) impl_->stats.first_error = st.ToString();
    return FileStatus::kFailed;
  };
  Fd in{::open(src.path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) return fail(io_error(src.path, "open for staging", errno));
  if (absl::Status same = still_as_indexed(in.fd, src); !same.ok()) return fail(same);
  Fd out{::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (out.fd < 0) return fail(io_error(tmp_path, "create the staging copy", errno));
  std::vector<char> buf(kChunk);
  uint64_t off = 0;
  while (true) {
    if (impl_->stop) {
      ::unlink(tmp_path.c_str());
      return FileStatus::kCancelled;
    }
    const ssize_t n = ::pread(in.fd, buf.data(), buf.size(), static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(io_error(src.path, off, "read for staging", errno));
    }
    if (n == 0) break;
    for (ssize_t w = 0; w < n;) {
      const ssize_t k = ::pwrite(out.fd, buf.data() + w, static_cast<size_t>(n - w), static_cast<off_t>(off + w));
      if (k < 0) {
        if (errno == EINTR) continue;
        return fail(io_error(tmp_path, off + w, "write the staging copy", errno));
      }
      w += k;
    }
    off += static_cast<uint64_t>(n);
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->stats.bytes_copied += static_cast<uint64_t>(n);
    }
    if (observer_.on_bytes) observer_.on_bytes(static_cast<uint64_t>(n));
    if (off > src.size) break;
  }
  if (off != src.size) {
    return fail(absl::DataLossError(absl::StrCat(src.path, ": at offset ", off, ": expected ", src.size,
                                                 " bytes (its size when the loader opened it), found ",
                                                 off > src.size ? "more" : absl::StrCat(off))));
  }
  // A rewrite while it was copied moves the change time: the copy is not the indexed file's.
  if (absl::Status same = still_as_indexed(in.fd, src); !same.ok()) return fail(same);
  if (source_mtime(out.fd, src) != 0) return fail(io_error(tmp_path, "set the staging copy's modified time", errno));
  if (options_.sync && ::fsync(out.fd) != 0) return fail(io_error(tmp_path, "fsync the staging copy", errno));
  if (::close(std::exchange(out.fd, -1)) != 0) return fail(io_error(tmp_path, "close the staging copy", errno));
  const Placed placed =
      place_copy(tmp_path, final_path, [&](const std::string&) { return !find_copy(options_.dir, src).empty(); });
  if (placed == Placed::kFailed) return fail(io_error(final_path, "rename the staging copy into place", errno));
  if (placed == Placed::kThere) {
    used += src.size;
    return FileStatus::kReused;
  }
  used += src.size;
  return FileStatus::kStaged;
}

}  // namespace dlfeed::staging
