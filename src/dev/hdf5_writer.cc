// SPDX-License-Identifier: Apache-2.0
// Writing HDF5 files with libhdf5: the generator's files, as h5py and the
// DLIO benchmark write them.
#include <hdf5.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dev/generate.h"
#include "dlfeed/error.h"
#include "format/hdf5_util.h"

namespace dlfeed::inline DLFEED_ABI {
namespace gen {
namespace {

using detail::h5::create_dataset;
using detail::h5::create_file;
using detail::h5::H5Lock;
using detail::h5::Hid;
using detail::h5::make_type;
using detail::h5::write_failed;
using detail::h5::write_rows;

// Elements per sample: the product of spec.sample_shape, every dimension known.
absl::StatusOr<uint64_t> sample_elements(const FileSpec& spec) {
  uint64_t sample_elems = 1;
  for (int64_t d : spec.sample_shape) {
    if (d < 0)
      return absl::InvalidArgumentError(
          absl::StrCat(spec.path, ": sample shape ", shape_str(spec.sample_shape), " has an unknown dimension"));
    if (__builtin_mul_overflow(sample_elems, static_cast<uint64_t>(d), &sample_elems)) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.path, ": sample shape ", shape_str(spec.sample_shape), " too large"));
    }
  }
  return sample_elems;
}

// The labels dataset spec.label_name of `file`: int64, one per sample (H5Lock held).
absl::Status write_labels(const FileSpec& spec, hid_t file) {
  const uint64_t n = spec.num_samples;
  std::vector<int64_t> labels(n, 0);
  if (!spec.zero_labels) {
    for (uint64_t k = 0; k < n; ++k) labels[k] = sample_label(spec.first_global_id + k);
  }
  hsize_t ldim = n;
  Hid lspace(H5Screate_simple(1, &ldim, nullptr), H5Sclose);
  Hid ltype(H5Tcopy(H5T_STD_I64LE), H5Tclose);
  Hid ldset(create_dataset(file, spec.label_name, ltype.get(), lspace.get(), H5P_DEFAULT), H5Dclose);
  if (!ldset.ok()) return write_failed(spec.path, absl::StrCat("creating dataset '", spec.label_name, "'"));
  if (n > 0 && H5Dwrite(ldset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) < 0) {
    return write_failed(spec.path, absl::StrCat("writing '", spec.label_name, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status write_hdf5_file(const FileSpec& spec) {
  if (spec.data_names.empty()) return absl::InvalidArgumentError(spec.path + ": no dataset names to write");
  const absl::StatusOr<uint64_t> sample_elems = sample_elements(spec);
  if (!sample_elems.ok()) return sample_elems.status();
  const uint64_t sample_bytes = *sample_elems * spec.dtype.size;
  const uint64_t n = spec.num_samples;
  std::vector<hsize_t> dims{n};
  for (int64_t d : spec.sample_shape) dims.push_back(static_cast<hsize_t>(d));

  // Filters need chunks; with none asked for, one sample per chunk.
  const bool deflate = spec.compression == Compression::kDeflate;
  uint64_t chunk_samples = spec.chunk_samples;
  if (chunk_samples == 0 && (deflate || spec.hdf5_shuffle)) chunk_samples = 1;
  chunk_samples = std::min<uint64_t>(chunk_samples, std::max<uint64_t>(n, 1));

  H5Lock lock;
  Hid file(create_file(spec.path, /*latest=*/true, 0), H5Fclose);
  if (!file.ok()) return write_failed(spec.path, "creating the file");
  Hid type(make_type(spec.dtype), H5Tclose);
  if (!type.ok()) return write_failed(spec.path, absl::StrCat("making the type ", spec.dtype.name()));
  Hid space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!space.ok() || !dcpl.ok()) return write_failed(spec.path, "making the dataspace");
  if (chunk_samples > 0) {
    std::vector<hsize_t> chunk(dims);
    chunk[0] = chunk_samples;
    for (size_t i = 1; i < chunk.size() && spec.chunk_inner > 0; ++i) {
      chunk[i] = std::min<hsize_t>(chunk[i], spec.chunk_inner);
    }
    if (H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) < 0) {
      return write_failed(spec.path, absl::StrCat("setting chunks of ", chunk_samples, " samples"));
    }
    if (spec.hdf5_shuffle && H5Pset_shuffle(dcpl.get()) < 0)
      return write_failed(spec.path, "adding the shuffle filter");
    if (deflate && H5Pset_deflate(dcpl.get(), static_cast<unsigned>(std::clamp(spec.level, 0, 9))) < 0) {
      return write_failed(spec.path, "adding the deflate filter");
    }
  }

  // Rows in batches of about 32 MiB, whole chunks at a time.
  uint64_t batch = std::max<uint64_t>(1, (uint64_t{32} << 20) / std::max<uint64_t>(sample_bytes, 1));
  if (chunk_samples > 0) batch = std::max<uint64_t>(chunk_samples, batch / chunk_samples * chunk_samples);
  batch = std::min<uint64_t>(batch, std::max<uint64_t>(n, 1));
  std::vector<std::byte> buf(batch * sample_bytes);

  for (const std::string& name : spec.data_names) {
    Hid dset(create_dataset(file.get(), name, type.get(), space.get(), dcpl.get()), H5Dclose);
    if (!dset.ok()) return write_failed(spec.path, absl::StrCat("creating dataset '", name, "'"));
    for (uint64_t row = 0; row < n && sample_bytes > 0; row += batch) {
      const uint64_t rows = std::min(batch, n - row);
      for (uint64_t k = 0; k < rows; ++k) {
        fill_sample(spec.seed, spec.first_global_id + row + k, spec.dtype,
                    std::span<std::byte>(buf.data() + k * sample_bytes, sample_bytes));
      }
      if (write_rows(dset.get(), type.get(), dims, row, rows, buf.data()) < 0) {
        return write_failed(spec.path, absl::StrCat("writing samples ", row, "..", row + rows - 1, " of '", name, "'"));
      }
    }
  }

  if (!spec.label_name.empty()) DLFEED_RETURN_IF_ERROR(write_labels(spec, file.get()));
  if (H5Fflush(file.get(), H5F_SCOPE_LOCAL) < 0) return write_failed(spec.path, "flushing the file");
  return absl::OkStatus();
}

}  // namespace gen
}  // namespace dlfeed
