// SPDX-License-Identifier: Apache-2.0
// Fuzz target: a TFRecord .idx sidecar ("offset length" lines, as DALI's
// tfrecord2idx and DLIO write it) next to its data file. The input is
// <4-byte little-endian sidecar length><sidecar text><TFRecord bytes>; the
// sidecar is parsed and validated against the data file, and whatever index
// it yields must point inside the file.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "dlfeed/format/format.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dlfeed;
  if (size < 5) return 0;
  const uint32_t idx_len =
      uint32_t(data[0]) | uint32_t(data[1]) << 8 | uint32_t(data[2]) << 16 | uint32_t(data[3]) << 24;
  const uint8_t flags = data[4];
  data += 5;
  size -= 5;
  const size_t n_idx = std::min<size_t>(idx_len, size);
  const std::string dir = fuzz::scratch() + "/idx";
  std::filesystem::create_directories(dir);
  const std::string idx = fuzz::write_input("idx/input.tfrecord.idx", data, n_idx);
  const std::string path = fuzz::write_input("input.tfrecord", data + n_idx, size - n_idx);
  FormatOptions o;
  o.use_index_files = true;
  o.index_dir = dir;
  o.verify_crc = (flags & 1) != 0;
  o.feature = (flags & 2) ? "label" : "image";
  auto index = open_tfrecord(path, o);
  if (!index.ok()) {
    // Sidecar errors name the sidecar (and its line), data errors the data file.
    const std::string msg(index.status().message());
    if (msg.find(path) == std::string::npos && msg.find(idx) == std::string::npos) {
      fuzz::fail("open_tfrecord with a sidecar: the error names neither file: " + index.status().ToString());
    }
    return 0;
  }
  fuzz::check_index(*index, path, size - n_idx);
  return 0;
}
