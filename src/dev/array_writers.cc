// SPDX-License-Identifier: Apache-2.0
// The NPY and NPZ dataset writers of `dlfeed generate` (development library).
#include <cstring>

#include "dev/generate.h"
#include "dev/zip_writer.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "dlfeed/format/npy.h"

namespace dlfeed::inline DLFEED_ABI::gen {

namespace {
// The whole array of a file: samples stacked on the first or last axis.
std::vector<std::byte> make_array(const FileSpec& spec, Shape& shape) {
  const uint64_t per = static_cast<uint64_t>(num_elements(spec.sample_shape)) * spec.dtype.size;
  const uint64_t n = spec.num_samples;
  std::vector<std::byte> sample(per), out(per * n);
  const size_t isz = spec.dtype.size;
  const uint64_t elems = per / isz;
  for (uint64_t k = 0; k < n; ++k) {
    fill_sample(spec.seed, spec.first_global_id + k, spec.dtype, sample);
    if (spec.axis == SampleAxis::kLast) {
      for (uint64_t e = 0; e < elems; ++e) std::memcpy(&out[(e * n + k) * isz], &sample[e * isz], isz);
    } else {
      std::memcpy(&out[k * per], sample.data(), per);
    }
  }
  shape.clear();
  if (spec.axis != SampleAxis::kLast) shape.push_back(static_cast<int64_t>(n));
  for (int64_t d : spec.sample_shape) shape.push_back(d);
  if (spec.axis == SampleAxis::kLast) shape.push_back(static_cast<int64_t>(n));
  return out;
}
}  // namespace

std::string npy_bytes(const FileSpec& spec) {
  Shape shape;
  std::vector<std::byte> data = make_array(spec, shape);
  std::string out = make_npy_header(spec.dtype, shape);
  out.append(reinterpret_cast<const char*>(data.data()), data.size());
  return out;
}

std::string labels_npy_bytes(const FileSpec& spec) {
  std::string out = make_npy_header(DType::i64(), Shape{static_cast<int64_t>(spec.num_samples)});
  for (uint64_t k = 0; k < spec.num_samples; ++k) {
    int64_t v = spec.zero_labels ? 0 : sample_label(spec.first_global_id + k);
    out.append(reinterpret_cast<const char*>(&v), 8);
  }
  return out;
}

absl::Status write_npy_file(const FileSpec& spec) { return write_file(spec.path, npy_bytes(spec)); }

absl::Status write_npz_file(const FileSpec& spec) {
  ZipWriter zip(spec.path);
  const bool deflate = spec.compression == Compression::kDeflate;
  const std::string x = npy_bytes(spec);
  const std::string data_name = spec.data_names.empty() ? "x" : spec.data_names[0];
  auto as_bytes = [](const std::string& s) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(s.data()), s.size());
  };
  DLFEED_RETURN_IF_ERROR(zip.add(data_name + ".npy", as_bytes(x), deflate, spec.level));
  if (!spec.label_name.empty()) {
    const std::string y = labels_npy_bytes(spec);
    DLFEED_RETURN_IF_ERROR(zip.add(spec.label_name + ".npy", as_bytes(y), deflate, spec.level));
  }
  return zip.finish();
}

}  // namespace dlfeed::gen
