// SPDX-License-Identifier: Apache-2.0
// Indexed binary datasets: a data file holding samples back to back, and an
// index of where each sample starts and how long it is. A sample is one
// sequence, a 1-D array (token ids, for LLM pre-training); sequences differ
// in length, so a field of them is ragged (LoaderOptions::ragged).
//
// Two writers' layouts are read, told apart by the data file's name:
//  - Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py,
//    IndexedDatasetBuilder): PREFIX.bin, the sequences' elements, and
//    PREFIX.idx:
//      9 bytes  magic "MMIDIDX\x00\x00"
//      u64      version, 1
//      u8       dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//               6 float64, 7 float32, 8 uint16
//      u64      sequence count S, u64 document count D
//      i32[S]   sequence lengths (elements), i64[S] sequence pointers (byte
//               offsets into .bin), i64[D] document index (0, then the
//               sequence count at the end of each document: the last is S)
//      i8[S]    sequence modes, only in multimodal datasets
//    all little-endian, packed.
//  - DLIO's indexed_binary and mmap_indexed_binary (dlio_benchmark 2.0.0,
//    data_generator/indexed_binary_generator.py): NAME.indexed_binary (or
//    NAME.mmap_indexed_binary) of uint8 samples, NAME.EXT.off.idx (u64 byte
//    offset per sample) and NAME.EXT.sz.idx (u64 byte size per sample).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/dtype.h"
#include "dlfeed/format/format.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI {

/// Bytes of a Megatron .idx header: magic, version, dtype code, two counts.
inline constexpr size_t kMegatronIdxHeaderSize = 34;

/// What a Megatron-LM .idx header says, checked against the file's size.
struct DLFEED_EXPORT MegatronIdxHeader {
  DType dtype;              // the .bin's element type
  uint64_t sequences = 0;   // S: the samples
  uint64_t documents = 0;   // D: entries of the document index
  bool multimodal = false;  // the file ends with a mode byte per sequence
  uint64_t lengths_offset() const { return kMegatronIdxHeaderSize; }
  uint64_t pointers_offset() const { return lengths_offset() + 4 * sequences; }
  uint64_t documents_offset() const { return pointers_offset() + 8 * sequences; }
};

/// Parses the first kMegatronIdxHeaderSize bytes of `idx_path`, a file of
/// `idx_size` bytes: the magic, version 1, a known dtype code, and counts
/// whose arrays fill the file exactly (with or without the modes). Errors
/// name the file, the offset and what was expected.
DLFEED_EXPORT absl::StatusOr<MegatronIdxHeader> parse_megatron_idx_header(std::span<const std::byte> head,
                                                                          uint64_t idx_size,
                                                                          absl::string_view idx_path);

/// The index files of the data file `path`: {PREFIX.idx} for PREFIX.bin
/// (Megatron-LM), else {path.off.idx, path.sz.idx} (DLIO).
DLFEED_EXPORT std::vector<std::string> indexed_binary_index_files(const std::string& path);

/// Whether `path` is the data file of an indexed binary dataset by its name:
/// NAME.indexed_binary or NAME.mmap_indexed_binary (DLIO), or PREFIX.bin with
/// PREFIX.idx beside it (Megatron-LM; a .bin alone is not taken).
DLFEED_EXPORT bool is_indexed_binary_name(const std::string& path);

/// Indexes an indexed binary data file: one sample per sequence, 1-D, of the
/// .idx's dtype (DLIO's: uint8). Every sequence is checked to lie within the
/// data file. The field is "data" (any other name is NotFound).
DLFEED_EXPORT absl::StatusOr<SampleIndex> open_indexed_binary(const std::string& path, const FormatOptions& options);

}  // namespace dlfeed
