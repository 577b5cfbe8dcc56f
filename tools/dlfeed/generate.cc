// SPDX-License-Identifier: Apache-2.0
// dlfeed generate: synthetic datasets in every format, deterministic from a
// seed, optionally in the DLIO benchmark's exact on-disk layout.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "command.h"
#include "common_format.h"
#include "dev/generate.h"
#include "dlfeed/error.h"

ABSL_FLAG(std::string, dir, "", "Output folder (created if missing)");
ABSL_FLAG(uint64_t, valid_files, 0, "Number of files under valid/ (dlio layout)");
ABSL_FLAG(std::string, shape, "64,64", "Shape of one sample, e.g. 64,64 or 768x1152x16");
ABSL_FLAG(std::string, dtype, "uint8", "Element type: bool, int8..int64, uint8..uint64, float16/32/64, or <f4-style");
ABSL_FLAG(std::string, compression, "none", "none, or deflate (alias gzip): NPZ savez_compressed, HDF5 gzip filter");
ABSL_FLAG(int32_t, level, 4, "Deflate level 1-9");
ABSL_FLAG(uint64_t, chunk_samples, 0, "HDF5: samples per chunk (0: contiguous; compression needs chunks)");
ABSL_FLAG(bool, hdf5_shuffle, false, "HDF5: shuffle filter before deflate");
ABSL_FLAG(uint64_t, hdf5_datasets, 1, "HDF5, dlio layout: datasets records_0..records_{k-1} per file");
ABSL_FLAG(std::string, prefix, "img", "File name prefix");

namespace dlfeed::cli {
namespace {

// Data files under `dir` this run did not write (an earlier generate's, with
// more files): a loader of the folder reads them too, so say so.
void note_other_files(const std::string& dir, const std::vector<std::string>& written) {
  namespace fs = std::filesystem;
  std::set<std::string> ours;
  for (const std::string& f : written) ours.insert(fs::weakly_canonical(f).string());
  std::vector<std::string> others;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec) || !detect_format(it->path().string()).ok()) continue;
    if (ours.count(fs::weakly_canonical(it->path()).string()) == 0) others.push_back(it->path().string());
  }
  if (others.empty()) return;
  std::sort(others.begin(), others.end());
  std::printf(
      "note: %s also holds %zu data files this run did not write (%s%s); a loader of the folder reads them "
      "too: remove them, or generate into an empty folder\n",
      dir.c_str(), others.size(), others.front().c_str(), others.size() > 1 ? ", ..." : "");
}

int run_generate(const std::vector<std::string>& args) {
  gen::DatasetSpec spec;
  spec.dir = absl::GetFlag(FLAGS_dir);
  if (spec.dir.empty() && !args.empty()) spec.dir = args[0];
  if (spec.dir.empty()) {
    std::fprintf(stderr, "dlfeed generate: give --dir (see --help)\n");
    return 2;
  }
  spec.format = value_or_throw(parse_format(absl::GetFlag(FLAGS_format)));
  if (spec.format == FileFormat::kAuto) {
    std::fprintf(stderr, "dlfeed generate: give --format npy|npz|hdf5|tfrecord|indexed_binary\n");
    return 2;
  }
  std::string layout = absl::GetFlag(FLAGS_layout);
  if (layout == "auto") layout = "flat";
  if (layout != "flat" && layout != "dlio") {
    throw Error(absl::InvalidArgumentError(absl::StrCat("bad --layout '", layout, "': expected flat or dlio")));
  }
  spec.dlio_layout = layout == "dlio";
  spec.files = absl::GetFlag(FLAGS_files);
  spec.valid_files = absl::GetFlag(FLAGS_valid_files);
  spec.samples_per_file = absl::GetFlag(FLAGS_samples_per_file);
  spec.sample_shape = value_or_throw(parse_shape(absl::GetFlag(FLAGS_shape)));
  spec.dtype = value_or_throw(DType::parse(absl::GetFlag(FLAGS_dtype)));
  const std::string comp = absl::GetFlag(FLAGS_compression);
  if (comp == "none")
    spec.compression = gen::Compression::kNone;
  else if (comp == "deflate" || comp == "gzip" || comp == "zlib")
    spec.compression = gen::Compression::kDeflate;
  else
    throw Error(absl::InvalidArgumentError(absl::StrCat("bad --compression '", comp, "': expected none or deflate")));
  spec.level = absl::GetFlag(FLAGS_level);
  if (spec.compression != gen::Compression::kNone && (spec.level < 1 || spec.level > 9)) {
    throw Error(absl::InvalidArgumentError(absl::StrCat("--level ", spec.level, ": a deflate level is 1 to 9")));
  }
  // Samples dlfeed reads: at least one element, and a file's bytes within 64 bits (an overflowing shape
  // wrote a header alone, and said it wrote the files).
  unsigned __int128 file_bytes =
      spec.dtype.size * static_cast<unsigned __int128>(std::max<uint64_t>(1, spec.samples_per_file));
  for (int64_t d : spec.sample_shape) {
    if (d <= 0) {
      throw Error(absl::InvalidArgumentError(absl::StrCat(
          "--shape ", absl::GetFlag(FLAGS_shape), ": every dimension is at least 1 (dlfeed reads no empty samples)")));
    }
    file_bytes *= static_cast<uint64_t>(d);
    if (file_bytes >> 63 != 0) {
      throw Error(
          absl::InvalidArgumentError(absl::StrCat("--shape ", absl::GetFlag(FLAGS_shape), " with --samples-per-file ",
                                                  spec.samples_per_file, ": a file of more than 2^63 bytes")));
    }
  }
  spec.chunk_samples = absl::GetFlag(FLAGS_chunk_samples);
  spec.hdf5_shuffle = absl::GetFlag(FLAGS_hdf5_shuffle);
  spec.hdf5_datasets = absl::GetFlag(FLAGS_hdf5_datasets);
  spec.seed = absl::GetFlag(FLAGS_seed);
  spec.prefix = absl::GetFlag(FLAGS_prefix);
  if (spec.format == FileFormat::kHdf5 && spec.compression != gen::Compression::kNone && spec.chunk_samples == 0) {
    spec.chunk_samples = std::max<uint64_t>(1, std::min<uint64_t>(spec.samples_per_file, 8));
  }
  if (spec.format == FileFormat::kTfRecord && spec.compression != gen::Compression::kNone) {
    throw Error(absl::InvalidArgumentError("compressed TFRecord files are not supported; use --compression none"));
  }
  if (spec.format == FileFormat::kNpy && spec.compression != gen::Compression::kNone) {
    throw Error(absl::InvalidArgumentError(".npy has no compression; use --format npz --compression deflate"));
  }
  std::vector<std::string> files = value_or_throw(gen::write_dataset(spec));
  std::printf("wrote %zu %s files (%llu samples each, shape %s %s, layout %s) under %s\n", files.size(),
              format_name(spec.format).c_str(), static_cast<unsigned long long>(spec.samples_per_file),
              shape_str(spec.sample_shape).c_str(), spec.dtype.name().c_str(), layout.c_str(), spec.dir.c_str());
  note_other_files(spec.dir, files);
  return 0;
}

std::vector<FlagGroup> generate_flags() {
  return {flag_group("", FLAGS_dir, FLAGS_format, FLAGS_layout, FLAGS_files, FLAGS_valid_files, FLAGS_samples_per_file,
                     FLAGS_shape, FLAGS_dtype, FLAGS_compression, FLAGS_level, FLAGS_chunk_samples, FLAGS_hdf5_shuffle,
                     FLAGS_hdf5_datasets, FLAGS_seed, FLAGS_prefix)};
}

}  // namespace

DLFEED_COMMAND(generate,
               "write a synthetic dataset (npy, npz, hdf5, tfrecord, indexed_binary; --layout dlio for DLIO's layout)",
               "[DIR]", run_generate, generate_flags);

}  // namespace dlfeed::cli
