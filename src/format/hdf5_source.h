// SPDX-License-Identifier: Apache-2.0
// Private to src/format: what the HDF5 reader's files share. hdf5.cc reads
// a dataset's metadata and builds the index; hdf5_chunks.cc turns a chunked
// dataset's chunk table into extents and decodes its chunks.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "dlfeed/format/format.h"
#include "format/hdf5_util.h"
#include "format/index_codec.h"

namespace dlfeed::inline DLFEED_ABI::detail::h5 {

/// A failed libhdf5 call on `path`, with libhdf5's own messages; the second
/// form names the file offset the call was about.
absl::Status h5_fail(const std::string& path, absl::string_view expected);
absl::Status h5_fail(const std::string& path, uint64_t offset, absl::string_view expected);

inline bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
inline bool add_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }

/// What every HDF5 source knows about its dataset.
struct DatasetGeometry {
  std::string path;
  std::string name;
  std::vector<uint64_t> dims;   // full dataset shape; dims[0] = samples
  std::vector<uint64_t> chunk;  // chunk shape (chunked layout only)
  DType dtype;
  uint64_t sample_elems = 0;
  uint64_t sample_bytes = 0;
  std::vector<std::byte> fill;  // one element of the fill value, dtype's byte order
  std::string filters;          // "shuffle+deflate(4)", "fletcher32", ...
  std::string reason;           // library-read: why
  bool scalar = false;          // a 0-d dataset read whole (axis none): dims {1}, one sample of shape ()
  std::string missing_filter;   // a filter neither dlfeed nor this libhdf5 decodes (no plugin)

  Shape sample_shape() const {
    Shape s;
    for (size_t d = 1; d < dims.size(); ++d) s.push_back(static_cast<int64_t>(dims[d]));
    return s;
  }
  Shape full_shape() const {
    Shape s;
    if (scalar) return s;
    for (uint64_t d : dims) s.push_back(static_cast<int64_t>(d));
    return s;
  }
  bool zero_fill() const {
    return std::all_of(fill.begin(), fill.end(), [](std::byte b) { return b == std::byte{0}; });
  }
  void fill_bytes(std::byte* out, uint64_t nbytes) const {
    if (zero_fill() || fill.empty()) {
      std::memset(out, 0, nbytes);
      return;
    }
    for (uint64_t i = 0; i + fill.size() <= nbytes; i += fill.size()) {
      std::memcpy(out + i, fill.data(), fill.size());
    }
  }
};

class Hdf5Source : public SampleSource {
 public:
  explicit Hdf5Source(DatasetGeometry g) : g_(std::move(g)), shape_(g_.sample_shape()) {}
  std::optional<std::pair<DType, Shape>> sample_spec() const override { return std::make_pair(g_.dtype, shape_); }
  uint64_t num_samples() const override { return g_.dims.empty() ? 0 : g_.dims[0]; }
  std::string sample_axis() const override { return "axis 0"; }
  bool scalar() const override { return g_.scalar; }
  /// Shape and dtype; the extents are the subclass's.
  void fill(uint64_t, SampleRef& ref) const override {
    ref.shape = shape_;
    ref.dtype = g_.dtype;
  }
  std::string describe() const override {
    std::string s = absl::StrCat("dataset '", g_.name, "' shape ", shape_str(g_.full_shape()), " ", g_.dtype.str(),
                                 " (", g_.dtype.name(), ")");
    if (!g_.chunk.empty()) {
      Shape c;
      for (uint64_t d : g_.chunk) c.push_back(static_cast<int64_t>(d));
      absl::StrAppend(&s, ", chunks ", shape_str(c));
    }
    if (!g_.filters.empty()) absl::StrAppend(&s, ", filters ", g_.filters);
    if (!g_.reason.empty()) absl::StrAppend(&s, ", read through libhdf5: ", g_.reason);
    absl::StrAppend(&s, ", samples along axis 0");
    return s;
  }

 protected:
  DecodedSample sample_view(const std::byte* p, uint64_t n) const {
    return DecodedSample{std::span<const std::byte>(p, n), g_.sample_shape(), g_.dtype};
  }
  DatasetGeometry g_;
  Shape shape_;  // a sample's shape (dims without the first)
};

/// A dataset's geometry in the index cache; load_geometry recomputes what
/// follows from the dims and dtype and refuses sizes that overflow.
void save_geometry(const DatasetGeometry& g, std::string& out);
absl::StatusOr<DatasetGeometry> load_geometry(const std::string& path, uint64_t file_size, CacheReader& in);
/// The cached sources (tags "hdf5:contiguous", "hdf5:chunked"), checked
/// against the file's size as open_hdf5 checks them.
absl::StatusOr<std::unique_ptr<SampleSource>> load_contiguous(const std::string& path, uint64_t file_size,
                                                              CacheReader& in);
absl::StatusOr<std::unique_ptr<SampleSource>> load_chunked(const std::string& path, uint64_t file_size,
                                                           CacheReader& in);

/// Why a file the dataset's storage names, which libhdf5 opens itself (an
/// external raw-data file, a virtual dataset's source file), cannot be
/// opened: it is not a regular file (a FIFO would hold libhdf5's open()
/// forever). Empty when each is a regular file or absent (hdf5_links.cc).
std::string special_storage_file(const std::string& path, hid_t file, hid_t dcpl);
/// The external raw-data files of a dataset's storage (H5Pset_external),
/// each where libhdf5 finds it (the paths special_storage_file walks), with
/// what stat says of it now; none for a file of an object store.
std::vector<std::pair<std::string, FileIdentity>> external_data_files(const std::string& path, hid_t dcpl);
/// A dataset-access list (also a link-access list, for H5Oopen) whose
/// external-link callback refuses a target that is not a regular file,
/// writing why into `*refused`, which must outlive the list's use.
absl::StatusOr<Hid> guarded_access(const std::string& path, std::string* refused);
/// Dataset `name` of `file` opened through guarded_access: InvalidArgument
/// naming the link the check refused, or h5_fail(path, `expected`) when
/// libhdf5 cannot open it. `refused` must outlive the dataset.
absl::StatusOr<Hid> open_checked_dataset(const std::string& path, hid_t file, const std::string& name,
                                         std::string* refused, absl::string_view expected);
/// The filters dlfeed undoes itself, in the dataset's pipeline order.
enum class Filter : uint8_t { kShuffle, kDeflate };
struct FilterPipeline {
  std::vector<Filter> steps;
  uint32_t shuffle_size = 0;  // the shuffle filter's element size
};

// What the dataset's creation properties and storage say (hdf5_storage.cc).
// Each needs the HDF5 lock, which the caller holds.

/// The fill value, in the dataset's own type (g.fill); zeros unless the file
/// sets one. Returns how the file defines it (H5Pfill_value_defined's answer).
H5D_fill_value_t read_fill(hid_t dcpl, hid_t type, DatasetGeometry& g);
/// Storage never written has no values when the file defines none (a fill
/// value set to none, or fill time "never"): libhdf5 refuses to read it or
/// leaves the caller's buffer as it was. An error, not zeros or a guess.
absl::Status check_unwritten(hid_t dset, hid_t dcpl, H5D_fill_value_t fv, const DatasetGeometry& g);
/// Why the dataset's bytes are not `file`'s to read by offset: it lives in
/// another file, reached through an external link (H5Dopen follows it; its
/// offsets are that file's). Empty when it is in `file`.
std::string in_another_file(hid_t file, hid_t dset);
/// The filters dlfeed undoes (one shuffle first, one deflate); names every
/// filter in g.filters, and sets g.reason at the first it does not undo.
FilterPipeline read_filters(hid_t dcpl, H5D_layout_t layout, DatasetGeometry& g);
/// g.chunk from the creation properties.
absl::Status read_chunk_shape(hid_t dcpl, DatasetGeometry& g);
/// Why storage cannot be read as extents whatever its filters; empty if it can.
std::string unsupported_storage(hid_t dcpl, H5D_layout_t layout, const FilterPipeline& pipeline);
/// What a user block adds to HDF5 addresses to make file offsets
/// (H5Dget_offset already adds it; chunk addresses may not).
uint64_t userblock_of(hid_t file);

/// A chunked dataset (no filters, or shuffle and/or deflate) as byte
/// extents: lists its chunk table and checks every chunk, and every chunk
/// row's extents, lie in the file. Returns the source (moved out of `g`),
/// which computes a sample's extents from the table, or null with
/// `g.reason` set when the table is too large or costly to index, so the
/// caller reads through libhdf5. Holds no lock: the caller holds the HDF5
/// lock.
absl::StatusOr<std::unique_ptr<SampleSource>> index_chunked(hid_t dset, DatasetGeometry& g, FilterPipeline filters,
                                                            uint64_t userblock, uint64_t file_size);

}  // namespace dlfeed::detail::h5
