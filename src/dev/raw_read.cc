// SPDX-License-Identifier: Apache-2.0
#include "dev/raw_read.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "dlfeed/batch/batch.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/io/io_backend.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// One extent to read; `last` marks the last extent of its sample, the only
/// place a bounded measurement may stop.
struct Piece {
  uint64_t id;
  uint32_t extent;
  uint32_t file;
  uint64_t offset;
  uint64_t length;
  bool last;
};

std::vector<Piece> pieces_of(const SampleIndex& index, std::span<const uint64_t> ids, uint64_t* max_len) {
  std::vector<Piece> out;
  out.reserve(ids.size());
  SampleRef r;
  for (uint64_t id : ids) {
    index.ref(id, r);
    for (size_t k = 0; k < r.extents.size(); ++k) {
      out.push_back(
          {id, static_cast<uint32_t>(k), r.file, r.extents[k].offset, r.extents[k].length, k + 1 == r.extents.size()});
      *max_len = std::max(*max_len, r.extents[k].length);
    }
  }
  return out;
}

/// Whether to stop before piece `next` (only at a sample boundary).
bool should_stop(const std::vector<Piece>& pieces, size_t next, uint64_t bytes, Clock::time_point t0,
                 const RawReadOptions& o) {
  if (next == 0 || !pieces[next - 1].last) return false;
  if (o.max_bytes > 0 && bytes >= o.max_bytes) return true;
  return o.max_seconds > 0 && since(t0) >= o.max_seconds;
}

absl::StatusOr<RawReadResult> read_pread(const SampleIndex& index, const std::vector<Piece>& pieces, uint64_t max_len,
                                         const RawReadOptions& o) {
  std::vector<int> fds(index.files.size(), -1);
  struct Closer {
    std::vector<int>* fds;
    ~Closer() {
      for (int fd : *fds) {
        if (fd >= 0) ::close(fd);
      }
    }
  } closer{&fds};
  ByteBuffer buf(std::max<uint64_t>(1, max_len));
  RawReadResult r;
  const auto t0 = Clock::now();
  size_t i = 0;
  for (; i < pieces.size(); ++i) {
    if (should_stop(pieces, i, r.bytes, t0, o)) break;
    const Piece& p = pieces[i];
    const std::string& path = index.files[p.file];
    if (fds[p.file] < 0) {
      fds[p.file] = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fds[p.file] < 0) return io_error(path, "open", errno);
    }
    uint64_t done = 0;
    while (done < p.length) {
      const ssize_t n = ::pread(fds[p.file], buf.data(), p.length - done, static_cast<off_t>(p.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return io_error(path, p.offset + done, "pread", errno);
      if (n == 0) {
        return format_error(path, p.offset + done,
                            absl::StrCat(p.length - done, " more bytes of the extent at ", p.offset, "+", p.length),
                            "the end of the file");
      }
      done += static_cast<uint64_t>(n);
    }
    if (o.on_extent) o.on_extent(p.id, p.extent, std::span<const std::byte>(buf.data(), p.length));
    r.bytes += p.length;
    ++r.requests;
    if (p.last) ++r.samples;
  }
  r.seconds = since(t0);
  r.truncated = i < pieces.size();
  return r;
}

absl::StatusOr<RawReadResult> read_uring(const SampleIndex& index, const std::vector<Piece>& pieces, uint64_t max_len,
                                         const RawReadOptions& o) {
  const uint32_t qd = std::max<uint32_t>(1, o.queue_depth);
  auto files = std::make_shared<FileTable>();
  for (const std::string& f : index.files) files->add(f);
  IoOptions io;
  io.kind = IoKind::kIoUring;
  io.queue_depth = qd;
  io.max_bytes_in_flight = 0;  // exactly qd reads in the kernel, whatever their size
  DLFEED_ASSIGN_OR_RETURN(std::unique_ptr<IoBackend> backend, make_io_backend(files, io));
  // One buffer per queue slot; the queue is kept full.
  std::vector<ByteBuffer> bufs(qd, ByteBuffer(std::max<uint64_t>(1, max_len)));
  std::vector<uint32_t> free_slots;
  for (uint32_t s = qd; s-- > 0;) free_slots.push_back(s);
  std::vector<size_t> piece_in_slot(qd, 0);
  std::vector<ReadCompletion> done;
  std::vector<ReadRequest> batch;
  RawReadResult r;
  uint64_t submitted_bytes = 0;
  size_t next = 0;
  bool stopped = false;
  const auto t0 = Clock::now();
  while ((!stopped && next < pieces.size()) || backend->in_flight() > 0) {
    batch.clear();
    while (!stopped && next < pieces.size() && !free_slots.empty()) {
      if (should_stop(pieces, next, submitted_bytes, t0, o)) {
        stopped = true;
        break;
      }
      const Piece& p = pieces[next];
      const uint32_t slot = free_slots.back();
      free_slots.pop_back();
      piece_in_slot[slot] = next;
      batch.push_back({p.file, p.offset, p.length, bufs[slot].data(), slot});
      submitted_bytes += p.length;
      ++next;
    }
    if (!batch.empty()) DLFEED_RETURN_IF_ERROR(backend->submit(batch));
    done.clear();
    backend->reap(done, 1, std::chrono::seconds(10));
    for (const ReadCompletion& c : done) {
      if (!c.status.ok()) return c.status;
      const auto slot = static_cast<uint32_t>(c.user_data);
      const Piece& p = pieces[piece_in_slot[slot]];
      if (o.on_extent) o.on_extent(p.id, p.extent, std::span<const std::byte>(bufs[slot].data(), c.bytes));
      free_slots.push_back(slot);
      r.bytes += c.bytes;
      ++r.requests;
      if (p.last) ++r.samples;
    }
  }
  r.seconds = since(t0);
  r.truncated = next < pieces.size();
  return r;
}

}  // namespace

absl::string_view raw_reader_name(RawReader reader) { return reader == RawReader::kIoUring ? "io_uring" : "pread"; }

absl::StatusOr<RawReadResult> raw_read(const SampleIndex& index, std::span<const uint64_t> ids,
                                       const RawReadOptions& options) {
  for (uint64_t id : ids) {
    if (id >= index.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("raw_read: sample id ", id, " is not below the dataset's ", index.size(), " samples"));
    }
    const uint32_t file = index.file_of(id);
    if (index.sources[file]->reads_through_library()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index.files[file], ": sample ", id,
                       " has no byte extents (a layout read through libhdf5), so its raw reads cannot be measured"));
    }
  }
  uint64_t max_len = 0;
  const std::vector<Piece> pieces = pieces_of(index, ids, &max_len);
  if (options.reader == RawReader::kPread) return read_pread(index, pieces, max_len, options);
  return read_uring(index, pieces, max_len, options);
}

absl::Status evict_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path, "open (to drop its cached pages)", errno);
  // Dirty pages cannot be dropped; a read-only fd may fdatasync. EINVAL: a
  // file system without sync support, nothing to write back.
  if (::fdatasync(fd) != 0 && errno != EINVAL) {
    const int err = errno;
    ::close(fd);
    return io_error(path, "fdatasync", err);
  }
  const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // returns the error, not errno
  ::close(fd);
  if (rc != 0) return io_error(path, "posix_fadvise(DONTNEED)", rc);
  return absl::OkStatus();
}

absl::Status evict_pages(std::span<const std::string> paths) {
  for (const std::string& p : paths) DLFEED_RETURN_IF_ERROR(evict_pages(p));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> resident_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path, "open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error(path, "fstat", err);
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return uint64_t{0};
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (map == MAP_FAILED) return io_error(path, "mmap", map_err);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size + page - 1) / page);
  const int rc = ::mincore(map, size, vec.data());
  const int err = errno;
  ::munmap(map, size);
  if (rc != 0) return io_error(path, "mincore", err);
  uint64_t resident = 0;
  for (size_t i = 0; i < vec.size(); ++i) {
    if (vec[i] & 1) resident += std::min(page, size - i * page);
  }
  return resident;
}

}  // namespace dlfeed
