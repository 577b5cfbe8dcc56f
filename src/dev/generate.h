// SPDX-License-Identifier: Apache-2.0
// Writing synthetic datasets in every format, deterministic from a seed, with
// the DLIO benchmark's on-disk layout available exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dev/record_writer.h"  // the development library's writers: this header brings them all
#include "dev/zip_writer.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/dtype.h"
#include "dlfeed/format/format.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::gen {

/// Compression of generated data, where the format allows it.
enum class Compression { kNone, kDeflate };

/// What one generated file holds.
struct FileSpec {
  std::string path;
  Shape sample_shape;  // shape of one sample (without the sample axis)
  DType dtype = DType::u8();
  uint64_t num_samples = 1;
  uint64_t first_global_id = 0;  // content of sample k is a function of (seed, first_global_id + k)
  uint64_t seed = 0;
  SampleAxis axis = SampleAxis::kFirst;  // NPY/NPZ: where the sample axis goes
  Compression compression = Compression::kNone;
  int level = 4;  // deflate level
  /// HDF5: samples per chunk along axis 0 (0: contiguous layout).
  uint64_t chunk_samples = 0;
  /// HDF5 with chunks: a chunk's extent along each axis after the first,
  /// at most the sample's there (0: the whole sample), as DLIO's (1, c, c).
  uint64_t chunk_inner = 0;
  bool hdf5_shuffle = false;  // HDF5: add the shuffle filter before deflate
  /// NPZ member / HDF5 dataset holding the samples, and the labels' name.
  /// DLIO: NPZ "x"/"y"; HDF5 "records_0".."records_{k-1}" and "labels".
  std::vector<std::string> data_names{"x"};
  std::string label_name = "y";
  bool zero_labels = false;  // DLIO writes all-zero labels
  /// TFRecord: where to write the DALI/DLIO .idx sidecar ("" for none).
  std::string index_path;
  /// TFRecord: the `size` feature's value; -1: the side of a square 2-D
  /// sample (as DLIO writes it), else the element count, so that it gives
  /// the shape (FormatOptions::shape_feature). DLIO's generator writes the
  /// nominal side even where it drew other sides (record_length_stdev).
  int64_t size_feature = -1;
};

/// Fills `out` with the deterministic content of global sample `global_id`
/// (valid values for every dtype: floats in [0, 1), bools 0/1).
void fill_sample(uint64_t seed, uint64_t global_id, DType dtype, std::span<std::byte> out);

/// The label of global sample `global_id` (DLIO writes zeros; we write g % 10
/// so a model can learn something, unless spec says DLIO).
int64_t sample_label(uint64_t global_id);

/// Writes `bytes` to `path` through a temporary name and a rename.
absl::Status write_file(const std::string& path, absl::string_view bytes);

absl::Status write_npy_file(const FileSpec& spec);
absl::Status write_npz_file(const FileSpec& spec);
absl::Status write_hdf5_file(const FileSpec& spec);
absl::Status write_tfrecord_file(const FileSpec& spec);
/// DLIO's indexed_binary layout: spec.path, spec.path.off.idx, spec.path.sz.idx.
absl::Status write_indexed_binary_file(const FileSpec& spec);

/// A whole dataset, as `dlfeed generate` writes it.
struct DatasetSpec {
  std::string dir;
  FileFormat format = FileFormat::kNpz;
  uint64_t files = 4;
  uint64_t valid_files = 0;  // extra files under valid/ (DLIO layout)
  uint64_t samples_per_file = 16;
  Shape sample_shape{64, 64};
  DType dtype = DType::u8();
  Compression compression = Compression::kNone;
  int level = 4;
  uint64_t chunk_samples = 0;
  bool hdf5_shuffle = false;
  bool dlio_layout = false;  // DLIO names, folders, members, index files
  uint64_t seed = 42;
  std::string prefix = "img";
  uint64_t hdf5_datasets = 1;  // DLIO's num_dset_per_record
};

/// Writes every file of `spec`; returns the data files written, in order.
absl::StatusOr<std::vector<std::string>> write_dataset(const DatasetSpec& spec);

// Reference workloads: the files their reference code reads.

/// Running per-channel statistics of DeepCAM samples, for stats.h5.
struct DeepCamStats {
  explicit DeepCamStats(size_t channels)
      : minval(channels, INFINITY), maxval(channels, -INFINITY), sum(channels, 0), sqsum(channels, 0) {}
  void add(const float* hwc, uint64_t pixels);
  std::vector<double> minval, maxval, sum, sqsum;
  double count = 0;
};

/// One DeepCAM sample file as MLPerf HPC's DeepCAM reads it: group climate/
/// with data (h, w, channels) float32 (HWC), data_stats (4, channels),
/// labels_0 and labels_1 (h, w) float32 of 0/1/2, labels_*_stats (7, 1);
/// contiguous, no filters, h5py's default file format. Adds the sample to
/// `stats` (may be null).
absl::Status write_deepcam_file(const std::string& path, uint64_t h, uint64_t w, uint64_t channels, uint64_t seed,
                                uint64_t index, DeepCamStats* stats);
/// DeepCAM's stats.h5: climate/{count,mean,sqmean,minval,maxval}, (channels,) float64.
absl::Status write_deepcam_stats(const std::string& path, const DeepCamStats& stats);
/// One CosmoFlow sample as MLPerf HPC's cosmoflow reads it: a GZIP TFRecord
/// of one tf.train.Example, `x` bytes of int16 of `shape` (128,128,128,4 at
/// full size), `y` float_list[4].
absl::Status write_cosmoflow_file(const std::string& path, const Shape& shape, uint64_t seed, uint64_t index);

/// The file name DLIO gives file i of n: "{prefix}_{i:0W}_of_{n}.{ext}".
std::string dlio_file_name(const std::string& prefix, uint64_t i, uint64_t n, const std::string& ext);

}  // namespace dlfeed::gen
