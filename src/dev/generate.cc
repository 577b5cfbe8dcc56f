// SPDX-License-Identifier: Apache-2.0
#include "dev/generate.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI::gen {
namespace fs = std::filesystem;
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint16_t half_from_fraction(uint32_t r) {  // r / 2048 for r in [0, 2048), exact in binary16
  if (r == 0) return 0;
  int e = 31 - std::countl_zero(r);  // 0..10
  uint16_t exponent = static_cast<uint16_t>(e - 11 + 15);
  uint16_t mantissa = static_cast<uint16_t>((r << (10 - e)) & 0x3ff);
  return static_cast<uint16_t>(exponent << 10 | mantissa);
}

std::string extension(FileFormat f) {
  switch (f) {
    case FileFormat::kNpy: return "npy";
    case FileFormat::kNpz: return "npz";
    case FileFormat::kHdf5: return "hdf5";
    case FileFormat::kTfRecord: return "tfrecord";
    case FileFormat::kIndexedBinary: return "indexed_binary";
    case FileFormat::kAuto: break;
  }
  return "bin";
}

}  // namespace

void fill_sample(uint64_t seed, uint64_t global_id, DType dtype, std::span<std::byte> out) {
  uint64_t state = seed * 0xD1B54A32D192ED03ull ^ (global_id + 1) * 0x9E3779B97F4A7C15ull;
  const size_t n = out.size() / dtype.size;
  std::byte* p = out.data();
  for (size_t i = 0; i < n; ++i, p += dtype.size) {
    const uint64_t x = splitmix64(state);
    switch (dtype.kind) {
      case DType::Kind::kBool: {
        uint8_t b = x & 1;
        std::memcpy(p, &b, 1);
        break;
      }
      case DType::Kind::kInt:
      case DType::Kind::kUInt:
        std::memcpy(p, &x, dtype.size);  // low bytes, little-endian host
        break;
      case DType::Kind::kFloat:
        if (dtype.size == 2) {
          uint16_t h = half_from_fraction(static_cast<uint32_t>(x >> 53));
          std::memcpy(p, &h, 2);
        } else if (dtype.size == 4) {
          float f = static_cast<float>(x >> 40) * 0x1.0p-24f;
          std::memcpy(p, &f, 4);
        } else {
          double d = static_cast<double>(x >> 11) * 0x1.0p-53;
          std::memcpy(p, &d, 8);
        }
        break;
    }
    if (dtype.big_endian && dtype.size > 1) {
      std::reverse(reinterpret_cast<uint8_t*>(p), reinterpret_cast<uint8_t*>(p) + dtype.size);
    }
  }
}

int64_t sample_label(uint64_t global_id) { return static_cast<int64_t>(global_id % 10); }

std::string dlio_file_name(const std::string& prefix, uint64_t i, uint64_t n, const std::string& ext) {
  const int width = static_cast<int>(absl::StrCat(n).size());
  return absl::StrFormat("%s_%0*d_of_%d.%s", prefix, width, i, n, ext);
}

namespace {

// One folder of the dataset: DLIO's train/ or valid/, or the flat one.
struct Split {
  std::string name;
  uint64_t count;
  uint64_t first_file;
};

std::vector<Split> splits_of(const DatasetSpec& spec) {
  std::vector<Split> splits;
  if (spec.dlio_layout) {
    splits.push_back({"train", spec.files, 0});
    if (spec.valid_files > 0) splits.push_back({"valid", spec.valid_files, spec.files});
  } else {
    splits.push_back({"", spec.files, 0});
  }
  return splits;
}

// File i of `split`, its samples and how to write them, but no format's names.
FileSpec file_spec_of(const DatasetSpec& spec, const Split& split, uint64_t i, const fs::path& path) {
  FileSpec f;
  f.path = path.string();
  f.sample_shape = spec.sample_shape;
  f.dtype = spec.dtype;
  f.num_samples = spec.samples_per_file;
  f.first_global_id = (split.first_file + i) * spec.samples_per_file;
  f.seed = spec.seed;
  f.compression = spec.compression;
  f.level = spec.level;
  f.chunk_samples = spec.chunk_samples;
  f.hdf5_shuffle = spec.hdf5_shuffle;
  f.zero_labels = spec.dlio_layout;
  f.axis = spec.dlio_layout ? SampleAxis::kLast : SampleAxis::kFirst;
  return f;
}

// Writes `f` (named `name` in `split`) in spec.format, with that format's
// dataset names and, for TFRecord, its index file.
absl::Status write_one(const DatasetSpec& spec, const Split& split, const std::string& name, FileSpec& f) {
  std::error_code ec;
  absl::Status st;
  switch (spec.format) {
    case FileFormat::kNpy: st = write_npy_file(f); break;
    case FileFormat::kNpz:
      f.data_names = {"x"};
      f.label_name = "y";
      st = write_npz_file(f);
      break;
    case FileFormat::kHdf5:
      f.axis = SampleAxis::kFirst;
      f.data_names.clear();
      if (spec.dlio_layout) {
        for (uint64_t d = 0; d < std::max<uint64_t>(1, spec.hdf5_datasets); ++d) {
          f.data_names.push_back(absl::StrCat("records_", d));
        }
      } else {
        f.data_names.push_back("records");
      }
      f.label_name = "labels";
      st = write_hdf5_file(f);
      break;
    case FileFormat::kTfRecord:
      if (spec.dlio_layout) {
        const fs::path idx_dir = fs::path(spec.dir) / "index" / split.name;
        fs::create_directories(idx_dir, ec);
        if (ec) return io_error(idx_dir.string(), "mkdir", ec.value());
        f.index_path = (idx_dir / (name + ".idx")).string();
      } else {
        f.index_path = f.path + ".idx";
      }
      st = write_tfrecord_file(f);
      break;
    case FileFormat::kIndexedBinary: st = write_indexed_binary_file(f); break;
    case FileFormat::kAuto: break;
  }
  return st;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> write_dataset(const DatasetSpec& spec) {
  if (spec.format == FileFormat::kAuto) return absl::InvalidArgumentError("generate: choose a format");
  if (spec.samples_per_file == 0 || spec.files == 0) {
    return absl::InvalidArgumentError("generate: files and samples per file must be at least 1");
  }
  std::vector<std::string> written;
  const std::string ext = extension(spec.format);
  for (const Split& split : splits_of(spec)) {
    const fs::path folder = split.name.empty() ? fs::path(spec.dir) : fs::path(spec.dir) / split.name;
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec) return io_error(folder.string(), "mkdir", ec.value());
    for (uint64_t i = 0; i < split.count; ++i) {
      // Flat datasets keep samples on the first axis, so their names must not
      // look like DLIO's ({prefix}_{i}_of_{n}), which readers take as last-axis.
      const std::string name =
          spec.dlio_layout
              ? dlio_file_name(spec.prefix, i, split.count, ext)
              : absl::StrFormat("%s_%0*d.%s", spec.prefix, static_cast<int>(absl::StrCat(split.count).size()), i, ext);
      FileSpec f = file_spec_of(spec, split, i, folder / name);
      DLFEED_RETURN_IF_ERROR(write_one(spec, split, name, f));
      written.push_back(f.path);
    }
  }
  return written;
}

}  // namespace dlfeed::gen

namespace dlfeed::inline DLFEED_ABI::gen {

absl::Status write_file(const std::string& path, absl::string_view bytes) {
  // Write to a temporary name and rename, so a reader never sees half a file.
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return io_error(tmp, "open for writing", errno);
  const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int err = errno;
  if (std::fclose(f) != 0 || n != bytes.size()) {
    std::remove(tmp.c_str());
    return io_error(tmp, n, "write", err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return io_error(path, "rename", errno);
  return absl::OkStatus();
}

}  // namespace dlfeed::gen
