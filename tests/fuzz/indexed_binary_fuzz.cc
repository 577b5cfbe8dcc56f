// SPDX-License-Identifier: Apache-2.0
// Fuzz target: an indexed binary dataset's index next to its data file. The
// input is <1 flag byte><4-byte little-endian index length><index bytes><data
// bytes>. Flag bit 0 clear: Megatron-LM's layout (input.bin + input.idx, the
// "MMIDIDX" header, lengths, pointers, document index); set: DLIO's
// (input.indexed_binary + .off.idx + .sz.idx, the index bytes split in two
// halves). The index is parsed and checked against the data file, and
// whatever index it yields must point inside the file.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "dlfeed/format/indexed_binary.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dlfeed;
  if (size < 5) return 0;
  const uint8_t flags = data[0];
  const uint32_t idx_len =
      uint32_t(data[1]) | uint32_t(data[2]) << 8 | uint32_t(data[3]) << 16 | uint32_t(data[4]) << 24;
  data += 5;
  size -= 5;
  const size_t n_idx = std::min<size_t>(idx_len, size);
  std::string path;
  std::vector<std::string> named;
  if (flags & 1) {
    const size_t half = n_idx / 2;
    named.push_back(fuzz::write_input("input.indexed_binary.off.idx", data, half));
    named.push_back(fuzz::write_input("input.indexed_binary.sz.idx", data + half, n_idx - half));
    path = fuzz::write_input("input.indexed_binary", data + n_idx, size - n_idx);
  } else {
    named.push_back(fuzz::write_input("input.idx", data, n_idx));
    path = fuzz::write_input("input.bin", data + n_idx, size - n_idx);
    // The header parser alone, on the same bytes.
    auto h = parse_megatron_idx_header(std::as_bytes(std::span<const uint8_t>(data, n_idx)), n_idx, named[0]);
    if (h.ok() && h->documents_offset() + 8 * h->documents + (h->multimodal ? h->sequences : 0) != n_idx) {
      fuzz::fail("parse_megatron_idx_header accepted counts that do not fill the index");
    }
  }
  named.push_back(path);
  FormatOptions o;
  auto index = open_indexed_binary(path, o);
  if (!index.ok()) {
    const std::string msg(index.status().message());
    bool names = false;
    for (const std::string& p : named) names = names || msg.find(p) != std::string::npos;
    if (!names) fuzz::fail("open_indexed_binary: the error names none of its files: " + index.status().ToString());
    return 0;
  }
  fuzz::check_index(*index, path, size - n_idx);
  return 0;
}
