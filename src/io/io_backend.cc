// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/io/io_backend.h"

#include <fcntl.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dlfeed/error.h"
#include "dlfeed/io/file_table.h"
#include "io/read_op.h"

namespace dlfeed::inline DLFEED_ABI {

absl::string_view io_kind_name(IoKind kind) {
  switch (kind) {
    case IoKind::kAuto: return "auto";
    case IoKind::kIoUring: return "io_uring";
    case IoKind::kThreadPool: return "thread_pool";
    case IoKind::kSync: return "sync";
  }
  return "?";
}

absl::StatusOr<IoKind> parse_io_kind(absl::string_view name) {
  for (IoKind k : {IoKind::kAuto, IoKind::kIoUring, IoKind::kThreadPool, IoKind::kSync}) {
    if (name == io_kind_name(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown I/O backend '", name, "', expected one of auto, io_uring, thread_pool, sync"));
}

absl::Status io_uring_available() {
  // Probed once per process, with no lock: a function-local static's guard,
  // held by a thread probing (a ring made and closed, about 1 ms) when
  // another forks, is held in the child for good, and the child's first
  // loader would wait on it forever. A thread that finds no answer probes
  // itself; the first answer is kept (and never freed).
  static std::atomic<const absl::Status*> answer{nullptr};  // constant-initialized: no guard
  if (const absl::Status* known = answer.load(std::memory_order_acquire)) return *known;
  auto* mine = new absl::Status(detail::probe_io_uring());
  const absl::Status* first = nullptr;
  if (answer.compare_exchange_strong(first, mine, std::memory_order_acq_rel)) return *mine;
  delete mine;
  return *first;
}

absl::StatusOr<std::unique_ptr<IoBackend>> make_io_backend(std::shared_ptr<FileTable> files, IoOptions options) {
  if (files == nullptr) return absl::InvalidArgumentError("make_io_backend: no FileTable");
  if (options.direct != files->direct()) {
    return absl::InvalidArgumentError(
        absl::StrCat("make_io_backend: IoOptions::direct is ", options.direct ? "true" : "false",
                     " but the FileTable opens files ", files->direct() ? "with" : "without",
                     " O_DIRECT; make the table with FileTableOptions::direct = ", options.direct ? "true" : "false"));
  }
  uint32_t threads = options.threads == 0 ? 1 : options.threads;
  switch (options.kind) {
    case IoKind::kSync: return detail::make_pread_backend(std::move(files), options, 0);
    case IoKind::kThreadPool: return detail::make_pread_backend(std::move(files), options, threads);
    case IoKind::kIoUring: {
      DLFEED_RETURN_IF_ERROR(io_uring_available());
      return detail::make_uring_backend(std::move(files), options);
    }
    case IoKind::kAuto: {
      absl::Status why = io_uring_available();
      if (why.ok()) {
        auto uring = detail::make_uring_backend(files, options);
        if (uring.ok()) return uring;
        why = uring.status();  // e.g. ENOMEM for a deep ring under a small memlock limit
      }
      std::unique_ptr<IoBackend> pool = detail::make_pread_backend(std::move(files), options, threads);
      pool->fallback_reason_ = std::string(why.message());
      static std::once_flag logged;
      std::call_once(logged, [&] {
        std::fprintf(stderr, "dlfeed: io_uring unavailable, using the pread thread pool: %s\n",
                     pool->fallback_reason_.c_str());
      });
      return pool;
    }
  }
  return absl::InvalidArgumentError("make_io_backend: unknown IoKind");
}

void advise_willneed(FileTable& files, std::span<const ReadRequest> requests) {
  size_t n = files.size();
  for (const ReadRequest& r : requests) {
    if (r.file >= n || r.length == 0) continue;
    auto pin = files.pin(r.file);
    if (!pin.ok()) continue;
    (void)::posix_fadvise(pin->fd(), static_cast<off_t>(r.offset), static_cast<off_t>(r.length), POSIX_FADV_WILLNEED);
  }
}

}  // namespace dlfeed
