// SPDX-License-Identifier: Apache-2.0
// `dlfeed dlio`'s configuration: Hydra-style overrides on the parsed YAML
// (yaml_subset.h), and DLIO's keys mapped to what dlfeed does with each, or
// why it leaves it out (docs/dlio.md has the table).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "yaml_subset.h"

namespace dlfeed::cli::dlio {

/// Applies one Hydra override to the workload (the mapping under
/// `workload`): `workload.a.b=V` (the key must exist), `+workload.a.b=V`
/// (it must not), `++workload.a.b=V` (either), `~workload.a.b` (removes it).
/// V is a YAML scalar or flow sequence. Keys without the `workload.` prefix
/// are refused, as DLIO's Hydra refuses or ignores them.
absl::Status apply_override(YamlNode& workload, const std::string& arg);

/// Whether `arg` looks like an override (has '=' or starts with '~'), not a path.
bool is_override(absl::string_view arg);

/// DLIO 2.0.0's settings, with its defaults (dlio_benchmark/utils/config.py).
struct DlioConfig {
  std::string model = "default";
  std::string framework = "tensorflow";
  std::string storage_type = "local_fs";
  std::string storage_root = "./";
  // dataset
  std::string format = "tfrecord";
  double record_length = 64 * 1024;
  double record_length_stdev = 0;
  double record_length_resize = 0;
  int64_t num_files_train = 8;
  int64_t num_files_eval = 0;
  int64_t num_samples_per_file = 1;
  std::string data_folder = "./data/";
  int64_t num_subfolders_train = 0;
  int64_t num_subfolders_eval = 0;
  bool enable_chunking = false;
  int64_t chunk_size = 0;
  std::string compression = "none";
  int64_t compression_level = 4;
  std::string file_prefix = "img";
  bool keep_files = true;
  // reader
  std::string data_loader = "tensorflow";
  std::string data_loader_sampler;  // "": from data_loader (tensorflow: iterative, else index)
  int64_t read_threads = 1;
  int64_t computation_threads = 1;
  int64_t batch_size = 1;
  int64_t batch_size_eval = 1;
  int64_t prefetch_size = 2;
  std::string file_shuffle = "off";
  int64_t shuffle_size = 1024;
  std::string sample_shuffle = "off";
  // train
  int64_t epochs = 1;
  int64_t total_training_steps = -1;
  bool seed_change_epoch = true;
  double computation_time = 0;  // seconds per step
  double computation_time_stdev = 0;
  int64_t seed = 123;
  // evaluation
  double eval_time = 0;
  double eval_time_stdev = 0;
  int64_t eval_after_epoch = 1;
  int64_t epochs_between_evals = 1;
  // checkpoint
  std::string checkpoint_folder = "./checkpoints/";
  int64_t checkpoint_after_epoch = 1;
  int64_t epochs_between_checkpoints = 1;
  int64_t steps_between_checkpoints = -1;
  std::string checkpoint_type = "rank_zero";
  int64_t model_size = 10240;
  std::vector<int64_t> optimization_groups;
  int64_t num_layers = 1;
  std::vector<int64_t> layer_parameters{17371, 24740228};
  int64_t tensor_parallelism = 1;
  int64_t pipeline_parallelism = 1;
  // output
  std::string output_folder;  // "": hydra_log/MODEL/DATE-TIME, as DLIO's Hydra run dir
  // workflow
  bool generate_data = false;
  bool generate_only = false;
  bool do_eval = false;
  bool do_checkpoint = false;
  // metric
  double au = 0.90;

  /// Every key of the YAML (and overrides) and what became of it, in file
  /// order: how dlfeed honours it, or why it is ignored.
  struct KeyUse {
    std::string key;    // workload.SECTION.KEY
    std::string value;  // as written
    std::string note;
  };
  std::vector<KeyUse> honoured, ignored;

  /// data_folder under storage_root, as DLIO's local storage joins them;
  /// with storage_type s3, s3://STORAGE_ROOT/DATA_FOLDER (DLIO's bucket and
  /// key prefix).
  std::string data_dir() const;
  /// The sampler DLIO uses: "iterative" or "index".
  std::string sampler() const;
  /// DLIO's sample side: int(sqrt(record_length)).
  int64_t dimension() const;
  /// The file extension DLIO gives the format.
  std::string extension() const { return format; }
};

/// Reads the workload mapping into a DlioConfig, checking each value's type
/// and recording every key as honoured or ignored (with the reason).
absl::StatusOr<DlioConfig> load_config(const YamlNode& workload);

}  // namespace dlfeed::cli::dlio
