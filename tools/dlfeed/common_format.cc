// SPDX-License-Identifier: Apache-2.0
#include "common_format.h"

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dlfeed/format/format.h"

ABSL_FLAG(std::string, format, std::string(dlfeed::format_name(dlfeed::FormatOptions{}.format)),
          "File format: auto (by extension), npy, npz, hdf5, tfrecord, indexed_binary");
ABSL_FLAG(std::string, name, "",
          "NPZ member (default x) or HDF5 dataset (default records, else records_0) holding the samples");
ABSL_FLAG(std::string, layout, "auto",
          "generate: flat (DIR/{prefix}_{i}.{ext}, samples on the first axis; auto means flat) or dlio (the DLIO "
          "benchmark's layout: train/ and valid/, NPY/NPZ samples on the last axis, NPZ members x and y, HDF5 "
          "records_0.. and labels, TFRecord image/size features with index/{train,valid}/NAME.idx). Reading: dlio "
          "(NPY/NPZ samples on the last axis), plain (first axis), or auto (the DLIO layout only for files where and "
          "as DLIO's generator writes them: {data}/train/ or valid/ and names {prefix}_{i}_of_{n})");
ABSL_FLAG(std::string, axis, "auto",
          "Sample axis of arrays: first, last (NPY/NPZ: the DLIO benchmark's layout), none (each NPY file, NPZ "
          "member or HDF5 dataset is one whole sample: DeepCAM's and CDB's HDF5 files, CosmoFlow's NPY pairs), or "
          "auto (as --layout says; HDF5 datasets: axis 0)");
ABSL_FLAG(std::string, feature, dlfeed::FormatOptions{}.feature,
          "TFRecord: the tf.train.Example feature that is the sample");
ABSL_FLAG(std::string, feature_dtype, dlfeed::FormatOptions{}.feature_dtype.name(),
          "TFRecord: element type of a bytes_list feature");
ABSL_FLAG(std::string, feature_shape, "", "TFRecord: shape of the feature, e.g. 64,64 (default: 1-D)");
ABSL_FLAG(std::string, shape_feature, dlfeed::FormatOptions{}.shape_feature,
          "TFRecord: an int64 feature giving the shape of --feature, per file from its first record (one value s for "
          "s*s elements is s x s, as DLIO's size; values whose product is the element count are the shape). auto: "
          "size, for files where and as DLIO's generator writes them, 1-D with a note where size does not describe "
          "the record; off: 1-D; a name: that feature, an error where it is missing or does not fit");
ABSL_FLAG(bool, no_verify_crc, false, "TFRecord: skip the CRC32C checks of records");
ABSL_FLAG(std::string, index_dir, "", "TFRecord: folder of .idx sidecars (default: next to the file or DLIO's index/)");
ABSL_FLAG(bool, no_index_files, false, "TFRecord: ignore .idx sidecars and scan the files");
ABSL_FLAG(bool, write_index, false, "TFRecord: write .idx sidecars after scanning");
ABSL_FLAG(std::string, index_cache, "",
          "Persistent dataset index: off (default), auto (.dlfeed/index-HASH in the dataset folder, or under "
          "~/.cache/dlfeed when that is not writable), or the cache file's path (PATH.FIELD for each of several "
          "fields). Reopening reads unchanged "
          "files' indexes from it");
ABSL_FLAG(std::string, index_cache_check, dlfeed::FormatOptions{}.index_cache_check,
          "How a reopen from --index-cache knows the files are unchanged: files (a stat per file; changed "
          "files are indexed again) or folders (a stat per folder, the cached file list; a file rewritten in "
          "place since is an error at its first read)");

namespace dlfeed::cli {

absl::StatusOr<Shape> parse_shape(absl::string_view text) {
  // Every part a number: "3x" or "3,,4" is a typo, not (3,) or (3, 4); "" is a scalar.
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar(",x"))) {
    if (part.empty() && !text.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("bad shape '", text, "': expected dimensions like 64,64"));
    }
  }
  Shape s;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar(",x"), absl::SkipEmpty())) {
    int64_t d = 0;
    if (!absl::SimpleAtoi(part, &d) || d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad shape '", text, "': expected dimensions like 64,64"));
    }
    s.push_back(d);
  }
  return s;
}

absl::StatusOr<FormatOptions> format_options_from_flags() {
  FormatOptions o;
  auto f = parse_format(absl::GetFlag(FLAGS_format));
  if (!f.ok()) return f.status();
  o.format = *f;
  o.name = absl::GetFlag(FLAGS_name);
  const std::string axis = absl::GetFlag(FLAGS_axis);
  auto parsed_axis = parse_axis(axis);
  if (!parsed_axis.ok()) return absl::InvalidArgumentError(absl::StrCat("--axis: ", parsed_axis.status().message()));
  o.axis = *parsed_axis;
  const std::string layout = absl::GetFlag(FLAGS_layout);
  SampleAxis by_layout = SampleAxis::kAuto;
  if (layout == "dlio")
    by_layout = SampleAxis::kLast;
  else if (layout == "plain" || layout == "flat")
    by_layout = SampleAxis::kFirst;
  else if (layout != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("bad --layout '", layout, "': expected dlio, plain or auto"));
  }
  if (by_layout != SampleAxis::kAuto) {
    if (o.axis != SampleAxis::kAuto && o.axis != by_layout) {
      return absl::InvalidArgumentError(
          absl::StrCat("--layout ", layout, " and --axis ", axis, " contradict each other"));
    }
    o.axis = by_layout;
  }
  o.feature = absl::GetFlag(FLAGS_feature);
  auto dt = DType::parse(absl::GetFlag(FLAGS_feature_dtype));
  if (!dt.ok()) return dt.status();
  o.feature_dtype = *dt;
  if (!absl::GetFlag(FLAGS_feature_shape).empty()) {
    auto s = parse_shape(absl::GetFlag(FLAGS_feature_shape));
    if (!s.ok()) return s.status();
    o.feature_shape = *s;
  }
  o.shape_feature = absl::GetFlag(FLAGS_shape_feature);
  o.verify_crc = !absl::GetFlag(FLAGS_no_verify_crc);
  o.index_dir = absl::GetFlag(FLAGS_index_dir);
  o.use_index_files = !absl::GetFlag(FLAGS_no_index_files);
  o.write_index_files = absl::GetFlag(FLAGS_write_index);
  o.index_cache = absl::GetFlag(FLAGS_index_cache);
  o.index_cache_check = absl::GetFlag(FLAGS_index_cache_check);
  return o;
}

FlagGroup format_flags() {
  return flag_group("Dataset flags", FLAGS_format, FLAGS_name, FLAGS_layout, FLAGS_axis, FLAGS_feature,
                    FLAGS_feature_dtype, FLAGS_feature_shape, FLAGS_shape_feature, FLAGS_no_verify_crc, FLAGS_index_dir,
                    FLAGS_no_index_files, FLAGS_write_index, FLAGS_index_cache, FLAGS_index_cache_check);
}

}  // namespace dlfeed::cli

namespace dlfeed::cli {

absl::StatusOr<OrderSpec> order_spec_from_flags() {
  OrderSpec spec;
  spec.strategy = absl::GetFlag(FLAGS_strategy);
  spec.seed = absl::GetFlag(FLAGS_seed);
  spec.rank = absl::GetFlag(FLAGS_rank);
  spec.world_size = absl::GetFlag(FLAGS_world_size);
  spec.drop_last = absl::GetFlag(FLAGS_drop_last);
  spec.params.buffer_size = absl::GetFlag(FLAGS_buffer_size);
  spec.params.block_size = absl::GetFlag(FLAGS_block_size);
  spec.params.window = absl::GetFlag(FLAGS_window);
  if (spec.world_size == 0 || spec.rank >= spec.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank ", spec.rank, " must be below --world-size ", spec.world_size));
  }
  return spec;
}

FlagGroup order_flags() {
  return flag_group("Order flags", FLAGS_strategy, FLAGS_seed, FLAGS_rank, FLAGS_world_size, FLAGS_drop_last,
                    FLAGS_buffer_size, FLAGS_block_size, FLAGS_window);
}

}  // namespace dlfeed::cli
