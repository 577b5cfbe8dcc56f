// SPDX-License-Identifier: Apache-2.0
// Indexed binary datasets (Megatron-LM's .bin + .idx, DLIO's indexed_binary):
// the index files are read whole at open and checked against the data
// file, so that a sample is one extent and no read can leave the file.
#include "dlfeed/format/indexed_binary.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/io/object_store.h"

namespace dlfeed::inline DLFEED_ABI {

static_assert(std::endian::native == std::endian::little, "the index arrays are read as little-endian in place");

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

uint64_t le64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Megatron's DType codes (indexed_dataset.py's DType enum).
std::optional<DType> megatron_dtype(uint8_t code) {
  using K = DType::Kind;
  switch (code) {
    case 1: return DType{K::kUInt, 1, false};
    case 2: return DType{K::kInt, 1, false};
    case 3: return DType{K::kInt, 2, false};
    case 4: return DType{K::kInt, 4, false};
    case 5: return DType{K::kInt, 8, false};
    case 6: return DType{K::kFloat, 8, false};
    case 7: return DType{K::kFloat, 4, false};
    case 8: return DType{K::kUInt, 2, false};
    default: return std::nullopt;
  }
}

/// The samples of one data file. Either a table (offset and element count
/// per sample) or, when the samples are of one length back to back at a
/// fixed stride (DLIO's files), that geometry alone.
class IndexedBinarySource final : public SampleSource {
 public:
  IndexedBinarySource(std::string path, std::string index_desc, std::string kind, DType dtype,
                      std::vector<uint64_t> offsets, std::vector<uint32_t> lengths)
      : path_(std::move(path)),
        index_desc_(std::move(index_desc)),
        kind_(std::move(kind)),
        dtype_(dtype),
        n_(offsets.size()) {
    uint64_t lo = std::numeric_limits<uint64_t>::max(), hi = 0;
    for (uint32_t l : lengths) {
      lo = std::min<uint64_t>(lo, l);
      hi = std::max<uint64_t>(hi, l);
    }
    min_len_ = n_ ? lo : 0;
    max_len_ = hi;
    // Strided: one length, and samples that follow each other without
    // overlapping (a stride of at least the length).
    const uint64_t bytes = hi * dtype_.size;
    const uint64_t stride = n_ > 1 ? offsets[1] - offsets[0] : bytes;
    bool strided = n_ > 0 && lo == hi && (n_ == 1 || (offsets[1] > offsets[0] && stride >= bytes));
    for (uint64_t k = 1; strided && k < n_; ++k) strided = offsets[k] == offsets[0] + k * stride;
    if (strided) {
      first_ = offsets[0];
      stride_ = stride;
    } else {
      offsets_ = std::move(offsets);
      lengths_ = std::move(lengths);
    }
  }

  std::string layout() const override { return absl::StrCat("indexed_binary:", kind_); }
  std::string describe() const override {
    const std::string lens = min_len_ == max_len_ ? absl::StrCat(min_len_) : absl::StrCat(min_len_, "..", max_len_);
    return absl::StrCat(kind_, " indexed binary: ", n_, " sequences of ", lens, " ", dtype_.name(),
                        " elements (1-D samples), index ", index_desc_);
  }
  absl::StatusOr<DecodedSample> decode(const SampleRef& ref, std::span<std::byte> raw,
                                       std::vector<std::byte>& scratch) const override {
    (void)scratch;
    if (raw.size() != static_cast<uint64_t>(ref.shape[0]) * dtype_.size) {
      return format_error(path_, ref.extents.empty() ? 0 : ref.extents[0].offset,
                          absl::StrCat("sequence ", ref.item, " of ", ref.shape[0] * dtype_.size, " bytes"),
                          absl::StrCat(raw.size(), " bytes"));
    }
    return DecodedSample{raw, ref.shape, dtype_};
  }
  bool is_identity(const SampleRef& ref) const override {
    (void)ref;
    return true;
  }
  std::optional<std::pair<DType, Shape>> sample_spec() const override {
    // Lengths that differ are differences between samples (ragged), not a
    // dimension known only after decode: no spec, so uniform_spec sees them.
    if (min_len_ != max_len_) return std::nullopt;
    return std::make_pair(dtype_, Shape{n_ ? static_cast<int64_t>(min_len_) : -1});
  }
  std::optional<Strided> strided() const override {
    if (!offsets_.empty() || n_ == 0) return std::nullopt;
    return Strided{first_, stride_, min_len_ * dtype_.size};
  }
  void fill(uint64_t item, SampleRef& ref) const override {
    const uint64_t len = offsets_.empty() ? min_len_ : lengths_[item];
    const uint64_t off = offsets_.empty() ? first_ + item * stride_ : offsets_[item];
    ref.extents.assign(1, Extent{off, len * dtype_.size});
    ref.shape.assign(1, static_cast<int64_t>(len));
    ref.dtype = dtype_;
  }
  uint64_t num_samples() const override { return n_; }
  bool shapes_differ() const override { return min_len_ != max_len_; }
  uint64_t total_read_bytes() const override {
    if (offsets_.empty()) return n_ * min_len_ * dtype_.size;
    uint64_t sum = 0;
    for (uint32_t l : lengths_) sum += static_cast<uint64_t>(l) * dtype_.size;
    return sum;
  }
  uint64_t index_bytes() const override {
    return offsets_.capacity() * sizeof(uint64_t) + lengths_.capacity() * sizeof(uint32_t);
  }

 private:
  std::string path_, index_desc_, kind_;
  DType dtype_;
  uint64_t n_ = 0, min_len_ = 0, max_len_ = 0;
  uint64_t first_ = 0, stride_ = 0;  // the strided geometry (offsets_ empty)
  std::vector<uint64_t> offsets_;    // bytes into the data file, per sample
  std::vector<uint32_t> lengths_;    // elements, per sample
};

/// Reads `count` little-endian values of T at `offset` of `file` into a vector.
template <typename T>
absl::StatusOr<std::vector<T>> read_array(const detail::File& file, uint64_t offset, uint64_t count,
                                          absl::string_view what) {
  std::vector<T> out(count);
  DLFEED_RETURN_IF_ERROR(file.read_exact(offset, std::as_writable_bytes(std::span<T>(out.data(), out.size())), what));
  return out;
}

/// Checks that each sequence lies within the data file; `entry_offset(k)` is
/// where sample k's entry sits in `idx_path` (for the message).
template <typename EntryOffset>
absl::Status check_within(const std::vector<uint64_t>& offsets, const std::vector<uint32_t>& lengths, DType dtype,
                          uint64_t data_size, const std::string& data_path, const std::string& idx_path,
                          EntryOffset entry_offset) {
  for (size_t k = 0; k < offsets.size(); ++k) {
    const uint64_t bytes = static_cast<uint64_t>(lengths[k]) * dtype.size;
    if (offsets[k] > data_size || bytes > data_size - offsets[k]) {
      return format_error(idx_path, entry_offset(k),
                          absl::StrCat("sequence ", k, " within the ", data_size, "-byte data file ", data_path),
                          absl::StrCat("offset ", offsets[k], " and ", bytes, " bytes (ending past the end)"));
    }
    if (lengths[k] == 0) {
      return format_error(idx_path, entry_offset(k), absl::StrCat("sequence ", k, " of at least one element"),
                          "an empty sequence (dlfeed reads no empty samples)");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SampleSource>> open_megatron(const detail::File& data, const std::string& idx_path) {
  DLFEED_ASSIGN_OR_RETURN(detail::File idx, detail::File::open(idx_path));
  std::byte head[kMegatronIdxHeaderSize];
  if (idx.size() < kMegatronIdxHeaderSize) {
    return format_error(idx_path, 0, absl::StrCat("a ", kMegatronIdxHeaderSize, "-byte Megatron index header"),
                        absl::StrCat("a ", idx.size(), "-byte file"));
  }
  DLFEED_RETURN_IF_ERROR(idx.read_exact(0, head, "the Megatron index header"));
  DLFEED_ASSIGN_OR_RETURN(MegatronIdxHeader h, parse_megatron_idx_header(head, idx.size(), idx_path));
  DLFEED_ASSIGN_OR_RETURN(std::vector<uint32_t> lengths,
                          read_array<uint32_t>(idx, h.lengths_offset(), h.sequences, "the sequence lengths"));
  DLFEED_ASSIGN_OR_RETURN(std::vector<uint64_t> pointers,
                          read_array<uint64_t>(idx, h.pointers_offset(), h.sequences, "the sequence pointers"));
  for (size_t k = 0; k < lengths.size(); ++k) {
    if (lengths[k] > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
      return format_error(idx_path, h.lengths_offset() + 4 * k,
                          absl::StrCat("sequence ", k, "'s length (an int32 >= 0)"),
                          absl::StrCat(static_cast<int32_t>(lengths[k])));
    }
  }
  DLFEED_RETURN_IF_ERROR(check_within(pointers, lengths, h.dtype, data.size(), data.path(), idx_path,
                                      [&](size_t k) { return h.pointers_offset() + 8 * k; }));
  // The document index: sequence numbers from 0, never decreasing, ending at S.
  DLFEED_ASSIGN_OR_RETURN(std::vector<uint64_t> docs,
                          read_array<uint64_t>(idx, h.documents_offset(), h.documents, "the document index"));
  // Megatron's builder starts it at [0]: an index with none was not written by it.
  if (docs.empty()) {
    return format_error(idx_path, 26, "a document index of at least one entry (0 ... sequences)",
                        "a document count of 0");
  }
  uint64_t prev = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    const bool last = d + 1 == docs.size();
    if (docs[d] < prev || docs[d] > h.sequences || (d == 0 && docs[d] != 0) || (last && docs[d] != h.sequences)) {
      return format_error(idx_path, h.documents_offset() + 8 * d,
                          absl::StrCat("document index entry ", d, ": ",
                                       d == 0 ? "0"
                                       : last ? absl::StrCat(h.sequences, " (the sequence count)")
                                              : absl::StrCat("a sequence number from ", prev, " to ", h.sequences)),
                          absl::StrCat(static_cast<int64_t>(docs[d])));
    }
    prev = docs[d];
  }
  return std::unique_ptr<SampleSource>(std::make_unique<IndexedBinarySource>(data.path(), idx_path, "megatron", h.dtype,
                                                                             std::move(pointers), std::move(lengths)));
}

absl::StatusOr<std::unique_ptr<SampleSource>> open_dlio(const detail::File& data, const std::string& off_path,
                                                        const std::string& sz_path) {
  DLFEED_ASSIGN_OR_RETURN(detail::File off, detail::File::open(off_path));
  DLFEED_ASSIGN_OR_RETURN(detail::File sz, detail::File::open(sz_path));
  for (const detail::File* f : {&off, &sz}) {
    if (f->size() % 8 != 0) {
      return format_error(f->path(), f->size() - f->size() % 8, "an array of little-endian uint64 (8 bytes each)",
                          absl::StrCat(f->size() % 8, " bytes after the last whole entry"));
    }
  }
  if (off.size() != sz.size()) {
    return format_error(sz_path, std::min(off.size(), sz.size()),
                        absl::StrCat(off.size() / 8, " sizes, one per offset in ", off_path),
                        absl::StrCat(sz.size() / 8, " sizes"));
  }
  const uint64_t n = off.size() / 8;
  DLFEED_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets, read_array<uint64_t>(off, 0, n, "the sample offsets"));
  DLFEED_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes, read_array<uint64_t>(sz, 0, n, "the sample sizes"));
  std::vector<uint32_t> lengths(n);
  for (size_t k = 0; k < n; ++k) {
    if (sizes[k] > std::numeric_limits<uint32_t>::max()) {
      return format_error(sz_path, 8 * k, absl::StrCat("sample ", k, "'s size below 4 GiB"),
                          absl::StrCat(sizes[k], " bytes"));
    }
    lengths[k] = static_cast<uint32_t>(sizes[k]);
  }
  DLFEED_RETURN_IF_ERROR(
      check_within(offsets, lengths, DType::u8(), data.size(), data.path(), off_path, [](size_t k) { return 8 * k; }));
  return std::unique_ptr<SampleSource>(
      std::make_unique<IndexedBinarySource>(data.path(), absl::StrCat(off_path, " + ", sz_path), "dlio", DType::u8(),
                                            std::move(offsets), std::move(lengths)));
}

}  // namespace

absl::StatusOr<MegatronIdxHeader> parse_megatron_idx_header(std::span<const std::byte> head, uint64_t idx_size,
                                                            absl::string_view idx_path) {
  if (head.size() < kMegatronIdxHeaderSize) {
    return format_error(idx_path, 0, absl::StrCat("a ", kMegatronIdxHeaderSize, "-byte Megatron index header"),
                        absl::StrCat(head.size(), " bytes"));
  }
  if (std::memcmp(head.data(), kMagic, sizeof(kMagic)) != 0) {
    return format_error(idx_path, 0, "the Megatron index magic \"MMIDIDX\\x00\\x00\"", "other bytes");
  }
  if (const uint64_t version = le64(head.data() + 9); version != 1) {
    return format_error(idx_path, 9, "index version 1", absl::StrCat("version ", version));
  }
  MegatronIdxHeader h;
  const uint8_t code = static_cast<uint8_t>(head[17]);
  std::optional<DType> dtype = megatron_dtype(code);
  if (!dtype) {
    return format_error(idx_path, 17,
                        "a dtype code from 1 to 8 (uint8, int8, int16, int32, int64, float64, float32, uint16)",
                        absl::StrCat("code ", code));
  }
  h.dtype = *dtype;
  h.sequences = le64(head.data() + 18);
  h.documents = le64(head.data() + 26);
  // The arrays must fill the file: 12 bytes a sequence (13 multimodal) and
  // 8 a document entry. Checked in 128 bits, before anything is allocated.
  const unsigned __int128 body = static_cast<unsigned __int128>(h.sequences) * 12 +
                                 static_cast<unsigned __int128>(h.documents) * 8 + kMegatronIdxHeaderSize;
  if (body == idx_size || body + h.sequences == idx_size) {
    h.multimodal = body != idx_size;
    return h;
  }
  return format_error(idx_path, 18,
                      absl::StrCat("counts whose arrays fill the ", idx_size, "-byte index (34 + 12 x sequences + 8 x ",
                                   "documents bytes, + 1 x sequences when multimodal)"),
                      absl::StrCat(h.sequences, " sequences and ", h.documents, " document entries"));
}

std::vector<std::string> indexed_binary_index_files(const std::string& path) {
  if (absl::EndsWith(path, ".bin")) return {absl::StrCat(path.substr(0, path.size() - 4), ".idx")};
  return {absl::StrCat(path, ".off.idx"), absl::StrCat(path, ".sz.idx")};
}

namespace {
// A file, or an object of a store, of that name.
bool file_exists(const std::string& path) {
  if (is_object_url(path)) {
    absl::StatusOr<std::shared_ptr<ObjectStore>> store = object_store_for(path);
    return store.ok() && (*store)->head(path).ok();
  }
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}
}  // namespace

bool is_indexed_binary_name(const std::string& path) {
  if (absl::EndsWith(path, ".indexed_binary") || absl::EndsWith(path, ".mmap_indexed_binary")) return true;
  if (!absl::EndsWith(path, ".bin")) return false;
  return file_exists(indexed_binary_index_files(path)[0]);
}

absl::StatusOr<SampleIndex> open_indexed_binary(const std::string& path, const FormatOptions& options) {
  if (!options.name.empty() && options.name != "data") {
    return absl::NotFoundError(absl::StrCat(path, ": no field '", options.name,
                                            "': an indexed binary file has one field, 'data' (its sequences)"));
  }
  DLFEED_ASSIGN_OR_RETURN(detail::File data, detail::File::open(path));
  const std::vector<std::string> idx = indexed_binary_index_files(path);
  for (const std::string& p : idx) {
    if (!file_exists(p)) {
      return absl::NotFoundError(absl::StrCat(
          path, ": expected its index ", p, " beside it (",
          idx.size() == 1 ? "Megatron-LM's PREFIX.bin + PREFIX.idx" : "DLIO's NAME + NAME.off.idx + NAME.sz.idx",
          "), found no such file"));
    }
  }
  absl::StatusOr<std::unique_ptr<SampleSource>> src =
      idx.size() == 1 ? open_megatron(data, idx[0]) : open_dlio(data, idx[0], idx[1]);
  if (!src.ok()) return src.status();
  SampleIndex index;
  index.add_file(path, std::move(*src));
  index.identities.assign(1, data.identity());
  return index;
}

}  // namespace dlfeed
