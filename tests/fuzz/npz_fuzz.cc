// SPDX-License-Identifier: Apache-2.0
// Fuzz target: an .npz file: the zip end record, the Zip64 end record and
// locator, the central directory (Zip64 extra fields), the member's local
// header, its NPY header (stored or deflated), then sample reads (inflate
// and CRC-32 for deflated members).
#include <cstddef>
#include <cstdint>

#include "dlfeed/format/format.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dlfeed;
  const std::string path = dlfeed::fuzz::write_input("input.npz", data, size);
  // The default member (x, or the only one), then "y" as DLIO's labels.
  for (const char* member : {"", "y"}) {
    FormatOptions o;
    o.name = member;
    o.axis = SampleAxis::kFirst;
    auto index = open_npz(path, o);
    if (!index.ok()) {
      fuzz::check_error_names(index.status(), path, "open_npz");
      continue;
    }
    fuzz::check_index(*index, path, size);
  }
  return 0;
}
