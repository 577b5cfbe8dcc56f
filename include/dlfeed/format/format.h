// SPDX-License-Identifier: Apache-2.0
// Opening files and folders as a sample index, whatever their format.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/dtype.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI {

/// The on-disk formats dlfeed indexes.
enum class FileFormat { kAuto, kNpy, kNpz, kHdf5, kTfRecord, kIndexedBinary };

/// Which axis of an array enumerates samples.
enum class SampleAxis {
  kFirst,  // arr[k, ...]: each sample contiguous (dlfeed's default, HDF5)
  kLast,   // arr[..., k]: the DLIO benchmark's NPY/NPZ layout (strided)
  kAuto,   // kLast for NPY/NPZ files where and as DLIO's generator writes them
           // ({data}/train/ or valid/, optionally a numbered subfolder, named
           // {prefix}_{i}_of_{n} with i zero-padded), else kFirst
  kNone,   // the whole array is one sample (one sample per file and field:
           // DeepCAM's and CDB's HDF5 files, CosmoFlow's NPY pairs)
};

/// "first", "last", "auto", "none".
DLFEED_EXPORT std::string axis_name(SampleAxis a);
/// The inverse of axis_name; an error lists the names.
DLFEED_EXPORT absl::StatusOr<SampleAxis> parse_axis(absl::string_view name);

/// How files are turned into samples. Defaults read DLIO datasets as written.
struct DLFEED_EXPORT FormatOptions {
  FileFormat format = FileFormat::kAuto;  // kAuto: by file extension
  /// NPY and NPZ arrays; HDF5 datasets take kFirst (also for kAuto and
  /// kLast) or kNone. TFRecord records are samples whatever the axis.
  SampleAxis axis = SampleAxis::kAuto;
  /// NPZ member ("x"); HDF5 dataset ("records"; if absent, "records_0").
  std::string name;
  /// A file-name pattern with one '*' ("*_data.npy", "data-*.h5"): only the
  /// files whose name matches it are read, ordered by folder and then by
  /// what the '*' matched (so that fields of different patterns pair file
  /// by file); an NPY file so chosen is not filtered by `name` as a column.
  /// A pattern no file matches is NotFound, listing what is there.
  std::string file_pattern;
  /// TFRecord: the tf.train.Example feature that is the sample.
  std::string feature = "image";
  /// TFRecord: element type of the feature's bytes (bytes_list features) and
  /// optional fixed shape; without a shape a sample is 1-D.
  DType feature_dtype = DType::u8();
  std::optional<Shape> feature_shape;
  /// TFRecord: an int64 feature whose values give the feature's shape, per
  /// file, from its first record (records of a file must all match it):
  /// one value s where the record holds s*s elements (DLIO's `size`, the
  /// side of a square image) is [s, s]; values whose product is the element
  /// count are the shape. "auto" (default): `size`, only for files where
  /// DLIO's generator puts them (as SampleAxis::kAuto), and a file whose
  /// `size` does not describe its records (DLIO's record_length_stdev > 0
  /// writes the nominal side) stays 1-D with a note. A name: that feature,
  /// and a file without it, or that it does not describe, is an error.
  /// "" or "off": none (1-D). feature_shape, when set, wins.
  std::string shape_feature = "auto";
  bool verify_crc = true;          // TFRecord: check both CRC32C of every record
  bool use_index_files = true;     // TFRecord: read a DALI/DLIO .idx sidecar when present
  bool write_index_files = false;  // TFRecord: write the sidecar after a scan
  /// TFRecord: where sidecars live; empty: next to the file as NAME.idx, or
  /// the DLIO place {data}/index/{train|valid}/NAME.idx when that exists.
  std::string index_dir;
  /// The persistent dataset index: "" or "off" (none), "auto" (a file
  /// .dlfeed/index-HASH in the dataset folder when it is one writable
  /// folder, else under $XDG_CACHE_HOME/dlfeed or ~/.cache/dlfeed), or the
  /// cache file's path. A later open_dataset reads each unchanged file's
  /// index from it (same size, mtime and inode; for objects of a store,
  /// whose "auto" cache is the user's, same size and ETag) and indexes only
  /// the others; the cache is checked as untrusted input.
  std::string index_cache;
  /// How a reopen from the index cache knows the files are unchanged:
  /// "files" (a stat per file; a changed file is indexed again), or
  /// "folders" (when the paths are folders: a stat per folder, whose mtime
  /// changes when a file is added, removed or renamed in it; the cache's
  /// file list is taken without listing, and each file is checked against
  /// the cache's record when the loader first opens it, so a file rewritten
  /// in place since is an error naming it, never a wrong extent). "folders"
  /// is what makes a reopen of 10^6 files take under a second.
  std::string index_cache_check = "files";
};

/// Format of a path by its extension (.npy, .npz, .h5/.hdf5/.hdf/.he5;
/// .tfrecord/.tfrecords/.tfrec/.tfr, each also with .gz appended;
/// .indexed_binary/.mmap_indexed_binary, and .bin with its .idx beside it:
/// format/indexed_binary.h).
DLFEED_EXPORT absl::StatusOr<FileFormat> detect_format(const std::string& path);
DLFEED_EXPORT std::string format_name(FileFormat f);
DLFEED_EXPORT absl::StatusOr<FileFormat> parse_format(absl::string_view name);

/// Indexes one file.
DLFEED_EXPORT absl::StatusOr<SampleIndex> open_file(const std::string& path, const FormatOptions& options);

/// The column an NPY file holds: its name without a shard tag (x.npy and
/// x_000.npy hold column "x"; x-00001-of-00010.npy too).
DLFEED_EXPORT std::string npy_column_of(const std::string& path);

/// What the '*' of `pattern` (a file-name pattern with one '*') matched in
/// the name of `path`, or nullopt when the name does not match.
DLFEED_EXPORT std::optional<std::string> pattern_stem(const std::string& path, absl::string_view pattern);

/// Indexes a file, a folder (recursively, data files sorted by path; a DLIO
/// folder's index/ subfolder is skipped, and a folder holding both train/
/// and valid/, a DLIO data_folder, is read as its train/ with a note on
/// stderr), a glob pattern ("data/train/*.npz",
/// matches sorted), or a list of those, in the order given. With a name
/// (options.name), NPY files are columns: only those of that column count
/// (npy_column_of), and a name no NPY file has is NotFound, listing the
/// columns there are.
DLFEED_EXPORT absl::StatusOr<SampleIndex> open_dataset(const std::vector<std::string>& paths,
                                                       const FormatOptions& options);

/// An index as bytes, for another process to use without reading the
/// files' headers (mpi::Job::share_index sends it from one rank to the
/// others): every file's path, size and source state, or only its path for
/// the sources that are indexed again (compressed TFRecord, HDF5 read
/// through libhdf5). The receiver checks each state against the size it was
/// sent (no file system call) and indexes the others itself.
DLFEED_EXPORT std::string encode_index(const SampleIndex& index, const FormatOptions& options);
DLFEED_EXPORT absl::StatusOr<SampleIndex> decode_index(const std::string& bytes, const FormatOptions& options);

/// The fields one file offers: an NPZ's members (without .npy), an HDF5
/// file's datasets (at most 64, groups walked 4 deep), an NPY file's column.
/// TFRecord: Unimplemented (features are per record).
DLFEED_EXPORT absl::StatusOr<std::vector<std::string>> list_fields(const std::string& path,
                                                                   const FormatOptions& options);
DLFEED_EXPORT absl::StatusOr<std::vector<std::string>> npz_member_names(const std::string& path);
DLFEED_EXPORT absl::StatusOr<std::vector<std::string>> hdf5_dataset_names(const std::string& path);

// One per format, each indexing a single file.
DLFEED_EXPORT absl::StatusOr<SampleIndex> open_npy(const std::string& path, const FormatOptions& options);
DLFEED_EXPORT absl::StatusOr<SampleIndex> open_npz(const std::string& path, const FormatOptions& options);
DLFEED_EXPORT absl::StatusOr<SampleIndex> open_hdf5(const std::string& path, const FormatOptions& options);
DLFEED_EXPORT absl::StatusOr<SampleIndex> open_tfrecord(const std::string& path, const FormatOptions& options);

}  // namespace dlfeed
