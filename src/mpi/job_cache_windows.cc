// SPDX-License-Identifier: Apache-2.0
// The job cache's parts and windows (job_cache_state.h). Each rank's part of
// its node's budget is memory or a file in a node-local folder. The ranks of
// a node that share memory read each other's parts with plain loads: memory
// parts are one MPI shared-memory window of the group, folder parts are
// mapped by every rank of the group. Ranks of other nodes read a part through
// a window over all of them with MPI_Get; when the whole job is one group,
// there is none.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "job_cache_state.h"
#include "mpi_error.h"

namespace dlfeed::inline DLFEED_ABI::mpi {
namespace {

#define DLFEED_JC_CALL(call) DLFEED_MPI_CALL_AS("MPI job cache", call)

constexpr const char* kSingleCopy =
    "Open MPI makes a window over memory it did not allocate only with a single-copy mechanism between the ranks "
    "of a node, CMA or XPMEM, or RDMA; OMPI_MCA_btl_vader_single_copy_mechanism=none turns it off";

// The world ranks of the ranks of this rank's node that share memory with it
// (s.group, made here), in the group's order.
absl::StatusOr<std::vector<int>> make_group(JobCache::State& s) {
  MPI_Comm local = MPI_COMM_NULL;
  DLFEED_JC_CALL(MPI_Comm_split_type(s.comm, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &local));
  int sharing = 0;
  MPI_Comm_size(local, &sharing);
  s.one_machine = sharing == s.size;
  const int rc = MPI_Comm_split(local, s.node_of[static_cast<size_t>(s.rank)], s.rank, &s.group);
  MPI_Comm_free(&local);
  if (rc != MPI_SUCCESS) return mpi_error("MPI job cache", "MPI_Comm_split", rc);
  int n = 0;
  DLFEED_JC_CALL(MPI_Comm_size(s.group, &n));
  std::vector<int> members(static_cast<size_t>(n));
  DLFEED_JC_CALL(MPI_Allgather(&s.rank, 1, MPI_INT, members.data(), 1, MPI_INT, s.group));
  return members;
}

// On how many of the job's ranks `ok` holds (every rank gets the same answer).
enum class Ranks { kNone, kSome, kAll };
absl::StatusOr<Ranks> ranks_where(const JobCache::State& s, bool ok) {
  const int mine[2] = {ok ? 1 : 0, ok ? 0 : 1};
  int any[2] = {0, 0};
  DLFEED_JC_CALL(MPI_Allreduce(mine, any, 2, MPI_INT, MPI_MAX, s.comm));
  return any[1] == 0 ? Ranks::kAll : any[0] == 0 ? Ranks::kNone : Ranks::kSome;
}

// True on every rank when `ok` is true on every rank.
absl::StatusOr<bool> all_ranks(const JobCache::State& s, bool ok) {
  DLFEED_ASSIGN_OR_RETURN(const Ranks where, ranks_where(s, ok));
  return where == Ranks::kAll;
}

// Every rank's `mine` of this rank's group, in the group's order.
absl::StatusOr<std::vector<std::string>> gather_in_group(const JobCache::State& s, const std::string& mine) {
  int n = 0;
  DLFEED_JC_CALL(MPI_Comm_size(s.group, &n));
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(n)), at(static_cast<size_t>(n));
  DLFEED_JC_CALL(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, s.group));
  int total = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    at[i] = total;
    total += lens[i];
  }
  std::string all(static_cast<size_t>(total), '\0');
  DLFEED_JC_CALL(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), at.data(), MPI_CHAR, s.group));
  std::vector<std::string> out;
  for (size_t i = 0; i < lens.size(); ++i) out.push_back(all.substr(static_cast<size_t>(at[i]), lens[i]));
  return out;
}

// MPI_Win_create over this rank's part, every rank's error code returned, not raised.
int window_over_parts(JobCache::State& s, uint64_t capacity) {
  MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN);
  const int rc = MPI_Win_create(s.base, static_cast<MPI_Aint>(capacity), 1, MPI_INFO_NULL, s.comm, &s.win);
  MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_ARE_FATAL);
  return rc;
}

// A node's shared window is a file in /dev/shm (Open MPI's and MPICH's),
// and MPI ends the job when it has no room for it: checked first, on every
// rank together, and an error naming the sizes on every rank.
absl::Status shared_memory_has_room(const JobCache::State& s, uint64_t node_bytes) {
  struct statvfs v {};
  const bool known = ::statvfs("/dev/shm", &v) == 0;
  const uint64_t free_bytes = known ? static_cast<uint64_t>(v.f_bavail) * v.f_frsize : 0;
  const bool fits = !known || node_bytes <= free_bytes;
  DLFEED_ASSIGN_OR_RETURN(const Ranks where, ranks_where(s, fits));
  if (where == Ranks::kAll) return absl::OkStatus();
  const std::string why = fits ? "another node's /dev/shm has no room for its share"
                               : absl::StrCat("this node's ranks share ", node_bytes,
                                              " bytes of memory windows, and /dev/shm has ", free_bytes, " bytes free");
  return absl::ResourceExhaustedError(absl::StrCat(
      "MPI job cache: ", why,
      ": give the cache fewer bytes (job_cache=, --cache), or a node-local folder for it (job_cache_folder=, "
      "--cache-folder)"));
}

// Open MPI before 5 names the node-local shared memory of a one-sided
// window it makes with its RDMA component (MPI_Win_allocate, MPI_Win_create)
// by the node, the job and the communicator's context id, and communicators
// split together share that id: two groups' windows on one machine then
// map the same memory, and each reads the other's bytes
// (open-mpi/ompi#9492). Refused, on every rank alike, for a job over such
// a communicator; a job over MPI_COMM_WORLD (or a copy of it) has no twin.
absl::Status one_sided_windows_are_safe(const JobCache::State& s) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(version, &len) != MPI_SUCCESS) return absl::OkStatus();
  const std::string v(version, static_cast<size_t>(std::max(len, 0)));
  const std::string kOpenMpi = "Open MPI v";
  const size_t at = v.find(kOpenMpi);
  if (at == std::string::npos || at + kOpenMpi.size() >= v.size()) return absl::OkStatus();
  const int major = std::atoi(v.c_str() + at + kOpenMpi.size());
  if (major >= 5) return absl::OkStatus();
  int same = MPI_UNEQUAL;
  DLFEED_JC_CALL(MPI_Comm_compare(s.comm, MPI_COMM_WORLD, &same));
  if (same == MPI_IDENT || same == MPI_CONGRUENT) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "MPI job cache: a job over a communicator other than MPI_COMM_WORLD (mpi_comm=) needs windows across its "
      "nodes (or job_cache_ranks_per_node=1), and ",
      v.substr(at, v.find_first_of(",\n", at) - at),
      " maps the windows of communicators split together on one machine to the same memory (open-mpi/ompi#9492): "
      "each group would read the other's bytes. Run the job over MPI_COMM_WORLD, keep each group on one machine "
      "with job_cache_ranks_per_node=0 (one shared window, which is not affected), or use Open MPI 5"));
}

// Memory parts. When a group has more than one rank (`shared`, the same on
// every rank), every group allocates them as one MPI shared-memory window
// (a group of one too: the collectives below are the job's); the window
// over every part is then made over that memory, and where MPI cannot on
// any rank (no single-copy mechanism), each rank allocates its part on its
// own and the group's ranks read each other's with MPI_Get as other nodes'
// ranks do.
absl::Status memory_parts(JobCache::State& s, uint64_t capacity, const std::vector<int>& members, bool shared) {
  if (shared) {
    DLFEED_RETURN_IF_ERROR(shared_memory_has_room(s, capacity * members.size()));
    MPI_Info info = MPI_INFO_NULL;
    DLFEED_JC_CALL(MPI_Info_create(&info));
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void* base = nullptr;
    MPI_Comm_set_errhandler(s.group, MPI_ERRORS_RETURN);  // an error of create's, not the job's end
    const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(capacity), 1, info, s.group, &base, &s.shared_win);
    MPI_Comm_set_errhandler(s.group, MPI_ERRORS_ARE_FATAL);
    MPI_Info_free(&info);
    // Every rank learns whether every node made its window: ranks that did
    // would otherwise wait in the job's next collective for those that did
    // not. A window made where another was not is left, not freed (that is
    // collective over its node, whose ranks all go on to the error).
    DLFEED_ASSIGN_OR_RETURN(const Ranks made, ranks_where(s, rc == MPI_SUCCESS));
    if (rc != MPI_SUCCESS) return mpi_error("MPI job cache", "MPI_Win_allocate_shared", rc);
    if (made != Ranks::kAll) {
      s.shared_win = MPI_WIN_NULL;
      return absl::ResourceExhaustedError("MPI job cache: MPI_Win_allocate_shared failed on another node");
    }
    s.base = static_cast<std::byte*>(base);
    for (size_t g = 0; g < members.size(); ++g) {
      MPI_Aint bytes = 0;
      int unit = 0;
      void* at = nullptr;
      DLFEED_JC_CALL(MPI_Win_shared_query(s.shared_win, static_cast<int>(g), &bytes, &unit, &at));
      s.load_base[static_cast<size_t>(members[g])] = static_cast<std::byte*>(at);
    }
    if (members.size() == static_cast<size_t>(s.size)) {
      s.node_loads = true;
      return absl::OkStatus();
    }
    const int created = window_over_parts(s, capacity);
    DLFEED_ASSIGN_OR_RETURN(const Ranks where, ranks_where(s, created == MPI_SUCCESS));
    if (where == Ranks::kAll) {
      s.node_loads = true;
      return absl::OkStatus();
    }
    if (where == Ranks::kSome) {
      s.win = MPI_WIN_NULL;  // where it was made, not freed: that is collective, and some ranks have none
      return absl::InternalError(
          "MPI job cache: MPI_Win_create over the nodes' shared memory succeeded on some ranks only");
    }
    DLFEED_JC_CALL(MPI_Win_free(&s.shared_win));
    s.load_base.assign(static_cast<size_t>(s.size), nullptr);
  }
  // A job on one machine (emulated nodes of --cache-ranks-per-node
  // included): MPI makes this window in /dev/shm too, every rank's part in it.
  if (s.one_machine) {
    uint64_t all = 0;
    for (uint64_t c : s.capacity_of) all += c;
    DLFEED_RETURN_IF_ERROR(shared_memory_has_room(s, all));
  }
  void* base = nullptr;
  MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN);  // an error of create's, not the job's end
  const int rc = MPI_Win_allocate(static_cast<MPI_Aint>(capacity), 1, MPI_INFO_NULL, s.comm, &base, &s.win);
  MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_ARE_FATAL);
  DLFEED_ASSIGN_OR_RETURN(const Ranks made, ranks_where(s, rc == MPI_SUCCESS));
  if (rc != MPI_SUCCESS) return mpi_error("MPI job cache", "MPI_Win_allocate", rc);
  if (made != Ranks::kAll) {
    s.win = MPI_WIN_NULL;  // made here, not freed: that is collective, and some ranks have none
    return absl::ResourceExhaustedError("MPI job cache: MPI_Win_allocate failed on another rank");
  }
  s.base = static_cast<std::byte*>(base);
  s.load_base[static_cast<size_t>(s.rank)] = s.base;
  return absl::OkStatus();
}

std::string share_path(const std::string& folder, uint64_t nonce, int rank) {
  return absl::StrCat(folder, "/.dlfeed-job-cache-", absl::Hex(nonce), "-", rank);
}

// This rank's part as a new file at `path` of `len` bytes, its blocks
// reserved, mapped (the caller removes it once the group mapped it).
absl::StatusOr<std::byte*> make_share(const std::string& path, size_t len) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("MPI job cache: cannot create ", path, ": ", std::strerror(errno)));
  }
  // The blocks reserved now: a sparse file in a folder without room would
  // end the rank with SIGBUS at the first copy into the share, mid-epoch.
  int err = 0;
  do {
    err = ::fallocate(fd, 0, 0, static_cast<off_t>(len)) == 0 ? 0 : errno;
  } while (err == EINTR);
  if (err == EOPNOTSUPP || err == ENOSYS) {  // no reservation here: the free space checked instead
    struct statvfs vs {};
    if (::fstatvfs(fd, &vs) == 0 && static_cast<uint64_t>(vs.f_bavail) * vs.f_frsize < len) {
      err = ENOSPC;
    } else {
      err = ::ftruncate(fd, static_cast<off_t>(len)) == 0 ? 0 : errno;
    }
  }
  void* p = MAP_FAILED;
  if (err == 0) {
    p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) err = errno;
  }
  ::close(fd);
  if (p == MAP_FAILED) {
    ::unlink(path.c_str());
    return absl::UnavailableError(absl::StrCat("MPI job cache: cannot reserve and map ", len, " bytes of ", path,
                                               " (the rank's share in the cache folder): ", std::strerror(err)));
  }
  return static_cast<std::byte*>(p);
}

// Another rank's part at `path`, `len` bytes, mapped to be read here.
absl::StatusOr<std::byte*> map_peer_share(const std::string& path, size_t len) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  void* p = fd < 0 ? MAP_FAILED : ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (p == MAP_FAILED) {
    return absl::UnavailableError(
        absl::StrCat("MPI job cache: cannot map ", path, " (the share of a rank of this node): ", std::strerror(err)));
  }
  return static_cast<std::byte*>(p);
}

void unmap_all(JobCache::State& s) {
  for (const auto& [at, len] : s.peer_maps) ::munmap(at, len);
  s.peer_maps.clear();
  if (s.mapped > 0) ::munmap(s.base, s.mapped);
  s.mapped = 0;
  s.base = nullptr;
}

// Folder parts: every rank makes its file (in its own folder: the group's
// ranks may name others); the group's ranks map each other's, and the files
// are removed once the group mapped them (the mappings keep them until
// munmap or exit: nothing is left behind).
absl::Status folder_parts(JobCache::State& s, uint64_t capacity, const std::string& folder,
                          const std::vector<int>& members, bool shared) {
  const auto len_of = [](uint64_t bytes) { return static_cast<size_t>(bytes == 0 ? 1 : bytes); };
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(folder, ec);
  const std::string mine = share_path(ec ? folder : absolute.string(), s.nonce, s.rank);
  absl::StatusOr<std::byte*> made = make_share(mine, len_of(capacity));
  DLFEED_ASSIGN_OR_RETURN(const bool all_made, all_ranks(s, made.ok()));
  if (!all_made) {
    if (!made.ok()) return made.status();
    ::munmap(*made, len_of(capacity));
    ::unlink(mine.c_str());
    return absl::UnavailableError(absl::StrCat("MPI job cache: another rank could not make its file in ", folder));
  }
  s.base = *made;
  s.mapped = len_of(capacity);
  s.load_base[static_cast<size_t>(s.rank)] = s.base;
  absl::StatusOr<std::vector<std::string>> paths = gather_in_group(s, mine);
  absl::Status peers = paths.status();
  for (size_t g = 0; g < members.size(); ++g) {
    const int m = members[g];
    if (m == s.rank || !peers.ok()) continue;
    const size_t len = len_of(s.capacity_of[static_cast<size_t>(m)]);
    absl::StatusOr<std::byte*> at = map_peer_share((*paths)[g], len);
    if (!at.ok()) {
      peers = at.status();
      continue;
    }
    s.peer_maps.emplace_back(*at, len);
    s.load_base[static_cast<size_t>(m)] = *at;
  }
  const int rc = MPI_Barrier(s.group);  // every file of the group mapped where it is read
  ::unlink(mine.c_str());
  if (rc != MPI_SUCCESS) return mpi_error("MPI job cache", "MPI_Barrier", rc);
  DLFEED_ASSIGN_OR_RETURN(const bool all_mapped, all_ranks(s, peers.ok()));
  if (!all_mapped) {
    return peers.ok() ? absl::UnavailableError(absl::StrCat(
                            "MPI job cache: another rank could not map the shares of its node's ranks in ", folder))
                      : peers;
  }
  s.node_loads = shared;
  if (members.size() == static_cast<size_t>(s.size)) return absl::OkStatus();
  const int created = window_over_parts(s, capacity);
  DLFEED_ASSIGN_OR_RETURN(const bool all, all_ranks(s, created == MPI_SUCCESS));
  if (all) return absl::OkStatus();
  s.win = MPI_WIN_NULL;  // where it was made, not freed: that is collective, and some ranks have none
  absl::Status st = mpi_error("MPI job cache", "MPI_Win_create", created == MPI_SUCCESS ? MPI_ERR_OTHER : created);
  return absl::UnavailableError(absl::StrCat(st.message(), " (a window over files' memory, --cache-folder, on ",
                                             "more than one node: ", kSingleCopy, ")"));
}

// The windows made so far, freed (collective), the mappings undone.
void release(JobCache::State& s) {
  if (s.win != MPI_WIN_NULL) MPI_Win_free(&s.win);
  if (s.shared_win != MPI_WIN_NULL) MPI_Win_free(&s.shared_win);
  if (s.group != MPI_COMM_NULL) MPI_Comm_free(&s.group);
  unmap_all(s);
  s.base = nullptr;
  s.load_base.assign(static_cast<size_t>(s.size), nullptr);
  s.node_loads = false;
}

absl::Status lock_windows(JobCache::State& s) {
  if (s.win != MPI_WIN_NULL) {
    // Local stores and remote gets of the same memory see each other only in MPI's unified model.
    int* model = nullptr;
    int found = 0;
    DLFEED_JC_CALL(MPI_Win_get_attr(s.win, MPI_WIN_MODEL, &model, &found));
    if (found == 0 || model == nullptr || *model != MPI_WIN_UNIFIED) {
      return absl::UnimplementedError(
          "MPI job cache: this MPI's windows use the separate memory model (MPI_WIN_SEPARATE); the job cache needs "
          "the unified one");
    }
    DLFEED_JC_CALL(MPI_Win_lock_all(MPI_MODE_NOCHECK, s.win));
  }
  if (s.shared_win != MPI_WIN_NULL) DLFEED_JC_CALL(MPI_Win_lock_all(MPI_MODE_NOCHECK, s.shared_win));
  return absl::OkStatus();
}

}  // namespace

absl::Status make_windows(JobCache::State& s, uint64_t capacity, const std::string& folder) {
  s.load_base.assign(static_cast<size_t>(s.size), nullptr);
  absl::StatusOr<std::vector<int>> members = make_group(s);
  absl::Status st = members.status();
  // A node of more than one rank anywhere: every rank takes the shared route (its collectives are the job's).
  absl::StatusOr<Ranks> shared = Ranks::kNone;
  if (st.ok()) shared = ranks_where(s, members->size() > 1);
  if (st.ok()) st = shared.status();
  if (st.ok()) {
    const bool any = *shared != Ranks::kNone;
    // Windows of MPI's one-sided component unless every rank shares one node's memory.
    const bool all_here = members->size() == static_cast<size_t>(s.size);
    if (folder.empty() ? !(any && all_here) : !all_here) st = one_sided_windows_are_safe(s);
    if (st.ok()) {
      st = folder.empty() ? memory_parts(s, capacity, *members, any) : folder_parts(s, capacity, folder, *members, any);
    }
  }
  if (st.ok()) st = lock_windows(s);
  if (!st.ok()) release(s);
  return st;
}

absl::Status free_windows(JobCache::State& s) {
  if (s.win != MPI_WIN_NULL) {
    DLFEED_JC_CALL(MPI_Win_unlock_all(s.win));
    DLFEED_JC_CALL(MPI_Win_free(&s.win));
  }
  if (s.shared_win != MPI_WIN_NULL) {
    DLFEED_JC_CALL(MPI_Win_unlock_all(s.shared_win));
    DLFEED_JC_CALL(MPI_Win_free(&s.shared_win));
  }
  if (s.group != MPI_COMM_NULL) DLFEED_JC_CALL(MPI_Comm_free(&s.group));
  unmap_all(s);
  s.load_base.assign(static_cast<size_t>(s.size), nullptr);
  return absl::OkStatus();
}

}  // namespace dlfeed::mpi
