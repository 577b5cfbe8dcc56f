// SPDX-License-Identifier: Apache-2.0
// dlfeed::mpi::JobCache: the job's memory as one cache of sample bytes, so a
// global shuffle across nodes reads the shared file system once, in the first
// epoch, and later epochs read other ranks' memory instead.
//
// Every rank computes, from the index and the order (no message), which rank
// reads each sample extent first from where the loader starts (its first
// start_epoch, at the step a restore() resumes from); that rank keeps it,
// within its share of its node's budget. Each extent is held once in the
// job. Reads of a held extent that is filled come from the holder: the rank's
// own memory, its node's ranks' memory with plain loads (one MPI
// shared-memory window per node), or an MPI_Get from another node's rank
// (one-sided; the holder takes no part). Everything else reads the source, as
// without the cache.
// What a rank receives does not change: the same order, the same bytes.
//
//   auto job = dlfeed::mpi::Job::init().value();     // MPI_THREAD_MULTIPLE
//   dlfeed::LoaderOptions o = ...;
//   job->configure(o);
//   auto cache = dlfeed::mpi::JobCache::create(*job, {.bytes_per_node = 64ull << 30}).value();
//   cache->attach(o);                                  // before Loader::create
//   auto loader = dlfeed::Loader::create(o).value();
//   ... epochs ...
//   loader.reset();
//   cache->close().IgnoreError();                      // collective, before the job ends
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/io/io_backend.h"
#include "dlfeed/loader.h"
#include "dlfeed/mpi/mpi.h"

namespace dlfeed::inline DLFEED_ABI::mpi {

/// How big the job cache is and which ranks share a node.
struct DLFEED_EXPORT JobCacheOptions {
  /// The cache's bytes on each node, split evenly between the node's ranks
  /// (each rank allocates its share as an MPI window at create). 0: no cache.
  uint64_t bytes_per_node = 0;
  /// 0: a node is the ranks that share memory, as MPI finds them
  /// (MPI_Comm_split_type SHARED). k > 0: ranks [0, k) are one node, [k, 2k)
  /// the next..., so one machine can stand in for several nodes (tests and
  /// benches exercise the transfers between nodes). The ranks of a node that
  /// share memory read each other's shares with plain loads.
  int ranks_per_node = 0;
  /// Empty: each rank's share is memory (the node's shares one MPI
  /// shared-memory window). A folder (a node-local disk; each rank may name
  /// its own): each rank's share is a file there, mapped by the node's ranks
  /// and removed once they have (the
  /// space is freed when the cache closes, or the process ends), so the cache
  /// may outgrow memory; the page cache keeps what is read most.
  std::string folder;
  /// Makes the backend that reads the files (empty: make_io_backend), e.g.
  /// one throttled to stand in for a shared file system.
  IoBackendFactory source;
};

/// What a rank's reads took from where (bytes and counts since create).
struct DLFEED_EXPORT JobCacheStats {
  uint64_t bytes_read_source = 0;  // read from the files (the shared file system)
  uint64_t bytes_read_local = 0;   // from this rank's own part of the cache
  uint64_t bytes_read_node = 0;    // from other ranks of this node (plain loads when node_loads)
  uint64_t bytes_read_peers = 0;   // from ranks of other nodes (MPI_Get)
  uint64_t remote_gets = 0;        // MPI_Get rounds (each: a batch's gets, then a flush)
  uint64_t remote_ns = 0;          // time in those rounds
  uint64_t remote_ns_max = 0;      // the longest round
  /// Bytes of held extents read from the source, but for this rank's own
  /// that the read keeps: their holder had not kept them yet, or a read
  /// straddled them and an extent no one holds.
  uint64_t bytes_missed = 0;
  uint64_t bytes_kept = 0;  // bytes this rank put into its part
  uint64_t extents_kept = 0;
  uint64_t bytes_planned = 0;  // bytes of extents this rank is to hold (0 before the first epoch starts)
  uint64_t capacity = 0;       // this rank's share of its node's budget
  uint64_t dataset_bytes = 0;  // distinct extent bytes the plan's epochs read (the job's)
  uint64_t held_bytes = 0;     // of those, held by the job cache (all ranks)
  int node = 0;                // this rank's node
  int nodes = 1;               // nodes in the job
  /// The job's nodes keep their ranks' shares in shared memory, and the
  /// ranks of a node read each other's with plain loads (the same on every
  /// rank). False when every node has one rank, and where MPI cannot make a
  /// window between nodes over the nodes' shared memory (Open MPI without a
  /// single-copy mechanism): a node's ranks read each other's shares with
  /// MPI_Get then.
  bool node_loads = false;
  /// The counters as one JSON object.
  std::string to_json() const;
};

/// The job cache of one MPI job, for one loader at a time.
class DLFEED_EXPORT JobCache {
 public:
  /// Collective over `job`: finds the nodes, allocates every rank's window
  /// (bytes_per_node / ranks on the node) and opens a passive access epoch
  /// on it. Needs MPI_THREAD_MULTIPLE (the loader's I/O threads read peers'
  /// windows): FailedPrecondition when MPI was initialized with less. `job`
  /// must outlive the cache.
  static absl::StatusOr<std::shared_ptr<JobCache>> create(const Job& job, JobCacheOptions options);
  ~JobCache();
  JobCache(const JobCache&) = delete;
  JobCache& operator=(const JobCache&) = delete;

  /// Sets `options` up to read through the cache: the index opener (wrapping
  /// the one there, e.g. Job::share_index's) records each field's extents,
  /// the I/O backend serves held extents from the cache and the rest from
  /// the files, and reads merge only touching extents (coalesce.max_gap 0).
  /// Call after Job::configure (rank and world size) and before
  /// Loader::create. The plan is made as the loader's first epoch starts
  /// (AdvancedOptions::before_first_epoch), from that epoch's order and the
  /// step it starts at, and the next epoch's when it starts mid-way: every
  /// rank must start the same epoch at the same step (a checkpoint of one
  /// step), or the ranks' plans differ and reads go to the files (the
  /// same bytes, no cache). InvalidArgument for options the cache cannot
  /// serve (io.direct, staging, object URLs, an io_factory of the caller's).
  absl::Status attach(LoaderOptions& options);

  /// This rank's counters.
  JobCacheStats stats() const;

  /// Records each round of remote gets as a trace event in `c` (the
  /// loader's, Loader::counters(), when it traces): "job_cache_stamps" and
  /// "job_cache_gets", category "job_cache", with the gets and bytes as args.
  /// `c` must outlive the loader's reads; null stops it.
  void trace_into(counters::Counters* c);

  /// Collective: frees the windows. Waits for the reads using them at the
  /// moment; reads after it go to the files. Call before MPI ends, best after
  /// every loader using the cache is destroyed; the destructor calls it
  /// otherwise.
  absl::Status close();

  struct State;

 private:
  JobCache() = default;
  std::shared_ptr<State> state_;
};

}  // namespace dlfeed::mpi
