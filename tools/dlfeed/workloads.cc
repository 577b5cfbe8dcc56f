// SPDX-License-Identifier: Apache-2.0
// dlfeed workloads: the preset table (tools/dlfeed/workloads.h), and the
// --workload/--scale/--data-dir flags that run and calibrate share.
#include "workloads.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "command.h"
#include "dev/generate.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "format/array_source.h"
#include "json.h"

ABSL_FLAG(std::string, workload, "",
          "A workload preset (unet3d, resnet50, cosmoflow, cosmoflow-dlio, bert, deepcam, hep; `dlfeed workloads` "
          "lists them): "
          "generate its dataset under --data-dir if missing, and use its batch size, compute time and fields "
          "unless given");
ABSL_FLAG(double, scale, 0,
          "With --workload: the dataset's size as a fraction of the published one, in (0, 1] "
          "(0: the preset's default; docs/workloads.md has the rule)");
ABSL_FLAG(std::string, data_dir, "", "With --workload: where its dataset lives (default data/workloads/NAME-SCALE)");

namespace dlfeed::cli {
namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestName = "dlfeed-workload.json";
constexpr const char* kPartialName = "dlfeed-workload.json.partial";
/// Bumped when the generator's output for the same parameters changes.
constexpr int kGeneratorVersion = 1;
/// Floors that keep a scaled workload a training run: at least 8 steps per
/// epoch (AU leaves out the first), and up to 8 files to shuffle.
constexpr uint64_t kMinSteps = 8;
constexpr uint64_t kMinFiles = 8;

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/// DLIO's sample for a record length: a d x d uint8 image, d = int(sqrt(bytes)).
Shape dlio_square(uint64_t record_bytes) {
  const auto d = static_cast<int64_t>(std::sqrt(static_cast<double>(record_bytes)));
  return {d, d};
}

}  // namespace

uint64_t Workload::sample_bytes() const { return static_cast<uint64_t>(num_elements(sample_shape)) * dtype.size; }
uint64_t ScaledWorkload::sample_bytes() const {
  return static_cast<uint64_t>(num_elements(sample_shape)) * base->dtype.size;
}

const std::vector<Workload>& workloads() {
  // compute_s is per step (one batch of the rank). The first four are the
  // DLIO benchmark's configurations (REFERENCE.md); DeepCAM and the HEP CNN
  // have no DLIO configuration: their batch and step time are estimates.
  // clang-format off
  static const std::vector<Workload> table = {
      {"unet3d", FileFormat::kNpz, 168, 1, dlio_square(146600628), DType::u8(), 7, 0.323, {"x"}, 0.01,
       "DLIO unet3d_h100.yaml: 168 NPZ files of one ~146.6 MB sample, batch 7, 0.323 s/step"},
      {"resnet50", FileFormat::kTfRecord, 1024, 1251, dlio_square(114660), DType::u8(), 400, 0.224, {"image"},
       0.0025, "MLPerf Storage / DLIO resnet50 (H100): 1024 TFRecord files x 1251 samples of ~114.7 KB, batch 400, "
       "0.224 s/step"},
      {"cosmoflow", FileFormat::kTfRecord, 524288, 1, {128, 128, 128, 4}, DType{DType::Kind::kInt, 2, false}, 4, 0.014, {"x"}, 0.00004,
       "MLPerf HPC CosmoFlow v1.0: 524,288 GZIP TFRecord files of one Example (x: int16 (128,128,128,4), y: "
       "float[4]), batch 4 as the reference; 0.014 s/step is DLIO's 0.0035 s per sample x 4",
       WorkloadLayout::kCosmoFlow},
      {"cosmoflow-dlio", FileFormat::kTfRecord, 524288, 1, dlio_square(2828486), DType::u8(), 1, 0.0035, {"image"},
       0.0002, "DLIO cosmoflow_h100.yaml: 524,288 TFRecord files of one ~2.83 MB sample, batch 1, 0.0035 s/step"},
      {"bert", FileFormat::kTfRecord, 500, 313532, dlio_square(2500), DType::u8(), 48, 0.968, {"image"}, 0.00002,
       "DLIO bert_v100.yaml: 500 TFRecord files x 313,532 samples of 2,500 B, batch 48, 0.968 s/step (V100)"},
      {"deepcam", FileFormat::kHdf5, 121266, 1, {768, 1152, 16}, DType::f32(), 2, 0.2,
       {"climate/data", "climate/labels_0"}, 0.00005, "MLPerf HPC DeepCAM: 121,266 HDF5 files data-YYYY-MM-DD-HH-R.h5 "
       "of one sample, climate/data 768x1152x16 float32 (56.6 MB) and climate/labels_0, read with axis none; batch 2 "
       "as the reference, 0.2 s/step an estimate (about 10 samples/s per GPU)", WorkloadLayout::kDeepCam},
      {"hep", FileFormat::kHdf5, 2048, 402, {224, 224, 3}, DType::f32(), 64, 0.064, {"records_0", "labels"},
       0.000625, "HEP CNN benchmark: 2048 HDF5 files, 496 GB (402 samples of 224x224x3 float32 per file); batch 64 "
       "and 0.064 s/step are estimates (about 1000 samples/s per GPU)"},
  };
  // clang-format on
  return table;
}

absl::StatusOr<const Workload*> find_workload(const std::string& name) {
  std::vector<std::string> names;
  for (const Workload& w : workloads()) {
    if (w.name == name) return &w;
    names.push_back(w.name);
  }
  return absl::NotFoundError(
      absl::StrCat("unknown workload '", name, "': expected one of ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<ScaledWorkload> scale_workload(const Workload& w, double scale) {
  if (!(scale > 0 && scale <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("bad --scale ", scale_str(scale), " for workload ", w.name,
                                                   ": expected a fraction of the published dataset in (0, 1], e.g. ",
                                                   scale_str(w.default_scale)));
  }
  ScaledWorkload s;
  s.base = &w;
  s.scale = scale;
  s.batch_size = w.batch_size;
  const double target = static_cast<double>(w.samples()) * scale;  // samples at the published size
  const uint64_t floor_samples = std::min<uint64_t>(w.samples(), kMinSteps * w.batch_size);
  const uint64_t min_files = std::min<uint64_t>(w.files, kMinFiles);
  const uint64_t want = std::max<uint64_t>(floor_samples, static_cast<uint64_t>(std::llround(target)));
  s.samples_per_file = std::min<uint64_t>(w.samples_per_file, ceil_div(want, min_files));
  s.files = std::max<uint64_t>({1, ceil_div(floor_samples, s.samples_per_file),
                                static_cast<uint64_t>(std::llround(target / static_cast<double>(s.samples_per_file)))});
  s.files = std::min(s.files, w.files);
  s.sample_shape = w.sample_shape;
  if (target < static_cast<double>(floor_samples)) {
    // The floor holds more samples than the scale pays for: shrink each
    // sample (its first two dimensions, by the square root) so the dataset is
    // still scale x the published bytes.
    const double r = target / static_cast<double>(s.samples());
    const double k = std::sqrt(r);
    for (size_t d = 0; d < std::min<size_t>(2, s.sample_shape.size()); ++d) {
      s.sample_shape[d] = std::max<int64_t>(1, std::llround(static_cast<double>(s.sample_shape[d]) * k));
    }
  }
  s.sample_ratio = static_cast<double>(s.sample_bytes()) / static_cast<double>(w.sample_bytes());
  // Compute per step follows the bytes per step, so I/O and compute keep
  // their published proportion.
  s.compute_s = w.compute_s * s.sample_ratio;
  return s;
}

std::string ScaledWorkload::train_dir(const std::string& dir) const { return (fs::path(dir) / "train").string(); }

std::string ScaledWorkload::default_dir() const {
  return (fs::path("data") / "workloads" / absl::StrCat(base->name, "-", scale_str(scale))).string();
}

FormatOptions ScaledWorkload::format_options() const {
  if (base->layout != WorkloadLayout::kDlio) return reference_format(*base, sample_shape);
  FormatOptions o;
  o.format = base->format;
  if (base->format == FileFormat::kTfRecord) {
    o.feature = base->fields.front();
    o.feature_dtype = base->dtype;
    o.feature_shape = sample_shape;
  } else {
    o.name = base->fields.front();
  }
  return o;
}

std::string ScaledWorkload::manifest() const {
  std::vector<std::string> dims;
  for (int64_t d : sample_shape) dims.push_back(absl::StrCat(d));
  return absl::StrCat(
      "{\"schema\":\"dlfeed.workload/1\",\"workload\":", json_quote(base->name), ",\"scale\":", json_number(scale),
      ",\"format\":", json_quote(format_name(base->format)), ",\"layout\":", json_quote(layout_name(base->layout)),
      ",\"files\":", files, ",\"samples_per_file\":", samples_per_file, ",\"sample_shape\":[", absl::StrJoin(dims, ","),
      "],\"dtype\":", json_quote(base->dtype.name()), ",\"sample_bytes\":", sample_bytes(),
      ",\"dataset_bytes\":", dataset_bytes(), ",\"seed\":", data_seed, ",\"generator\":", kGeneratorVersion, "}\n");
}

std::string ScaledWorkload::extension() const {
  return base->format == FileFormat::kTfRecord ? "tfrecord" : format_name(base->format);
}

std::vector<std::string> ScaledWorkload::data_files(const std::string& dir) const {
  if (base->layout != WorkloadLayout::kDlio) return reference_data_files(*this, dir);
  std::vector<std::string> out;
  const std::string ext = extension();
  for (uint64_t i = 0; i < files; ++i) {
    out.push_back((fs::path(train_dir(dir)) / gen::dlio_file_name("img", i, files, ext)).string());
  }
  return out;
}

namespace {

/// Free bytes on the file system that holds `dir` (or its nearest existing ancestor).
uint64_t free_bytes(const fs::path& dir) {
  fs::path p = fs::absolute(dir);
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  struct statvfs st {};
  if (p.empty() || ::statvfs(p.c_str(), &st) != 0) return UINT64_MAX;  // unknown: let the writes tell
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

/// Whether DIR/train holds a file of the workload's format where and as the
/// DLIO benchmark's generator writes them ({prefix}_{i}_of_{n}.EXT, optionally
/// in numbered subfolders). Stops at the first.
bool has_dlio_files(const ScaledWorkload& w, const std::string& dir) {
  std::error_code ec;
  const std::string ext = "." + w.extension();
  for (auto it = fs::recursive_directory_iterator(w.train_dir(dir), ec); !ec && it != fs::end(it); it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() == ext && detail::in_dlio_layout(p.string()) && it->is_regular_file(ec)) return true;
  }
  return false;
}

bool complete(const ScaledWorkload& w, const std::string& dir) {
  std::error_code ec;
  for (const std::string& f : w.data_files(dir)) {
    if (!fs::is_regular_file(f, ec) || fs::file_size(f, ec) == 0) return false;
  }
  return true;
}

absl::Status generate(const ScaledWorkload& w, const std::string& dir) {
  const uint64_t need = w.dataset_bytes() + w.dataset_bytes() / 20;
  const uint64_t have = free_bytes(dir);
  if (need > have) {
    return absl::ResourceExhaustedError(absl::StrCat(
        dir, ": workload ", w.base->name, " at scale ", scale_str(w.scale), " needs about ", bytes_str(need),
        " but the file system has ", bytes_str(have), " free; choose a smaller --scale or another --data-dir"));
  }
  // Marks the folder as ours while generation runs: if it is interrupted,
  // the next run knows it may remove the half-written files.
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error(dir, "mkdir", ec.value());
  const std::string partial = (fs::path(dir) / kPartialName).string();
  DLFEED_RETURN_IF_ERROR(write_text_file(partial, w.manifest()));
  if (w.base->layout != WorkloadLayout::kDlio) {
    DLFEED_RETURN_IF_ERROR(write_reference_dataset(w, dir));
    DLFEED_RETURN_IF_ERROR(write_text_file((fs::path(dir) / kManifestName).string(), w.manifest()));
    fs::remove(partial, ec);
    return absl::OkStatus();
  }
  gen::DatasetSpec spec;
  spec.dir = dir;
  spec.format = w.base->format;
  spec.files = w.files;
  spec.samples_per_file = w.samples_per_file;
  spec.sample_shape = w.sample_shape;
  spec.dtype = w.base->dtype;
  spec.dlio_layout = true;
  spec.seed = w.data_seed;
  DLFEED_ASSIGN_OR_RETURN(std::vector<std::string> written, gen::write_dataset(spec));
  if (written != w.data_files(dir)) {
    return absl::InternalError(absl::StrCat(dir, ": the generator wrote other files than the workload expects"));
  }
  // Written last: a manifest means every file before it is complete.
  DLFEED_RETURN_IF_ERROR(write_text_file((fs::path(dir) / kManifestName).string(), w.manifest()));
  fs::remove(partial, ec);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DatasetAction> ensure_dataset(const ScaledWorkload& w, const std::string& dir) {
  const fs::path manifest = fs::path(dir) / kManifestName;
  std::error_code ec;
  if (fs::exists(manifest, ec) || fs::exists(fs::path(dir) / kPartialName, ec)) {
    if (fs::exists(manifest, ec)) {
      DLFEED_ASSIGN_OR_RETURN(std::string have, read_text_file(manifest.string()));
      if (have == w.manifest() && complete(w, dir)) return DatasetAction::kReused;
    }
    // Ours (it has our manifest) but of other parameters or incomplete:
    // remove what generation writes, then write it again.
    for (const char* sub : {"train", "valid", "validation", "index", "stats.h5"}) {
      fs::remove_all(fs::path(dir) / sub, ec);
      if (ec) return io_error((fs::path(dir) / sub).string(), "remove", ec.value());
    }
    fs::remove(manifest, ec);
    DLFEED_RETURN_IF_ERROR(generate(w, dir));
    return DatasetAction::kRegenerated;
  }
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    if (w.base->layout != WorkloadLayout::kDlio && !find_reference_files(w, dir).empty()) {
      return DatasetAction::kReferenceFiles;
    }
    if (w.base->layout == WorkloadLayout::kDlio && has_dlio_files(w, dir)) return DatasetAction::kDlioLayout;
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": exists and is not a dlfeed workload dataset (it has no ", kManifestName,
                     "), so it is left alone; choose another --data-dir or remove it"));
  }
  DLFEED_RETURN_IF_ERROR(generate(w, dir));
  return DatasetAction::kGenerated;
}

std::string scale_str(double scale) { return absl::StrFormat("%g", scale); }

std::string bytes_str(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e12) return absl::StrFormat("%.1f TB", b / 1e12);
  if (b >= 1e9) return absl::StrFormat("%.1f GB", b / 1e9);
  if (b >= 1e6) return absl::StrFormat("%.1f MB", b / 1e6);
  if (b >= 1e3) return absl::StrFormat("%.1f KB", b / 1e3);
  return absl::StrFormat("%d B", bytes);
}

absl::StatusOr<ScaledWorkload> workload_from_flags() {
  DLFEED_ASSIGN_OR_RETURN(const Workload* w, find_workload(absl::GetFlag(FLAGS_workload)));
  const double scale = absl::GetFlag(FLAGS_scale);
  return scale_workload(*w, scale == 0 ? w->default_scale : scale);
}

bool workload_given() { return !absl::GetFlag(FLAGS_workload).empty(); }

std::vector<std::pair<std::string, std::string>> workload_settings() {
  return {{"--workload", absl::GetFlag(FLAGS_workload)},
          {"--scale", absl::StrCat(absl::GetFlag(FLAGS_scale))},
          {"--data-dir", absl::GetFlag(FLAGS_data_dir)}};
}

FlagGroup workload_flags() { return flag_group("Workload preset flags", FLAGS_workload, FLAGS_scale, FLAGS_data_dir); }

absl::StatusOr<std::string> workload_dataset_from_flags(const ScaledWorkload& w, bool quiet, FormatOptions* format) {
  std::string dir = absl::GetFlag(FLAGS_data_dir);
  if (dir.empty()) dir = w.default_dir();
  if (!quiet) {
    std::printf(
        "workload %s at scale %s: %llu files x %llu samples of %s %s (%s), batch %u, %.4g s compute/step; "
        "%s in %s\n",
        w.base->name.c_str(), scale_str(w.scale).c_str(), static_cast<unsigned long long>(w.files),
        static_cast<unsigned long long>(w.samples_per_file), shape_str(w.sample_shape).c_str(),
        w.base->dtype.name().c_str(), bytes_str(w.sample_bytes()).c_str(), w.batch_size, w.compute_s,
        bytes_str(w.dataset_bytes()).c_str(), dir.c_str());
    std::fflush(stdout);
  }
  DLFEED_ASSIGN_OR_RETURN(DatasetAction action, ensure_dataset(w, dir));
  *format = w.format_options();
  if (action == DatasetAction::kReferenceFiles) {
    *format = reference_format(*w.base, w.base->sample_shape);  // the published shape, not the scaled one
    const std::string found = find_reference_files(w, dir);
    if (!quiet) {
      std::printf(
          "dataset: %s's own files, not written by dlfeed (no %s): %s, read as the reference reads them; the "
          "preset's batch size, compute and strategy apply, its file counts and sample shape do not\n",
          w.base->name.c_str(), kManifestName, found.c_str());
    }
    return found;
  }
  if (action == DatasetAction::kDlioLayout) {
    format->feature_shape.reset();  // DLIO's sides, from each file's `size`, not the preset's
    if (!quiet) {
      std::printf(
          "dataset: DLIO's layout, not written by dlfeed (no %s): the %s files in %s, read as they are; the "
          "preset's batch size, compute and strategy apply, its file counts and sample shape do not\n",
          kManifestName, w.extension().c_str(), w.train_dir(dir).c_str());
    }
    return w.train_dir(dir);
  }
  if (!quiet) {
    std::printf("dataset: %s\n", action == DatasetAction::kReused      ? "complete, reused"
                                 : action == DatasetAction::kGenerated ? "generated"
                                                                       : "regenerated (its parameters differed)");
  }
  return w.train_dir(dir);
}

namespace {

int run_workloads(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::fprintf(stderr, "dlfeed workloads: takes no arguments (see --help)\n");
    return 2;
  }
  const double scale = absl::GetFlag(FLAGS_scale);
  std::printf("%-14s %-8s %8s %10s %-20s %-7s %10s %6s %10s %10s  %s\n", "workload", "format", "scale", "files",
              "sample", "dtype", "bytes", "batch", "compute_s", "dataset", "fields");
  for (const Workload& w : workloads()) {
    for (const bool published : {true, false}) {
      const ScaledWorkload s =
          value_or_throw(scale_workload(w, published ? 1.0 : (scale == 0 ? w.default_scale : scale)));
      std::printf("%-14s %-8s %8s %10llu %-20s %-7s %10llu %6u %10.4g %10s  %s\n", published ? w.name.c_str() : "",
                  format_name(w.format).c_str(), published ? "1" : scale_str(s.scale).c_str(),
                  static_cast<unsigned long long>(s.files),
                  absl::StrCat(s.samples_per_file, "x", shape_str(s.sample_shape)).c_str(), w.dtype.name().c_str(),
                  static_cast<unsigned long long>(s.sample_bytes()), s.batch_size, s.compute_s,
                  bytes_str(s.dataset_bytes()).c_str(), absl::StrJoin(w.fields, ",").c_str());
    }
  }
  std::printf("\nsample = samples per file x the shape of one sample. Sources:\n");
  for (const Workload& w : workloads()) std::printf("  %-14s %s\n", w.name.c_str(), w.source.c_str());
  return 0;
}

std::vector<FlagGroup> workloads_flags() { return {flag_group("", FLAGS_scale)}; }

}  // namespace

DLFEED_COMMAND(workloads, "list the workload presets, published and at --scale (default: each preset's own)", "",
               run_workloads, workloads_flags);

}  // namespace dlfeed::cli
