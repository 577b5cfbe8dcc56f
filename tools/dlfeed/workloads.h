// SPDX-License-Identifier: Apache-2.0
// Workload presets: published training workloads (the DLIO benchmark's
// configurations and MLPerf HPC), in one table, scaled down to fit a small
// machine by --scale, generated in the DLIO layout when missing.
// docs/workloads.md explains the table and the scaling rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "command.h"
#include "dlfeed/dtype.h"
#include "dlfeed/format/format.h"
#include "dlfeed/sample.h"

namespace dlfeed::cli {

/// Which files a preset writes and reads: DLIO's emulation (DLIO's layout,
/// samples as DLIO's generator writes them), or the reference code's own.
enum class WorkloadLayout {
  kDlio,
  kDeepCam,    // data-YYYY-MM-DD-HH-R.h5, climate/data (H,W,16) f4 HWC, labels_0, stats.h5
  kCosmoFlow,  // GZIP TFRecords, one Example each: x int16 (128,128,128,4), y float[4]
};

/// One published workload at full size.
struct Workload {
  std::string name;
  FileFormat format = FileFormat::kNpz;
  uint64_t files = 0;
  uint64_t samples_per_file = 0;
  Shape sample_shape;  // one sample; the first two dimensions shrink when scaled
  DType dtype = DType::u8();
  uint32_t batch_size = 0;
  double compute_s = 0;             // emulated compute per step (batch)
  std::vector<std::string> fields;  // what a trainer reads of a sample
  double default_scale = 0;         // --scale when none is given (a few hundred MB)
  std::string source;               // where the numbers come from
  WorkloadLayout layout = WorkloadLayout::kDlio;

  uint64_t sample_bytes() const;
  uint64_t samples() const { return files * samples_per_file; }
  uint64_t dataset_bytes() const { return samples() * sample_bytes(); }
};

/// The presets, in the order docs/workloads.md lists them.
const std::vector<Workload>& workloads();
/// The preset called `name`; the error lists the names there are.
absl::StatusOr<const Workload*> find_workload(const std::string& name);

/// A preset at a scale: what is generated and run.
struct ScaledWorkload {
  const Workload* base = nullptr;
  double scale = 1;
  uint64_t files = 0;
  uint64_t samples_per_file = 0;
  Shape sample_shape;
  uint32_t batch_size = 0;
  double compute_s = 0;
  /// Scaled sample bytes / published sample bytes (1 unless samples shrank).
  double sample_ratio = 1;
  /// Fixed: the dataset's content does not follow the run's --seed.
  uint64_t data_seed = 42;

  uint64_t sample_bytes() const;
  uint64_t samples() const { return files * samples_per_file; }
  uint64_t dataset_bytes() const { return samples() * sample_bytes(); }
  /// The folder a trainer reads: DIR/train.
  std::string train_dir(const std::string& dir) const;
  /// data/workloads/NAME-SCALE.
  std::string default_dir() const;
  /// How to index the generated files (TFRecord feature dtype and shape).
  FormatOptions format_options() const;
  /// The manifest generated datasets carry: equal manifests, equal files.
  std::string manifest() const;
  /// The data files' extension (no dot).
  std::string extension() const;
  /// The data files generation writes, in order.
  std::vector<std::string> data_files(const std::string& dir) const;
};

/// Scales `w` (the rule is in docs/workloads.md): the dataset is about
/// `scale` x the published bytes; the file count goes first, then samples
/// per file, and samples shrink only when a floor (8 steps, up to 8 files)
/// would otherwise make the dataset larger than that. scale in (0, 1].
absl::StatusOr<ScaledWorkload> scale_workload(const Workload& w, double scale);

/// What ensure_dataset() did.
enum class DatasetAction { kReused, kGenerated, kRegenerated, kDlioLayout, kReferenceFiles };

// The reference layouts (workload_layouts.cc).
/// The layout's data files at `w`'s scale under DIR/train, in order.
std::vector<std::string> reference_data_files(const ScaledWorkload& w, const std::string& dir);
/// Writes them (and DeepCAM's DIR/stats.h5).
absl::Status write_reference_dataset(const ScaledWorkload& w, const std::string& dir);
/// A user's folder of the reference files (no manifest): DIR/train or DIR
/// when it holds a data file of the layout (DeepCAM: data-*.h5; CosmoFlow:
/// *.tfrecord), else "".
std::string find_reference_files(const ScaledWorkload& w, const std::string& dir);
/// How the reference files are read: DeepCAM: HDF5, axis none, fields
/// climate/data and climate/labels_0; CosmoFlow: TFRecord feature x as int16
/// of `shape`.
FormatOptions reference_format(const Workload& w, const Shape& shape);
/// The layout a preset wrote into the folder holding `path` (DIR or DIR/train
/// with DIR/dlfeed-workload.json, the marker generation writes last), or
/// nullopt when no preset wrote it: what lets `dlfeed run DIR/train` read a
/// preset's DeepCAM files one sample per file without a guess.
std::optional<WorkloadLayout> preset_layout_of(const std::string& path);
/// "layout": DLIO's or the reference's, for the manifest and messages.
std::string layout_name(WorkloadLayout l);

/// Makes sure DIR holds the complete dataset of `w`: reuses it when its
/// manifest (DIR/dlfeed-workload.json) matches and every file is there,
/// regenerates it when the manifest differs or a file is missing, reads a
/// folder the DLIO benchmark's generator left (no manifest, DIR/train holding
/// files of the workload's format named and placed as DLIO names them) as it
/// is (kDlioLayout), and refuses any other non-empty DIR without a manifest
/// (it is not ours to delete) or a dataset larger than the free space.
absl::StatusOr<DatasetAction> ensure_dataset(const ScaledWorkload& w, const std::string& dir);

/// Whether --workload was given.
bool workload_given();
/// --workload, --scale and --data-dir as given (ScaleOut::agree compares
/// them before rank 0 makes the preset's dataset).
std::vector<std::pair<std::string, std::string>> workload_settings();
/// The preset --workload at --scale (0: its default scale).
absl::StatusOr<ScaledWorkload> workload_from_flags();
/// Makes sure the dataset of `w` is in --data-dir (default w.default_dir()),
/// generating it if needed (printing what it does unless `quiet`), and
/// returns the folder to read (DIR/train); *format: how to index it (a DLIO
/// folder's TFRecord images are shaped by their `size` feature, not the
/// preset's shape).
absl::StatusOr<std::string> workload_dataset_from_flags(const ScaledWorkload& w, bool quiet, FormatOptions* format);
/// The flags the three above read (for a command's flag list).
FlagGroup workload_flags();

/// "0.0025" for a scale (%g).
std::string scale_str(double scale);
/// "366.2 MB" (decimal units, like the published sizes).
std::string bytes_str(uint64_t bytes);

}  // namespace dlfeed::cli
