// SPDX-License-Identifier: Apache-2.0
// Writing the reference workloads' own files (generate.h, "Reference
// workloads"): DeepCAM's HDF5 samples and stats.h5, as h5py writes them for
// MLPerf HPC's DeepCAM, and CosmoFlow's GZIP TFRecords, as MLPerf HPC's
// cosmoflow prepare.py writes them.
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "dlfeed/error.h"
#include "dlfeed/format/example.h"
#include "dlfeed/format/tfrecord.h"
#include "format/hdf5_util.h"

namespace dlfeed::inline DLFEED_ABI::gen {
namespace {

using detail::h5::create_dataset;
using detail::h5::create_file;
using detail::h5::H5Lock;
using detail::h5::Hid;
using detail::h5::make_type;
using detail::h5::write_failed;

// A deterministic value in [0, 1) of (seed, a, b).
double unit(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ (a + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^ b;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

// The whole dataset `name` of shape `dims`, elements of type `t` (the type
// h5py gives them, make_type) from `data`, in that byte order.
absl::Status write_array(hid_t file, const std::string& path, const std::string& name, const std::vector<hsize_t>& dims,
                         DType t, const void* data) {
  Hid space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Hid type(make_type(t), H5Tclose);
  Hid dset(create_dataset(file, name, type.get(), space.get(), H5P_DEFAULT), H5Dclose);
  if (!dset.ok()) return write_failed(path, absl::StrCat("creating dataset '", name, "'"));
  if (H5Dwrite(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    return write_failed(path, absl::StrCat("writing '", name, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

void DeepCamStats::add(const float* hwc, uint64_t pixels) {
  const size_t c = minval.size();
  for (uint64_t p = 0; p < pixels; ++p) {
    for (size_t k = 0; k < c; ++k) {
      const double v = hwc[p * c + k];
      minval[k] = std::min(minval[k], v);
      maxval[k] = std::max(maxval[k], v);
      sum[k] += v;
      sqsum[k] += v * v;
    }
  }
  count += static_cast<double>(pixels);
}

absl::Status write_deepcam_file(const std::string& path, uint64_t h, uint64_t w, uint64_t channels, uint64_t seed,
                                uint64_t index, DeepCamStats* stats) {
  const uint64_t pixels = h * w;
  std::vector<float> data(pixels * channels), labels(pixels);
  // Channel k has its own range (as the climate variables do): k + 1 times a
  // smooth field plus noise, offset by 10 k.
  for (uint64_t y = 0; y < h; ++y) {
    for (uint64_t x = 0; x < w; ++x) {
      const uint64_t p = y * w + x;
      const double smooth = 0.5 + 0.5 * std::sin(0.05 * static_cast<double>(x + index) + 0.03 * static_cast<double>(y));
      for (uint64_t k = 0; k < channels; ++k) {
        data[p * channels + k] =
            static_cast<float>(10.0 * static_cast<double>(k) +
                               static_cast<double>(k + 1) * (smooth + 0.25 * unit(seed, index, p * channels + k)));
      }
      // 0 background, 1 tropical cyclone, 2 atmospheric river: mostly background.
      const double u = unit(seed ^ 0x1abe1, index, p);
      labels[p] = u < 0.9 ? 0.0f : u < 0.95 ? 1.0f : 2.0f;
    }
  }
  if (stats != nullptr) stats->add(data.data(), pixels);
  // Per-sample statistics as the files carry them: data_stats (4, C) rows
  // mean, max, min, std; labels_*_stats (7, 1).
  std::vector<float> data_stats(4 * channels), label_stats(7, 0.0f);
  for (uint64_t k = 0; k < channels; ++k) {
    double lo = INFINITY, hi = -INFINITY, s = 0, s2 = 0;
    for (uint64_t p = 0; p < pixels; ++p) {
      const double v = data[p * channels + k];
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      s += v;
      s2 += v * v;
    }
    const double mean = s / static_cast<double>(pixels);
    data_stats[k] = static_cast<float>(mean);
    data_stats[channels + k] = static_cast<float>(hi);
    data_stats[2 * channels + k] = static_cast<float>(lo);
    data_stats[3 * channels + k] =
        static_cast<float>(std::sqrt(std::max(0.0, s2 / static_cast<double>(pixels) - mean * mean)));
  }
  for (float l : labels) label_stats[static_cast<size_t>(l)] += 1.0f / static_cast<float>(pixels);

  H5Lock lock;
  // h5py's default file format (the earliest), as DeepCAM's files were written.
  Hid file(create_file(path, /*latest=*/false, 0), H5Fclose);
  if (!file.ok()) return write_failed(path, "creating the file");
  DLFEED_RETURN_IF_ERROR(write_array(file.get(), path, "climate/data", {h, w, channels}, DType::f32(), data.data()));
  DLFEED_RETURN_IF_ERROR(
      write_array(file.get(), path, "climate/data_stats", {4, channels}, DType::f32(), data_stats.data()));
  for (const char* name : {"climate/labels_0", "climate/labels_1"}) {
    DLFEED_RETURN_IF_ERROR(write_array(file.get(), path, name, {h, w}, DType::f32(), labels.data()));
    DLFEED_RETURN_IF_ERROR(
        write_array(file.get(), path, absl::StrCat(name, "_stats"), {7, 1}, DType::f32(), label_stats.data()));
  }
  if (H5Fflush(file.get(), H5F_SCOPE_LOCAL) < 0) return write_failed(path, "flushing the file");
  return absl::OkStatus();
}

absl::Status write_deepcam_stats(const std::string& path, const DeepCamStats& stats) {
  const size_t c = stats.minval.size();
  std::vector<double> count(c, stats.count), mean(c), sqmean(c);
  for (size_t k = 0; k < c; ++k) {
    mean[k] = stats.sum[k] / std::max(stats.count, 1.0);
    sqmean[k] = stats.sqsum[k] / std::max(stats.count, 1.0);
  }
  const DType f64{DType::Kind::kFloat, 8, false};
  H5Lock lock;
  Hid file(create_file(path, /*latest=*/false, 0), H5Fclose);
  if (!file.ok()) return write_failed(path, "creating the file");
  DLFEED_RETURN_IF_ERROR(write_array(file.get(), path, "climate/count", {c}, f64, count.data()));
  DLFEED_RETURN_IF_ERROR(write_array(file.get(), path, "climate/mean", {c}, f64, mean.data()));
  DLFEED_RETURN_IF_ERROR(write_array(file.get(), path, "climate/sqmean", {c}, f64, sqmean.data()));
  DLFEED_RETURN_IF_ERROR(write_array(file.get(), path, "climate/minval", {c}, f64, stats.minval.data()));
  DLFEED_RETURN_IF_ERROR(write_array(file.get(), path, "climate/maxval", {c}, f64, stats.maxval.data()));
  if (H5Fflush(file.get(), H5F_SCOPE_LOCAL) < 0) return write_failed(path, "flushing the file");
  return absl::OkStatus();
}

absl::Status write_cosmoflow_file(const std::string& path, const Shape& shape, uint64_t seed, uint64_t index) {
  const uint64_t n = static_cast<uint64_t>(num_elements(shape));
  std::vector<int16_t> x(n);
  // Particle counts: small non-negative integers, mostly few, some many.
  for (uint64_t i = 0; i < n; ++i) {
    const double u = unit(seed, index, i);
    x[i] = static_cast<int16_t>(std::floor(-std::log1p(-u) * 3.0));
  }
  float y[4];
  for (int k = 0; k < 4; ++k) y[k] = static_cast<float>(unit(seed ^ 0xc05, index, static_cast<uint64_t>(k)) * 2 - 1);
  example::ExampleBuilder b;
  b.add_bytes("x", std::span<const std::byte>(reinterpret_cast<const std::byte*>(x.data()), n * sizeof(int16_t)));
  b.add_floats("y", std::span<const float>(y, 4));
  std::vector<std::byte> framed;
  tfrecord::append_record(framed, b.serialize());
  const std::vector<std::byte> gz = tfrecord::compress(framed, tfrecord::Compression::kGzip, 6);
  return write_file(path, absl::string_view(reinterpret_cast<const char*>(gz.data()), gz.size()));
}

}  // namespace dlfeed::gen
