// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the pipeline stage tests: real NPY and NPZ files written
// by the generator, indexed by open_dataset, and a batch's planned reads
// done by hand with pread (what the look-ahead and the I/O engine do).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "batch/work.h"
#include "dev/generate.h"
#include "dlfeed/format/format.h"
#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed::testing {

/// `n` float32 samples of shape {8}, in `path` (.npy, or .npz deflated).
inline SampleIndex write_and_open(const std::string& path, uint64_t n) {
  gen::FileSpec f;
  f.path = path;
  f.sample_shape = {8};
  f.dtype = DType::f32();
  f.num_samples = n;
  f.seed = 5;
  const bool npz = path.ends_with(".npz");
  if (npz) f.compression = gen::Compression::kDeflate;
  EXPECT_TRUE((npz ? gen::write_npz_file(f) : gen::write_npy_file(f)).ok());
  FormatOptions o;
  if (npz) o.name = "x";
  auto idx = open_dataset({path}, o);
  EXPECT_TRUE(idx.ok()) << idx.status();
  return std::move(*idx);
}

/// Does `w`'s reads (planned and direct) with pread from `files` (FileTable
/// id -> path) into buffers from `pool`, as admission and the engine would.
inline absl::Status read_by_hand(batch::Work& w, const std::vector<std::string>& files, BufferPool& pool) {
  w.raw = pool.take(w.plan.buffer_bytes);
  for (size_t f = 0; f < w.known.size(); ++f) {
    if (w.known[f]) w.out[f] = pool.take(w.out_offsets[f].back());
  }
  auto one = [&](uint32_t file, uint64_t offset, uint64_t length, std::byte* dest) -> absl::Status {
    const int fd = ::open(files.at(file).c_str(), O_RDONLY);
    if (fd < 0) return absl::NotFoundError(files[file]);
    const ssize_t got = ::pread(fd, dest, length, static_cast<off_t>(offset));
    ::close(fd);
    if (got != static_cast<ssize_t>(length)) return absl::DataLossError(files[file]);
    return absl::OkStatus();
  };
  for (const auto& r : w.plan.reads) {
    if (auto s = one(r.file, r.offset, r.length, w.raw.data() + r.buffer_offset); !s.ok()) return s;
  }
  for (const auto& d : w.direct_reads) {
    if (auto s = one(d.file, d.offset, d.length, w.out[d.field].data() + d.dest); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace dlfeed::testing
