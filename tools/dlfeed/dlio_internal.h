// SPDX-License-Identifier: Apache-2.0
// What the parts of `dlfeed dlio` share (private to tools/dlfeed/dlio*.cc):
// the order mapping and dataset (dlio_dataset.cc), checkpoints
// (dlio_checkpoint.cc), the per-epoch measurements and the summary files
// (dlio_summary.cc); dlio.cc sets up and runs the phases. Command-line flags
// are read in dlio.cc only (the rest take what they need as arguments):
// tests/python/cli/test_cli_help.py finds the flags a command reads by following
// its calls into the .cc files named like the headers it includes, which
// this header is not.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compute_model.h"
#include "dlfeed/loader.h"
#include "dlio_config.h"
#include "run_scale.h"

namespace dlfeed::cli::dlio {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// DLIO's timestamps: datetime.now() as "%Y-%m-%dT%H:%M:%S.%f" (local time).
std::string timestamp();

// --- the order and the dataset (dlio_dataset.cc) ----------------------------

/// DLIO's shuffles as a dlfeed strategy. DLIO's iterative sampler (the
/// tensorflow loader) shuffles the file list (file_shuffle) and the records
/// in a shuffle buffer of shuffle_size (sample_shuffle); its index sampler
/// (pytorch, dali) permutes the samples (sample_shuffle) and ignores
/// file_shuffle.
struct OrderMapping {
  std::string strategy = "sequential";
  uint64_t buffer_size = 0;
  uint64_t seed = 0;
  bool same_every_epoch = false;
  std::string why;
};

OrderMapping map_order(const DlioConfig& c);

/// Writes the dataset as DLIO's generator lays it out: train/ then valid/,
/// each file's two sides drawn from normal(side, side_stdev) (DLIO's
/// get_dimension; dlfeed's generator, not numpy's, so not DLIO's values).
void generate(const DlioConfig& c, bool quiet);

/// The files DLIO trains (or evaluates) on: the data files of
/// DIR/train (DIR/valid) with the format's extension, sorted, or those of its
/// subfolders sorted by name; the first `want` of them.
std::vector<std::string> dataset_files(const DlioConfig& c, const std::string& split, uint64_t want);

// --- checkpoints (dlio_checkpoint.cc) ---------------------------------------

struct CheckpointResult {
  uint64_t files = 0, bytes = 0;
  double secs = 0;
};

/// DLIO's BaseCheckpointing.checkpoint(): model-E-S-R (model_size bytes),
/// optimizer-E-S-R (3 x sum(optimization_groups)), layer-L-E-S-R (each
/// sum(layer_parameters)) for num_layers (+ tensor_parallelism when > 1)
/// layers on ranks that are multiples of pipeline_parallelism.
CheckpointResult checkpoint(const DlioConfig& c, uint64_t epoch, uint64_t step, int rank);

// --- measurements (dlio.cc fills them, dlio_summary.cc writes them) ---------

/// One block of steps (between checkpoints) or one evaluation, as DLIO's
/// StatsCounter measures it.
struct Block {
  std::string start, end;
  double secs = 0;
  std::vector<double> compute, proc;  // per step: drawn compute, step time
  double au_percent() const {
    double c = 0;
    for (size_t i = 1; i < compute.size(); ++i) c += compute[i];
    if (c == 0) return 0;
    const double t = secs - (proc.empty() ? 0 : proc[0]);
    return t > 0 ? 100.0 * c / t : 0;
  }
  double throughput(uint64_t batch) const {
    return secs > 0 ? static_cast<double>(compute.size()) / secs * static_cast<double>(batch) : 0;
  }
};

struct Ckpt {
  std::string start, end;
  CheckpointResult result;
  uint64_t step = 0;
};

struct EpochStats {
  std::string start, end;
  double secs = 0;
  std::vector<Block> blocks;
  std::vector<Ckpt> ckpts;  // after block i (steps) or the epoch's last
  std::optional<Block> eval;
  uint64_t steps = 0;
  double au = 0, throughput = 0;  // this rank's, steps-weighted over blocks
};

/// A whole run as the summary files report it.
struct RunRecord {
  std::string config_path, out_dir, start_ts;
  OrderMapping order;
  size_t train_files = 0, eval_files = 0;
  uint64_t spf = 0, batch = 0, batch_eval = 0, cap = 0;
  double generate_s = 0, train_s = 0, eval_s = 0, ckpt_s = 0, run_s = 0;
  uint64_t ckpt_bytes = 0, ckpt_files = 0;
  std::vector<EpochStats> epochs;
  Moments drawn;  // the training compute drawn
};

// --- the summary (dlio_summary.cc) ------------------------------------------

/// "hydra_log/MODEL/DATE-TIME", as DLIO's Hydra names its run folder.
std::string default_output_folder(const DlioConfig& c);

/// Gathers every rank's metrics (all ranks call it), then on rank 0 writes
/// summary.json and per_epoch_stats.json to r.out_dir and prints DLIO's
/// closing [METRIC] lines.
void write_summary(const DlioConfig& c, const RunRecord& r, const ScaleOut& scale, const Loader& train_loader,
                   const Loader* eval_loader);

}  // namespace dlfeed::cli::dlio
