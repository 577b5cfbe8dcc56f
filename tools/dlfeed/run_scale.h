// The scale-out side of `dlfeed run`: MPI (rank and size from the launcher,
// a barrier per step, the job's summary on rank 0, a trace per rank) and
// node-local staging (--stage-to). Kept apart from run.cc so the run loop
// only calls these few hooks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dlfeed/counters/counters.h"
#include "dlfeed/loader.h"

namespace dlfeed::cli {

/// What `dlfeed run` does differently when it is one rank of many or stages.
class ScaleOut {
 public:
  /// Reads --mpi; under an MPI launcher (or --mpi=on) initializes MPI. Ranks
  /// other than 0 print nothing to stdout (--all-ranks-print to keep it).
  static std::unique_ptr<ScaleOut> begin();
  ~ScaleOut();

  bool distributed() const { return size_ > 1 || job_ != nullptr; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }

  /// Rank, world size and the trace's pid from MPI; staging from --stage-to,
  /// --stage-limit, --stage-sync.
  void configure(LoaderOptions& o) const;
  /// A barrier before an epoch starts, so the ranks' epochs begin together.
  void begin_epoch() const;
  /// The barrier at the end of a step (--barrier-per-step, on by default).
  void end_step(counters::Counters& c) const;
  /// After an epoch: with --stage-wait, after the first one, waits until this
  /// rank's copies are done and (under MPI) every rank's, so the next epoch
  /// reads every copy.
  void end_epoch(const Loader& loader, uint64_t epoch);
  /// PATH for one process; under MPI "stem.rankR.ext" (rank R's own file).
  std::string rank_path(const std::string& path) const;
  /// The job's checksum and sample count (sums over the ranks).
  void reduce_checksum(uint64_t& sum, uint64_t& samples) const;
  /// The summary to print and write: this process's, or under MPI the job's
  /// (on rank 0; each rank writes its own to rank_path(json_path) first).
  /// Prints the staging outcome when staging.
  counters::Snapshot summary(const Loader& loader, const std::string& json_path) const;

 private:
  ScaleOut() = default;
  struct MpiState;
  std::unique_ptr<MpiState> job_;
  double stage_wait_s_ = 0;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace dlfeed::cli
