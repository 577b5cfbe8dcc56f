// SPDX-License-Identifier: Apache-2.0
// The reference layouts of the workload presets (workloads.h): DeepCAM's
// HDF5 files and CosmoFlow's GZIP TFRecords as their reference code reads
// them, written at a scale and found in a user's folder.
#include <cstdio>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dev/generate.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "json.h"
#include "workloads.h"

namespace dlfeed::cli {
namespace fs = std::filesystem;

namespace {

// DeepCAM's name of sample i: data-YYYY-MM-DD-HH-R.h5, eight 3-hourly
// samples a day from 2106-01-01, run 1 (the CAM5 runs' names).
std::string deepcam_name(uint64_t i) {
  using namespace std::chrono;
  const sys_days day = sys_days(year(2106) / January / 1) + days(static_cast<int64_t>(i / 8));
  const year_month_day ymd(day);
  return absl::StrFormat("data-%04d-%02u-%02u-%02d-1.h5", static_cast<int>(ymd.year()),
                         static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                         static_cast<int>(i % 8) * 3);
}

// CosmoFlow's: one universe's crops, numbered.
std::string cosmoflow_name(uint64_t i) {
  return absl::StrFormat("univ_ics_2019-03_a%08d_%03d.tfrecord", 10000000 + i / 64, i % 64);
}

bool is_reference_file(WorkloadLayout l, const fs::path& p) {
  const std::string name = p.filename().string();
  if (l == WorkloadLayout::kDeepCam) return absl::StartsWith(name, "data-") && p.extension() == ".h5";
  return p.extension() == ".tfrecord" || absl::EndsWith(name, ".tfrecord.gz");
}

bool holds_reference_file(WorkloadLayout l, const fs::path& dir) {
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (is_reference_file(l, it->path()) && it->is_regular_file(ec)) return true;
  }
  return false;
}

}  // namespace

std::string layout_name(WorkloadLayout l) {
  switch (l) {
    case WorkloadLayout::kDlio: return "dlio";
    case WorkloadLayout::kDeepCam: return "deepcam";
    case WorkloadLayout::kCosmoFlow: return "cosmoflow";
  }
  return "?";
}

std::vector<std::string> reference_data_files(const ScaledWorkload& w, const std::string& dir) {
  std::vector<std::string> out;
  for (uint64_t i = 0; i < w.files; ++i) {
    const std::string name = w.base->layout == WorkloadLayout::kDeepCam ? deepcam_name(i) : cosmoflow_name(i);
    out.push_back((fs::path(w.train_dir(dir)) / name).string());
  }
  return out;
}

absl::Status write_reference_dataset(const ScaledWorkload& w, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(w.train_dir(dir), ec);
  if (ec) return io_error(w.train_dir(dir), "mkdir", ec.value());
  const std::vector<std::string> files = reference_data_files(w, dir);
  if (w.base->layout == WorkloadLayout::kDeepCam) {
    const Shape& s = w.sample_shape;  // (H, W, C)
    gen::DeepCamStats stats(static_cast<size_t>(s[2]));
    for (uint64_t i = 0; i < files.size(); ++i) {
      DLFEED_RETURN_IF_ERROR(gen::write_deepcam_file(files[i], static_cast<uint64_t>(s[0]), static_cast<uint64_t>(s[1]),
                                                     static_cast<uint64_t>(s[2]), w.data_seed, i, &stats));
    }
    return gen::write_deepcam_stats((fs::path(dir) / "stats.h5").string(), stats);
  }
  for (uint64_t i = 0; i < files.size(); ++i) {
    DLFEED_RETURN_IF_ERROR(gen::write_cosmoflow_file(files[i], w.sample_shape, w.data_seed, i));
  }
  return absl::OkStatus();
}

std::string find_reference_files(const ScaledWorkload& w, const std::string& dir) {
  const fs::path train = fs::path(dir) / "train";
  if (holds_reference_file(w.base->layout, train)) return train.string();
  if (holds_reference_file(w.base->layout, dir)) return dir;
  return "";
}

std::optional<WorkloadLayout> preset_layout_of(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec).lexically_normal();
  for (const fs::path& dir : {p, p.parent_path()}) {
    const fs::path marker = dir / "dlfeed-workload.json";
    if (!fs::is_regular_file(marker, ec)) continue;
    absl::StatusOr<std::string> text = read_text_file(marker.string());
    if (!text.ok()) return std::nullopt;
    for (WorkloadLayout l : {WorkloadLayout::kDeepCam, WorkloadLayout::kCosmoFlow, WorkloadLayout::kDlio}) {
      if (absl::StrContains(*text, absl::StrCat("\"layout\":\"", layout_name(l), "\""))) return l;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

FormatOptions reference_format(const Workload& w, const Shape& shape) {
  FormatOptions o;
  o.format = w.format;
  if (w.layout == WorkloadLayout::kDeepCam) {
    o.axis = SampleAxis::kNone;  // one sample per file: the whole of climate/data (H, W, C)
    o.name = "climate/data";
  } else {
    o.feature = "x";
    o.feature_dtype = w.dtype;
    o.feature_shape = shape;
    o.shape_feature = "off";
  }
  return o;
}

}  // namespace dlfeed::cli
