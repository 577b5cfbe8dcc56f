// SPDX-License-Identifier: Apache-2.0
// Fuzz target: an .npy file (magic, version, header length, the header
// dictionary: descr, fortran_order, shape) through the NPY header parser and
// open_npy, with both sample axes, then sample reads (strided gathers).
#include <cstddef>
#include <cstdint>

#include "dlfeed/format/format.h"
#include "dlfeed/format/npy.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dlfeed;
  // The parsers on memory, as npz uses them.
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto hsize = npy_header_size(bytes.first(std::min(size, kNpyPreamble)), "mem.npy", 0);
  fuzz::check_error_names(hsize.status(), "mem.npy", "npy_header_size");
  if (hsize.ok() && *hsize <= size) {
    auto h = parse_npy_header(bytes.first(*hsize), "mem.npy", 0);
    fuzz::check_error_names(h.status(), "mem.npy", "parse_npy_header");
    if (h.ok() && h->data_offset != *hsize) fuzz::fail("parse_npy_header: data_offset is not the header size");
  }
  // The whole file.
  const std::string path = fuzz::write_input("input.npy", data, size);
  for (SampleAxis axis : {SampleAxis::kFirst, SampleAxis::kLast}) {
    FormatOptions o;
    o.axis = axis;
    auto index = open_npy(path, o);
    if (!index.ok()) {
      fuzz::check_error_names(index.status(), path, "open_npy");
      continue;
    }
    fuzz::check_index(*index, path, size);
  }
  return 0;
}
