// SPDX-License-Identifier: Apache-2.0
// Generated datasets for the tests that read whole datasets (loader, scale,
// raw reads, MPI, the fault harness and the soak run): every sample's bytes
// are gen::fill_sample(seed, id, dtype), so a check knows them without a copy.
// No gtest here: the soak run links without it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "dev/generate.h"

namespace dlfeed::testing {

/// A dataset as the generator wrote it.
struct GeneratedDataset {
  gen::DatasetSpec spec;
  std::string path;                // what LoaderOptions::paths gets: spec.dir, or spec.dir/train (DLIO layout)
  std::vector<std::string> files;  // the data files, in index order
};

/// `files` x `per_file` samples of `shape` and `dtype` under `dir`, flat and
/// stored (set dlio_layout, compression, ... on the result for others).
inline gen::DatasetSpec dataset_spec(std::string dir, FileFormat format, uint64_t files, uint64_t per_file, Shape shape,
                                     DType dtype, uint64_t seed) {
  gen::DatasetSpec spec;
  spec.dir = std::move(dir);
  spec.format = format;
  spec.files = files;
  spec.samples_per_file = per_file;
  spec.sample_shape = std::move(shape);
  spec.dtype = dtype;
  spec.seed = seed;
  return spec;
}

/// Writes `spec`'s files.
inline absl::StatusOr<GeneratedDataset> write_generated(gen::DatasetSpec spec) {
  auto files = gen::write_dataset(spec);
  if (!files.ok()) return files.status();
  std::string path = spec.dlio_layout ? spec.dir + "/train" : spec.dir;
  return GeneratedDataset{std::move(spec), std::move(path), std::move(*files)};
}

/// What the generator writes for global sample `g` of `shape` and `dt`.
inline std::string expected_sample(uint64_t seed, uint64_t g, DType dt, const Shape& shape) {
  std::string s(num_elements(shape) * dt.size, '\0');
  gen::fill_sample(seed, g, dt, {reinterpret_cast<std::byte*>(s.data()), s.size()});
  return s;
}

}  // namespace dlfeed::testing
