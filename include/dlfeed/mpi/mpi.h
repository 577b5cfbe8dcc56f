// SPDX-License-Identifier: Apache-2.0
// dlfeed::mpi: the optional MPI component (CMake target dlfeed::mpi, built
// when an MPI implementation is found). libdlfeed itself never calls MPI:
// rank and world size are plain loader options and the order is the same on
// every rank without communication. This component supplies what a job needs
// on top: rank and size from the communicator, DLIO's barrier per step (the
// emulated gradient all-reduce), and the reduction of every rank's counters
// to one summary on the root.
//
//   auto job = dlfeed::mpi::Job::init().value();   // MPI_Init unless done
//   dlfeed::LoaderOptions o = ...;
//   job->configure(o);                              // rank, world size, trace pid
//   auto loader = dlfeed::Loader::create(o).value();
//   for (auto& b : loader->epoch(0)) { train(b); job->step_barrier(loader->counters()); }
//   auto summary = job->reduce(loader->counters_snapshot()).value();  // the job's, on rank 0
//   if (job->rank() == 0) std::puts(summary.summary_table().c_str());
#pragma once

// The C API only: Open MPI's and MPICH's deprecated C++ bindings would need
// their C++ library at link time.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/loader.h"

namespace dlfeed::inline DLFEED_ABI::mpi {

/// True when the environment says an MPI launcher started this process
/// (Open MPI's mpirun, MPICH/Intel MPI's Hydra, srun with PMI or PMIx). Makes
/// no MPI call, so a plain run never initializes MPI.
DLFEED_EXPORT bool launched_by_mpi();

/// One MPI job's communicator, as a dlfeed job uses it.
class DLFEED_EXPORT Job {
 public:
  /// Initializes MPI (MPI_THREAD_MULTIPLE: the job cache's reads call MPI from
  /// the loader's I/O threads; without it only the calling thread makes MPI
  /// calls) unless it is already initialized,
  /// and duplicates `comm` (MPI_COMM_WORLD when null) for dlfeed's own use.
  static absl::StatusOr<std::unique_ptr<Job>> init(MPI_Comm comm = MPI_COMM_NULL);
  /// Frees the duplicate; finalizes MPI when init() initialized it. When an
  /// exception is unwinding (one rank failed while the others may wait in a
  /// collective) it aborts the job instead of hanging it.
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }

  /// Sets options.order.rank / world_size and the trace's pid (= rank) and
  /// process name ("dlfeed rank R"), so the ranks' traces merge into one view.
  void configure(LoaderOptions& options) const;
  /// Sets options.advanced.index_opener so that `root` indexes the files and sends
  /// the index to the other ranks (encode_index / decode_index), which then
  /// read no file header at open: a job's opens and header reads at create
  /// are one rank's, not one per rank. Loader::create becomes collective
  /// (every rank creates its loader with the same paths and fields), and
  /// the job must outlive the loaders' create calls (the opener refers to
  /// it). An error on `root` (a missing file, a bad header) is every rank's
  /// error, and so is one rank's failure to take the index (it names other
  /// paths; the message does not decode): all ranks leave the index's
  /// collectives together. An error of one rank's own later in create (its
  /// staging folder) is that rank's alone: ranks that go on after it must not
  /// make loaders again on that rank only.
  void share_index(LoaderOptions& options, int root = 0) const;
  /// MPI_Barrier.
  absl::Status barrier() const;
  /// The barrier at the end of a training step, as the DLIO benchmark does to
  /// stand in for the gradient all-reduce; its wait is recorded in `c` as
  /// Region::kBarrier (barrier_ns, trace event "barrier").
  absl::Status step_barrier(counters::Counters& c) const;

  /// Collective: gathers every rank's snapshot (Snapshot::serialize) to
  /// `root` and merges them there (counters::merge_ranks). The root gets the
  /// job's snapshot, every other rank its own `mine` back.
  absl::StatusOr<counters::Snapshot> reduce(const counters::Snapshot& mine, int root = 0) const;
  /// Collective: every rank's bytes, in rank order, on `root` (empty elsewhere).
  absl::StatusOr<std::vector<std::string>> gather(const std::string& mine, int root = 0) const;
  /// Collective: `root`'s bytes on every rank.
  absl::StatusOr<std::string> broadcast(const std::string& bytes, int root = 0) const;
  /// Collective: compares `settings` (name and value pairs, the same names in
  /// the same order on every rank) across the ranks, so that ranks set up
  /// differently fail together instead of waiting in different collectives.
  /// OK when every rank gives the same; else, on every rank, InvalidArgument
  /// naming the first setting that differs, its value on rank 0 and on the
  /// first rank that differs, then `advice`.
  absl::Status agree(const std::vector<std::pair<std::string, std::string>>& settings, absl::string_view advice) const;
  /// Collective sums, minimum and maximum over the ranks (on every rank).
  uint64_t sum(uint64_t v) const;
  uint64_t min(uint64_t v) const;
  uint64_t max(uint64_t v) const;

 private:
  Job() = default;
  // share_index's broadcast and this rank's check of what it got.
  absl::StatusOr<SampleIndex> take_shared_index(const std::vector<std::string>& paths, const FormatOptions& format,
                                                int root) const;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  bool finalize_ = false;
};

}  // namespace dlfeed::mpi
