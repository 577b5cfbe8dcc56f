// SPDX-License-Identifier: Apache-2.0
// Writes an indexed binary file as DLIO 2.0.0's IndexedBinaryGenerator lays
// it out: NAME.EXT holding the samples back to back (uint8, each the
// flattened sample shape), NAME.EXT.off.idx the u64 offset of each and
// NAME.EXT.sz.idx the u64 size of each (little-endian).
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "dev/generate.h"
#include "dlfeed/error.h"
#include "dlfeed/format/indexed_binary.h"

namespace dlfeed::inline DLFEED_ABI::gen {

absl::Status write_indexed_binary_file(const FileSpec& spec) {
  const uint64_t size = static_cast<uint64_t>(num_elements(spec.sample_shape)) * spec.dtype.size;
  std::string data(size * spec.num_samples, '\0');
  std::string off(8 * spec.num_samples, '\0'), sz(8 * spec.num_samples, '\0');
  for (uint64_t k = 0; k < spec.num_samples; ++k) {
    fill_sample(spec.seed, spec.first_global_id + k, spec.dtype,
                std::as_writable_bytes(std::span<char>(data.data() + k * size, size)));
    const uint64_t at = k * size;
    std::memcpy(off.data() + 8 * k, &at, 8);  // little-endian hosts only (static_assert in the reader)
    std::memcpy(sz.data() + 8 * k, &size, 8);
  }
  const std::vector<std::string> idx = indexed_binary_index_files(spec.path);
  if (idx.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.path, ": DLIO's indexed binary files are not named .bin (that is Megatron-LM's layout)"));
  }
  DLFEED_RETURN_IF_ERROR(write_file(spec.path, data));
  DLFEED_RETURN_IF_ERROR(write_file(idx[0], off));
  return write_file(idx[1], sz);
}

}  // namespace dlfeed::gen
