// HDF5: the sample index is built once from libhdf5's metadata (dataset
// shape, type, layout, contiguous offset or chunk table); after that samples
// are plain byte extents of the file, decoded here without libhdf5 (zlib for
// deflate, a byte transpose for shuffle). Layouts and filters we cannot turn
// into extents fall back to H5Dread through the library.
#include <hdf5.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/format/format.h"
#include "hdf5_util.h"

namespace dlfeed {
namespace detail {
/// One lock for every libhdf5 call dlfeed makes (reader and writer).
std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace detail

namespace {

using detail::h5::H5Lock;
using detail::h5::Hid;
using detail::h5::h5_errors;

// Limits that keep a corrupt or hostile header from causing unbounded work.
constexpr uint64_t kMaxSampleBytes = uint64_t{1} << 32;   // 4 GiB per decoded sample
constexpr uint64_t kMaxSamples = uint64_t{1} << 31;       // samples per dataset
constexpr uint64_t kMaxChunkCells = uint64_t{1} << 22;    // chunk grid cells indexed
constexpr uint64_t kMaxChunkBytes = uint64_t{1} << 32;    // HDF5's own chunk limit
constexpr int kMaxListed = 64;                            // datasets listed in errors

absl::Status h5_fail(const std::string& path, absl::string_view expected) {
  return file_error(path, expected, absl::StrCat("libhdf5 error: ", h5_errors()));
}
absl::Status h5_fail(const std::string& path, uint64_t offset, absl::string_view expected) {
  return format_error(path, offset, expected, absl::StrCat("libhdf5 error: ", h5_errors()));
}

bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool add_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }

std::string type_class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_TIME: return "time";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length";
    case H5T_ARRAY: return "array";
    default: return "unknown";
  }
}

// ---------------------------------------------------------------------------
// Listing datasets (for defaults and error messages), with calls that are the
// same in libhdf5 1.10, 1.12 and 1.14.

void list_datasets(hid_t group, const std::string& prefix, int depth, std::vector<std::string>& out) {
  H5G_info_t info;
  if (depth > 4 || H5Gget_info(group, &info) < 0) return;
  for (hsize_t i = 0; i < info.nlinks && static_cast<int>(out.size()) < kMaxListed; ++i) {
    ssize_t len = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len <= 0) continue;
    std::string name(static_cast<size_t>(len), '\0');
    H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT);
    Hid obj(H5Oopen(group, name.c_str(), H5P_DEFAULT), H5Oclose);
    if (!obj.ok()) continue;  // dangling soft/external link
    H5I_type_t t = H5Iget_type(obj.get());
    if (t == H5I_DATASET) {
      out.push_back(prefix + name);
    } else if (t == H5I_GROUP) {
      list_datasets(obj.get(), prefix + name + "/", depth + 1, out);
    }
  }
  H5Eclear2(H5E_DEFAULT);
}

// ---------------------------------------------------------------------------
// What every HDF5 source knows about its dataset.

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

  Shape sample_shape() const {
    Shape s;
    for (size_t d = 1; d < dims.size(); ++d) s.push_back(static_cast<int64_t>(dims[d]));
    return s;
  }
  Shape full_shape() const {
    Shape s;
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
  explicit Hdf5Source(DatasetGeometry g) : g_(std::move(g)) {}
  std::optional<std::pair<DType, Shape>> sample_spec() const override {
    return std::make_pair(g_.dtype, g_.sample_shape());
  }
  std::string describe() const override {
    std::string s = absl::StrCat("dataset '", g_.name, "' shape ", shape_str(g_.full_shape()), " ",
                                 g_.dtype.str(), " (", g_.dtype.name(), ")");
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
};

// Contiguous storage: sample k is one extent; decode is a view of it.
class ContiguousSource final : public Hdf5Source {
 public:
  ContiguousSource(DatasetGeometry g, bool allocated) : Hdf5Source(std::move(g)), allocated_(allocated) {}
  std::string layout() const override { return "hdf5:contiguous"; }
  bool is_identity(const SampleRef& ref) const override { return allocated_ && ref.extents.size() == 1; }
  absl::StatusOr<DecodedSample> decode(const SampleRef& ref, std::span<std::byte> raw,
                                       std::vector<std::byte>& scratch) const override {
    if (!allocated_) {
      scratch.resize(g_.sample_bytes);
      g_.fill_bytes(scratch.data(), g_.sample_bytes);
      return sample_view(scratch.data(), g_.sample_bytes);
    }
    if (raw.size() != g_.sample_bytes) {
      return format_error(g_.path, ref.extents.empty() ? 0 : ref.extents[0].offset,
                          absl::StrCat(g_.sample_bytes, " bytes for sample ", ref.item, " of '", g_.name, "'"),
                          absl::StrCat(raw.size(), " bytes"));
    }
    return sample_view(raw.data(), raw.size());
  }

 private:
  bool allocated_;
};

// One cell of the chunk grid.
struct ChunkEntry {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint32_t mask = 0;  // bit i set: filter i of the pipeline was skipped
  bool stored = false;
};

enum class Filter : uint8_t { kShuffle, kDeflate };

// Chunked storage without filters, or with shuffle and/or deflate.
class ChunkedSource final : public Hdf5Source {
 public:
  ChunkedSource(DatasetGeometry g, std::vector<Filter> pipeline, uint32_t shuffle_size,
                std::vector<ChunkEntry> cells)
      : Hdf5Source(std::move(g)), pipeline_(std::move(pipeline)), shuffle_size_(shuffle_size),
        cells_(std::move(cells)) {
    const size_t r = g_.dims.size();
    grid_.resize(r);
    cells_per_row_ = 1;
    row_elems_ = 1;
    for (size_t d = 0; d < r; ++d) {
      grid_[d] = g_.chunk[d] == 0 ? 0 : (g_.dims[d] + g_.chunk[d] - 1) / g_.chunk[d];
      if (d > 0) {
        cells_per_row_ *= grid_[d];
        row_elems_ *= g_.chunk[d];
      }
    }
    row_bytes_ = row_elems_ * g_.dtype.size;
    chunk_bytes_ = row_bytes_ * g_.chunk[0];
    whole_rows_ = cells_per_row_ == 1;
    for (size_t d = 1; d < r; ++d) whole_rows_ = whole_rows_ && g_.chunk[d] == g_.dims[d];
  }

  std::string layout() const override {
    std::string s = "hdf5:chunked";
    for (Filter f : pipeline_) s += f == Filter::kShuffle ? "+shuffle" : "+deflate";
    return s;
  }

  /// True when a chunk with this filter mask is stored exactly as its bytes.
  bool stored_raw(uint32_t mask) const {
    for (size_t i = 0; i < pipeline_.size(); ++i) {
      if (!(mask & (1u << i))) return false;
    }
    return true;
  }

  /// The extents of sample k: for each stored chunk of its chunk row, the
  /// row's slice of a raw chunk, or the whole stored chunk when filtered.
  absl::Status extents_for(uint64_t k, uint64_t file_size, absl::InlinedVector<Extent, 1>& out) const {
    const uint64_t r = k / g_.chunk[0];
    const uint64_t k0 = k - r * g_.chunk[0];
    uint64_t total = 0;
    for (uint64_t j = 0; j < cells_per_row_; ++j) {
      const ChunkEntry& c = cells_[r * cells_per_row_ + j];
      if (!c.stored) continue;
      Extent e = stored_raw(c.mask) ? Extent{c.addr + k0 * row_bytes_, row_bytes_} : Extent{c.addr, c.size};
      total += e.length;
      if (total > file_size) {
        return format_error(g_.path, c.addr,
                            absl::StrCat("the chunks of sample ", k, " of '", g_.name, "' within the file of ",
                                         file_size, " bytes"),
                            absl::StrCat(total, " bytes of chunks"));
      }
      out.push_back(e);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<DecodedSample> decode(const SampleRef& ref, std::span<std::byte> raw,
                                       std::vector<std::byte>& scratch) const override {
    const uint64_t k = ref.item;
    const uint64_t r = k / g_.chunk[0];
    const uint64_t k0 = k - r * g_.chunk[0];
    const ChunkEntry* row = cells_.data() + r * cells_per_row_;

    // One raw chunk holding whole samples: the sample is a view of raw.
    if (whole_rows_ && row[0].stored && stored_raw(row[0].mask)) {
      if (raw.size() != g_.sample_bytes) return short_raw(ref, raw.size(), g_.sample_bytes);
      return sample_view(raw.data(), raw.size());
    }

    bool any_filtered = false;
    bool any_missing = false;
    uint64_t expect = 0;
    for (uint64_t j = 0; j < cells_per_row_; ++j) {
      if (!row[j].stored) {
        any_missing = true;
      } else if (stored_raw(row[j].mask)) {
        expect += row_bytes_;
      } else {
        any_filtered = true;
        expect += row[j].size;
      }
    }
    if (raw.size() != expect) return short_raw(ref, raw.size(), expect);

    const uint64_t tmp_bytes = any_filtered ? 2 * chunk_bytes_ : 0;
    scratch.resize(g_.sample_bytes + tmp_bytes);
    std::byte* out = scratch.data();
    std::byte* tmp = out + g_.sample_bytes;
    if (any_missing) g_.fill_bytes(out, g_.sample_bytes);

    uint64_t pos = 0;
    for (uint64_t j = 0; j < cells_per_row_; ++j) {
      const ChunkEntry& c = row[j];
      if (!c.stored) continue;
      const std::byte* slice;
      if (stored_raw(c.mask)) {
        slice = raw.data() + pos;
        pos += row_bytes_;
      } else {
        DLFEED_ASSIGN_OR_RETURN(const std::byte* chunk,
                                unfilter(c, std::span<std::byte>(raw.data() + pos, c.size), tmp,
                                         tmp + chunk_bytes_));
        slice = chunk + k0 * row_bytes_;
        pos += c.size;
      }
      copy_cell(j, slice, out);
    }
    return sample_view(out, g_.sample_bytes);
  }

 private:
  absl::Status short_raw(const SampleRef& ref, uint64_t got, uint64_t want) const {
    return format_error(g_.path, ref.extents.empty() ? 0 : ref.extents[0].offset,
                        absl::StrCat(want, " stored bytes for sample ", ref.item, " of '", g_.name, "'"),
                        absl::StrCat(got, " bytes"));
  }

  // Undoes the chunk's filters; returns the decoded chunk (chunk_bytes_ long),
  // in buf_a or buf_b.
  absl::StatusOr<const std::byte*> unfilter(const ChunkEntry& c, std::span<std::byte> stored, std::byte* buf_a,
                                            std::byte* buf_b) const {
    const std::byte* cur = stored.data();
    uint64_t cur_len = stored.size();
    for (size_t i = pipeline_.size(); i-- > 0;) {
      if (c.mask & (1u << i)) continue;  // this filter was skipped for this chunk
      std::byte* dst = cur == buf_a ? buf_b : buf_a;
      if (pipeline_[i] == Filter::kDeflate) {
        absl::StatusOr<uint64_t> inflated;
        {
          counters::StepTimer inflate(counters::Id::kDecodeInflate);
          inflated = inflate_chunk(c, cur, cur_len, dst);
        }
        DLFEED_ASSIGN_OR_RETURN(cur_len, std::move(inflated));
      } else {
        // Shuffling keeps the length, and dst holds one chunk: a longer
        // stored chunk (its deflate skipped by the filter mask) cannot be one.
        if (cur_len > chunk_bytes_) {
          return format_error(g_.path, c.addr,
                              absl::StrCat("a chunk of '", g_.name, "' decoding to ", chunk_bytes_, " bytes"),
                              absl::StrCat(cur_len, " bytes"));
        }
        unshuffle(cur, cur_len, dst);
      }
      cur = dst;
    }
    if (cur_len != chunk_bytes_) {
      return format_error(g_.path, c.addr, absl::StrCat("a chunk of '", g_.name, "' decoding to ", chunk_bytes_, " bytes"),
                          absl::StrCat(cur_len, " bytes"));
    }
    if (cur == stored.data()) {  // every filter skipped (handled as raw before; kept for safety)
      std::memcpy(buf_a, cur, cur_len);
      cur = buf_a;
    }
    return cur;
  }

  absl::StatusOr<uint64_t> inflate_chunk(const ChunkEntry& c, const std::byte* in, uint64_t in_len,
                                         std::byte* out) const {
    z_stream zs{};
    if (inflateInit(&zs) != Z_OK) return absl::InternalError("zlib inflateInit failed");
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in));
    zs.avail_in = static_cast<uInt>(in_len);
    zs.next_out = reinterpret_cast<Bytef*>(out);
    zs.avail_out = static_cast<uInt>(chunk_bytes_);
    int rc = inflate(&zs, Z_FINISH);
    const uint64_t produced = zs.total_out;
    std::string msg = zs.msg != nullptr ? zs.msg : "";
    inflateEnd(&zs);
    if (rc == Z_STREAM_END) return produced;
    std::string found;
    if (rc == Z_BUF_ERROR && zs.avail_out == 0) {
      found = absl::StrCat("more than ", chunk_bytes_, " bytes");
    } else if (rc == Z_BUF_ERROR) {
      found = absl::StrCat("a stream that ends early after ", produced, " bytes");
    } else {
      found = absl::StrCat("zlib error ", rc, msg.empty() ? "" : ": ", msg);
    }
    return format_error(g_.path, c.addr,
                        absl::StrCat("a deflate (zlib) chunk of '", g_.name, "' inflating to ", chunk_bytes_, " bytes"),
                        found);
  }

  // HDF5's shuffle stores byte b of every element together; put them back.
  void unshuffle(const std::byte* in, uint64_t len, std::byte* out) const {
    const uint64_t es = shuffle_size_;
    if (es <= 1 || len < es) {
      std::memcpy(out, in, len);
      return;
    }
    const uint64_t n = len / es;
    for (uint64_t b = 0; b < es; ++b) {
      const std::byte* src = in + b * n;
      std::byte* dst = out + b;
      for (uint64_t i = 0; i < n; ++i) dst[i * es] = src[i];
    }
    std::memcpy(out + n * es, in + n * es, len - n * es);  // trailing bytes stay as they are
  }

  // Copies the part of chunk-row `slice` (shape chunk[1:]) that lies inside
  // the sample (shape dims[1:]) to its place in `out`.
  void copy_cell(uint64_t j, const std::byte* slice, std::byte* out) const {
    const size_t m = g_.dims.size() - 1;  // sample rank
    const uint64_t es = g_.dtype.size;
    if (m == 0) {
      std::memcpy(out, slice, es);
      return;
    }
    absl::InlinedVector<uint64_t, 4> origin(m), ext(m), sstride(m), dstride(m);
    uint64_t rem = j;
    for (size_t d = m; d-- > 0;) {
      const uint64_t g = grid_[d + 1];
      const uint64_t gi = rem % g;
      rem /= g;
      origin[d] = gi * g_.chunk[d + 1];
      ext[d] = std::min(g_.chunk[d + 1], g_.dims[d + 1] - origin[d]);
    }
    uint64_t s = es, t = es;
    for (size_t d = m; d-- > 0;) {
      sstride[d] = s;
      dstride[d] = t;
      s *= g_.chunk[d + 1];
      t *= g_.dims[d + 1];
    }
    const uint64_t run = ext[m - 1] * es;
    absl::InlinedVector<uint64_t, 4> idx(m, 0);
    while (true) {
      uint64_t so = 0, dof = origin[m - 1] * es;
      for (size_t d = 0; d + 1 < m; ++d) {
        so += idx[d] * sstride[d];
        dof += (origin[d] + idx[d]) * dstride[d];
      }
      std::memcpy(out + dof, slice + so, run);
      // Advance the odometer over the outer dimensions 0..m-2.
      int64_t d = static_cast<int64_t>(m) - 2;
      for (; d >= 0; --d) {
        if (++idx[d] < ext[d]) break;
        idx[d] = 0;
      }
      if (d < 0) return;
    }
  }

  std::vector<Filter> pipeline_;
  uint32_t shuffle_size_;
  std::vector<ChunkEntry> cells_;  // C order over the chunk grid
  std::vector<uint64_t> grid_;
  uint64_t cells_per_row_ = 1;
  uint64_t row_elems_ = 1;
  uint64_t row_bytes_ = 0;
  uint64_t chunk_bytes_ = 0;
  bool whole_rows_ = false;
};

// Anything else: H5Dread of row k through libhdf5.
class LibrarySource final : public Hdf5Source {
 public:
  explicit LibrarySource(DatasetGeometry g) : Hdf5Source(std::move(g)) {}
  ~LibrarySource() override {
    H5Lock lock;
    dset_.reset();
    file_.reset();
  }
  std::string layout() const override { return "hdf5:library-read"; }
  bool reads_through_library() const override { return true; }

  absl::StatusOr<DecodedSample> decode(const SampleRef& ref, std::span<std::byte>,
                                       std::vector<std::byte>& scratch) const override {
    scratch.resize(g_.sample_bytes);
    if (g_.sample_bytes == 0) return sample_view(scratch.data(), 0);
    H5Lock lock;
    if (!dset_.ok()) {
      Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
      file_ = Hid(H5Fopen(g_.path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
      if (!file_.ok()) return h5_fail(g_.path, "an HDF5 file libhdf5 can open");
      dset_ = Hid(H5Dopen2(file_.get(), g_.name.c_str(), H5P_DEFAULT), H5Dclose);
      if (!dset_.ok()) return h5_fail(g_.path, absl::StrCat("dataset '", g_.name, "'"));
    }
    Hid type(H5Dget_type(dset_.get()), H5Tclose);
    Hid fspace(H5Dget_space(dset_.get()), H5Sclose);
    const size_t rank = g_.dims.size();
    std::vector<hsize_t> start(rank, 0), count(rank);
    start[0] = ref.item;
    count[0] = 1;
    for (size_t d = 1; d < rank; ++d) count[d] = g_.dims[d];
    const hsize_t elems = g_.sample_elems;
    Hid mspace(H5Screate_simple(1, &elems, nullptr), H5Sclose);
    if (!type.ok() || !fspace.ok() || !mspace.ok() ||
        H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0 ||
        H5Dread(dset_.get(), type.get(), mspace.get(), fspace.get(), H5P_DEFAULT, scratch.data()) < 0) {
      return h5_fail(g_.path, absl::StrCat("H5Dread of sample ", ref.item, " of '", g_.name, "'"));
    }
    return sample_view(scratch.data(), g_.sample_bytes);
  }

 private:
  mutable Hid file_;  // opened on first decode; guarded by the HDF5 lock
  mutable Hid dset_;
};

void warn_fallback_once(const std::string& path, const std::string& name, const std::string& reason) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  std::fprintf(stderr,
               "dlfeed: note: %s: dataset '%s' is read through libhdf5 (H5Dread), not by byte extents: %s "
               "(further such notes are not shown)\n",
               path.c_str(), name.c_str(), reason.c_str());
}

// ---------------------------------------------------------------------------
// Reading the metadata.

absl::StatusOr<DType> dtype_of(const std::string& path, const std::string& name, hid_t type) {
  H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  auto refuse = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": dataset '", name,
                                                   "': expected integer, float or bool elements, found ", what,
                                                   " elements (HDF5 type class ", type_class_name(cls), ", ", size,
                                                   " bytes)"));
  };
  auto order_big = [&](hid_t t) { return size > 1 && H5Tget_order(t) == H5T_ORDER_BE; };
  if (cls == H5T_ENUM) {
    Hid base(H5Tget_super(type), H5Tclose);
    int nmembers = H5Tget_nmembers(type);
    if (base.ok() && H5Tget_class(base.get()) == H5T_INTEGER && size == 1 && nmembers == 2) {
      bool is_bool = true;
      for (int i = 0; i < 2 && is_bool; ++i) {
        char* mname = H5Tget_member_name(type, static_cast<unsigned>(i));
        int8_t v = -1;
        H5Tget_member_value(type, static_cast<unsigned>(i), &v);
        is_bool = mname != nullptr && ((std::strcmp(mname, "FALSE") == 0 && v == 0) ||
                                       (std::strcmp(mname, "TRUE") == 0 && v == 1));
        if (mname != nullptr) H5free_memory(mname);
      }
      if (is_bool) return DType::boolean();
    }
    if (!base.ok() || H5Tget_class(base.get()) != H5T_INTEGER) return refuse("enum");
    // Another enum: its integer values, as h5py reads it.
    return dtype_of(path, name, base.get());
  }
  if (cls == H5T_INTEGER) {
    if (size != 1 && size != 2 && size != 4 && size != 8) return refuse(absl::StrCat(size, "-byte integer"));
    if (H5Tget_precision(type) != size * 8 || H5Tget_offset(type) != 0) {
      return refuse(absl::StrCat("integer with ", H5Tget_precision(type), " significant bits at bit offset ",
                                 H5Tget_offset(type)));
    }
    DType t;
    t.kind = H5Tget_sign(type) == H5T_SGN_NONE ? DType::Kind::kUInt : DType::Kind::kInt;
    t.size = static_cast<uint8_t>(size);
    t.big_endian = order_big(type);
    return t;
  }
  if (cls == H5T_FLOAT) {
    size_t spos, epos, esize, mpos, msize;
    if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return refuse("float");
    const bool ieee = (size == 2 && spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10) ||
                      (size == 4 && spos == 31 && epos == 23 && esize == 8 && mpos == 0 && msize == 23) ||
                      (size == 8 && spos == 63 && epos == 52 && esize == 11 && mpos == 0 && msize == 52);
    if (!ieee) return refuse(absl::StrCat("non-IEEE ", size, "-byte float"));
    DType t;
    t.kind = DType::Kind::kFloat;
    t.size = static_cast<uint8_t>(size);
    t.big_endian = order_big(type);
    return t;
  }
  return refuse(type_class_name(cls));
}

std::string filter_name(H5Z_filter_t id, const char* name) {
  switch (id) {
    case H5Z_FILTER_DEFLATE: return "deflate";
    case H5Z_FILTER_SHUFFLE: return "shuffle";
    case H5Z_FILTER_FLETCHER32: return "fletcher32";
    case H5Z_FILTER_SZIP: return "szip";
    case H5Z_FILTER_NBIT: return "nbit";
    case H5Z_FILTER_SCALEOFFSET: return "scaleoffset";
    case 32000: return "lzf";
    default: break;
  }
  return absl::StrCat(name != nullptr && name[0] != '\0' ? name : "filter", " (id ", id, ")");
}

absl::StatusOr<std::string> pick_dataset(const std::string& path, hid_t file, const std::string& wanted,
                                         std::vector<std::string>& names) {
  list_datasets(file, "", 0, names);
  auto has = [&](const std::string& n) {
    std::string s = n;
    while (!s.empty() && s[0] == '/') s.erase(0, 1);
    return std::find(names.begin(), names.end(), s) != names.end();
  };
  auto listing = [&] {
    if (names.empty()) return std::string("no datasets");
    std::string s = absl::StrCat("datasets: ", absl::StrJoin(names, ", "));
    if (static_cast<int>(names.size()) >= kMaxListed) s += ", ...";
    return s;
  };
  if (!wanted.empty()) {
    std::string n = wanted;
    while (!n.empty() && n[0] == '/') n.erase(0, 1);
    if (has(n)) return n;
    return absl::NotFoundError(absl::StrCat(path, ": no dataset named '", wanted, "' (", listing(), ")"));
  }
  if (has("records")) return std::string("records");
  if (has("records_0")) return std::string("records_0");
  if (names.size() == 1) return names[0];  // the only one, as for an NPZ with one member
  return absl::NotFoundError(absl::StrCat(path, ": no dataset named 'records' or 'records_0' and more than one "
                                          "other: choose one by its name (", listing(), ")"));
}

std::string hex_prefix(const std::string& path, uint64_t size) {
  auto f = detail::File::open(path);
  if (!f.ok()) return "unreadable bytes";
  std::byte buf[8];
  const size_t n = static_cast<size_t>(std::min<uint64_t>(size, 8));
  if (!f->read_exact(0, std::span<std::byte>(buf, n), "signature").ok()) return "unreadable bytes";
  std::string s = "bytes";
  for (size_t i = 0; i < n; ++i) absl::StrAppend(&s, " ", absl::Hex(static_cast<uint8_t>(buf[i]), absl::kZeroPad2));
  return s;
}

struct StoredChunk {
  std::vector<uint64_t> coord;  // element offset of the chunk's first element
  uint64_t addr = 0;
  uint64_t size = 0;
  uint32_t mask = 0;
};

// libhdf5 before 1.14 answers chunk queries by scanning the chunk index, so
// listing n chunks costs O(n^2); past this many we read through the library.
constexpr uint64_t kMaxChunksWithoutIter = 2048;

#if H5_VERSION_GE(1, 14, 0)
int chunk_iter_cb(const hsize_t* offset, unsigned mask, haddr_t addr, hsize_t size, void* data) {
  auto* v = static_cast<std::pair<size_t, std::vector<StoredChunk>*>*>(data);
  StoredChunk c;
  c.coord.assign(offset, offset + v->first);
  c.addr = addr;
  c.size = size;
  c.mask = mask;
  v->second->push_back(std::move(c));
  return H5_ITER_CONT;
}
#endif

// Every stored chunk of `dset`, in one pass where libhdf5 allows it. Sets
// `why` (and lists nothing) when the table is too costly to list.
absl::Status list_chunks(const std::string& path, const std::string& name, hid_t dset, size_t rank,
                         std::vector<StoredChunk>& out, std::string& why) {
#if H5_VERSION_GE(1, 14, 0)
  std::pair<size_t, std::vector<StoredChunk>*> data{rank, &out};
  if (H5Dchunk_iter(dset, H5P_DEFAULT, chunk_iter_cb, &data) < 0) {
    return h5_fail(path, absl::StrCat("the chunk index of dataset '", name, "'"));
  }
  (void)why;
#else
  hsize_t nchunks = 0;
  Hid fspace(H5Dget_space(dset), H5Sclose);
  if (!fspace.ok() || H5Dget_num_chunks(dset, fspace.get(), &nchunks) < 0) {
    return h5_fail(path, absl::StrCat("the chunk index of dataset '", name, "'"));
  }
  if (nchunks > kMaxChunksWithoutIter) {
    why = absl::StrCat(nchunks, " chunks, and libhdf5 ", H5_VERS_MAJOR, ".", H5_VERS_MINOR,
                       " can only list a chunk table in quadratic time (H5Dchunk_iter needs 1.14)");
    return absl::OkStatus();
  }
  std::vector<hsize_t> coord(rank);
  for (hsize_t i = 0; i < nchunks; ++i) {
    StoredChunk c;
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info(dset, fspace.get(), i, coord.data(), &mask, &addr, &size) < 0) {
      return h5_fail(path, absl::StrCat("chunk ", i, " of the chunk index of dataset '", name, "'"));
    }
    c.coord.assign(coord.begin(), coord.end());
    c.addr = addr;
    c.size = size;
    c.mask = mask;
    out.push_back(std::move(c));
  }
#endif
  return absl::OkStatus();
}

// 0 or `userblock`: what to add to libhdf5's chunk addresses to get file
// offsets, found by comparing the first stored chunk with H5Dread_chunk.
absl::StatusOr<uint64_t> chunk_address_shift(const std::string& path, hid_t dset, const std::vector<ChunkEntry>& table,
                                             const std::vector<uint64_t>& grid, const std::vector<uint64_t>& chunk,
                                             uint64_t userblock, uint64_t file_size) {
  uint64_t c = 0;
  while (!table[c].stored) ++c;
  const ChunkEntry& e = table[c];
  std::vector<hsize_t> coord(grid.size());
  uint64_t rem = c;
  for (size_t d = grid.size(); d-- > 0;) {
    coord[d] = (rem % grid[d]) * chunk[d];
    rem /= grid[d];
  }
  std::vector<std::byte> lib(e.size), disk(e.size);
  uint32_t filters = 0;
  if (H5Dread_chunk(dset, H5P_DEFAULT, coord.data(), &filters, lib.data()) < 0) {
    return h5_fail(path, e.addr, "a chunk that H5Dread_chunk can read");
  }
  DLFEED_ASSIGN_OR_RETURN(detail::File f, detail::File::open(path));
  for (uint64_t shift : {userblock, uint64_t{0}}) {
    if (e.addr + shift + e.size > file_size) continue;
    if (f.read_exact(e.addr + shift, disk, "chunk").ok() && disk == lib) return shift;
  }
  return format_error(path, e.addr, "the chunk libhdf5 reports at this address (with or without the user block)",
                      "different bytes");
}

}  // namespace

absl::StatusOr<std::vector<std::string>> hdf5_dataset_names(const std::string& path) {
  DLFEED_RETURN_IF_ERROR(detail::File::open(path).status());
  H5Lock lock;
  if (H5Fis_hdf5(path.c_str()) <= 0) return h5_fail(path, "an HDF5 file (signature \\211HDF\\r\\n\\032\\n)");
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
#if H5_VERSION_GE(1, 10, 7)
  H5Pset_file_locking(fapl.get(), true, true);
#endif
  Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file.ok()) return h5_fail(path, "an HDF5 file libhdf5 can open");
  std::vector<std::string> names;
  list_datasets(file.get(), "", 0, names);
  return names;
}

absl::StatusOr<SampleIndex> open_hdf5(const std::string& path, const FormatOptions& options) {
  uint64_t file_size = 0;
  {
    DLFEED_ASSIGN_OR_RETURN(detail::File f, detail::File::open(path));
    file_size = f.size();
  }
  constexpr absl::string_view kSignature = "an HDF5 file (signature \\211HDF\\r\\n\\032\\n)";
  if (file_size == 0) return format_error(path, 0, kSignature, "an empty file");

  H5Lock lock;
  htri_t is = H5Fis_hdf5(path.c_str());
  if (is == 0) return format_error(path, 0, kSignature, hex_prefix(path, file_size));
  if (is < 0) return h5_fail(path, kSignature);

  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
#if H5_VERSION_GE(1, 10, 7)
  H5Pset_file_locking(fapl.get(), true, true);  // do not fail on file systems without locks
#endif
  Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file.ok()) return h5_fail(path, "an HDF5 file libhdf5 can open");

  std::vector<std::string> names;
  DLFEED_ASSIGN_OR_RETURN(std::string name, pick_dataset(path, file.get(), options.name, names));
  Hid dset(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dset.ok()) return h5_fail(path, absl::StrCat("dataset '", name, "' that libhdf5 can open"));

  DatasetGeometry g;
  g.path = path;
  g.name = name;

  // Element type.
  Hid type(H5Dget_type(dset.get()), H5Tclose);
  if (!type.ok()) return h5_fail(path, absl::StrCat("the type of dataset '", name, "'"));
  DLFEED_ASSIGN_OR_RETURN(g.dtype, dtype_of(path, name, type.get()));

  // Shape.
  Hid space(H5Dget_space(dset.get()), H5Sclose);
  if (!space.ok()) return h5_fail(path, absl::StrCat("the dataspace of dataset '", name, "'"));
  H5S_class_t sclass = H5Sget_simple_extent_type(space.get());
  int rank = H5Sget_simple_extent_ndims(space.get());
  if (sclass != H5S_SIMPLE || rank < 1) {
    return file_error(path, absl::StrCat("dataset '", name, "' with at least one dimension (samples along axis 0)"),
                        sclass == H5S_NULL ? "a null dataspace" : "a 0-dimensional (scalar) dataset");
  }
  std::vector<hsize_t> hdims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), hdims.data(), nullptr);
  g.dims.assign(hdims.begin(), hdims.end());
  const uint64_t n = g.dims[0];
  g.sample_elems = 1;
  for (size_t d = 1; d < g.dims.size(); ++d) {
    if (!mul_ok(g.sample_elems, g.dims[d], &g.sample_elems)) g.sample_elems = UINT64_MAX;
  }
  if (g.sample_elems == UINT64_MAX || !mul_ok(g.sample_elems, g.dtype.size, &g.sample_bytes) ||
      g.sample_bytes > kMaxSampleBytes) {
    return file_error(path, absl::StrCat("samples of at most ", kMaxSampleBytes, " bytes in dataset '", name, "'"),
                        absl::StrCat("shape ", shape_str(g.full_shape()), " of ", g.dtype.name()));
  }
  if (n > kMaxSamples) {
    return file_error(path, absl::StrCat("at most ", kMaxSamples, " samples in dataset '", name, "'"),
                        absl::StrCat("shape ", shape_str(g.full_shape())));
  }

  // Fill value, in the dataset's own type.
  Hid dcpl(H5Dget_create_plist(dset.get()), H5Pclose);
  if (!dcpl.ok()) return h5_fail(path, absl::StrCat("the creation properties of dataset '", name, "'"));
  g.fill.assign(g.dtype.size, std::byte{0});
  H5D_fill_value_t fv;
  if (H5Pfill_value_defined(dcpl.get(), &fv) >= 0 && fv == H5D_FILL_VALUE_USER_DEFINED) {
    if (H5Pget_fill_value(dcpl.get(), type.get(), g.fill.data()) < 0) {
      H5Eclear2(H5E_DEFAULT);
      g.fill.assign(g.dtype.size, std::byte{0});
    }
  }

  // Layout and filters.
  H5D_layout_t layout = H5Pget_layout(dcpl.get());
  std::vector<Filter> pipeline;
  uint32_t shuffle_size = g.dtype.size;
  std::vector<std::string> filter_names;
  int nfilters = layout == H5D_CHUNKED ? H5Pget_nfilters(dcpl.get()) : 0;
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0, cd[8] = {};
    size_t ncd = 8;
    char fname[64] = {};
    H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &ncd, cd, sizeof fname, fname, nullptr);
    std::string label = filter_name(id, fname);
    if (id == H5Z_FILTER_DEFLATE && ncd >= 1) label = absl::StrCat("deflate(", cd[0], ")");
    filter_names.push_back(label);
    if (id == H5Z_FILTER_SHUFFLE && pipeline.empty()) {
      pipeline.push_back(Filter::kShuffle);
      if (ncd >= 1 && cd[0] > 0) shuffle_size = cd[0];
    } else if (id == H5Z_FILTER_DEFLATE &&
               std::find(pipeline.begin(), pipeline.end(), Filter::kDeflate) == pipeline.end()) {
      pipeline.push_back(Filter::kDeflate);
    } else if (g.reason.empty()) {
      g.reason = absl::StrCat("filter ", filter_name(id, fname), " is not decoded by dlfeed");
    }
  }
  g.filters = absl::StrJoin(filter_names, "+");
  std::vector<hsize_t> hchunk;
  if (layout == H5D_CHUNKED) {
    hchunk.resize(static_cast<size_t>(rank));
    if (H5Pget_chunk(dcpl.get(), rank, hchunk.data()) != rank) {
      return h5_fail(path, absl::StrCat("the chunk shape of dataset '", name, "'"));
    }
    g.chunk.assign(hchunk.begin(), hchunk.end());
  }
  if (g.reason.empty()) {
    if (H5Pget_external_count(dcpl.get()) > 0) {
      g.reason = "the data is in external files";
    } else if (layout == H5D_COMPACT) {
      g.reason = "compact layout (the data lives inside the object header)";
    } else if (layout == H5D_VIRTUAL) {
      g.reason = "virtual dataset (mapped from other datasets)";
    } else if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED) {
      g.reason = "an unknown storage layout";
    }
  }
  if (g.reason.empty() && layout == H5D_CHUNKED) {
    unsigned opts = 0;
    if (!pipeline.empty() && H5Pget_chunk_opts(dcpl.get(), &opts) >= 0 &&
        (opts & H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS)) {
      g.reason = "partial edge chunks are stored unfiltered";
    }
  }

  SampleIndex index;
  index.files = {path};
  index.file_begin = {0, n};
  index.samples.resize(n);
  for (uint64_t k = 0; k < n; ++k) {
    SampleRef& r = index.samples[k];
    r.file = 0;
    r.source = 0;
    r.item = k;
    r.shape = g.sample_shape();
    r.dtype = g.dtype;
  }

  // Where the bytes live relative to file offsets (a user block shifts HDF5
  // addresses; H5Dget_offset already adds it).
  hsize_t userblock = 0;
  {
    Hid fcpl(H5Fget_create_plist(file.get()), H5Pclose);
    if (fcpl.ok()) H5Pget_userblock(fcpl.get(), &userblock);
  }

  if (g.reason.empty() && layout == H5D_CONTIGUOUS) {
    haddr_t off = H5Dget_offset(dset.get());
    H5Eclear2(H5E_DEFAULT);
    const bool allocated = off != HADDR_UNDEF;
    if (allocated) {
      uint64_t total = 0, end = 0;
      if (!mul_ok(n, g.sample_bytes, &total) || !add_ok(off, total, &end) || end > file_size) {
        return format_error(path, off,
                            absl::StrCat("the ", shape_str(g.full_shape()), " ", g.dtype.name(), " data of '", name,
                                         "' within the file of ", file_size, " bytes"),
                            absl::StrCat("it would end at offset ", end == 0 ? UINT64_MAX : end));
      }
      for (uint64_t k = 0; k < n; ++k) {
        if (g.sample_bytes > 0) index.samples[k].extents.push_back({off + k * g.sample_bytes, g.sample_bytes});
      }
    }
    index.sources.push_back(std::make_unique<ContiguousSource>(std::move(g), allocated));
    return index;
  }

  if (g.reason.empty() && layout == H5D_CHUNKED) {
    // The chunk grid, and the stored chunk of every cell.
    uint64_t cells = 1, chunk_elems = 1, chunk_bytes = 0;
    bool fits = true;
    for (size_t d = 0; d < g.dims.size(); ++d) {
      if (g.chunk[d] == 0) fits = false;
      const uint64_t gd = g.chunk[d] == 0 ? 0 : (g.dims[d] + g.chunk[d] - 1) / g.chunk[d];
      fits = fits && mul_ok(cells, gd, &cells) && mul_ok(chunk_elems, g.chunk[d], &chunk_elems);
    }
    fits = fits && mul_ok(chunk_elems, g.dtype.size, &chunk_bytes) && chunk_bytes <= kMaxChunkBytes;
    if (!fits) {
      return file_error(path, absl::StrCat("chunks of at most ", kMaxChunkBytes, " bytes in dataset '", name, "'"),
                          absl::StrCat("chunk shape ", absl::StrJoin(g.chunk, "x")));
    }
    if (cells > kMaxChunkCells) {
      g.reason = absl::StrCat("its chunk grid has ", cells, " cells, more than dlfeed indexes");
    } else {
      std::vector<ChunkEntry> table(cells);
      const size_t r = g.dims.size();
      std::vector<uint64_t> grid(r);
      for (size_t d = 0; d < r; ++d) grid[d] = (g.dims[d] + g.chunk[d] - 1) / g.chunk[d];
      std::vector<StoredChunk> stored;
      std::string why;
      DLFEED_RETURN_IF_ERROR(list_chunks(path, name, dset.get(), r, stored, why));
      if (!why.empty()) g.reason = why;
      bool any_stored = false;
      for (const StoredChunk& sc : stored) {
        if (!g.reason.empty()) break;
        uint64_t c = 0;
        bool inside = true;
        for (size_t d = 0; d < r; ++d) {
          const uint64_t gi = sc.coord[d] / g.chunk[d];
          inside = inside && sc.coord[d] % g.chunk[d] == 0 && gi < grid[d];
          c = c * grid[d] + gi;
        }
        if (!inside) {
          return format_error(path, sc.addr, absl::StrCat("a chunk of '", name, "' on the chunk grid"),
                              absl::StrCat("a chunk at element offset ", absl::StrJoin(sc.coord, ",")));
        }
        const unsigned mask = sc.mask;
        const haddr_t addr = sc.addr;
        const hsize_t size = sc.size;
        if (addr == HADDR_UNDEF || size == 0) continue;
        ChunkEntry& e = table[c];
        e.addr = addr;
        e.size = size;
        e.mask = mask;
        e.stored = true;
        any_stored = true;
        uint64_t end = 0;
        if (!add_ok(e.addr, e.size, &end) || end > file_size) {
          return format_error(path, e.addr,
                              absl::StrCat("a chunk of '", name, "' within the file of ", file_size, " bytes"),
                              absl::StrCat(e.size, " bytes ending at offset ", end));
        }
        bool raw = true;
        for (size_t i = 0; i < pipeline.size(); ++i) raw = raw && (mask & (1u << i));
        if (raw && e.size != chunk_bytes) {
          return format_error(path, e.addr, absl::StrCat("an unfiltered chunk of '", name, "' of ", chunk_bytes, " bytes"),
                              absl::StrCat(e.size, " bytes"));
        }
      }
      if (g.reason.empty()) {
      // libhdf5 versions differ on whether chunk addresses count a user
      // block; check one chunk against H5Dread_chunk and shift if needed.
      if (any_stored && userblock > 0) {
        DLFEED_ASSIGN_OR_RETURN(uint64_t shift, chunk_address_shift(path, dset.get(), table, grid, g.chunk,
                                                                    userblock, file_size));
        for (ChunkEntry& e : table) {
          uint64_t end = 0;
          if (!e.stored) continue;
          e.addr += shift;
          if (!add_ok(e.addr, e.size, &end) || end > file_size) {
            return format_error(path, e.addr,
                                absl::StrCat("a chunk of '", name, "' within the file of ", file_size, " bytes"),
                                absl::StrCat(e.size, " bytes ending at offset ", end));
          }
        }
      }
      auto src = std::make_unique<ChunkedSource>(std::move(g), std::move(pipeline), shuffle_size, std::move(table));
      for (uint64_t k = 0; k < n; ++k) {
        DLFEED_RETURN_IF_ERROR(src->extents_for(k, file_size, index.samples[k].extents));
      }
      index.sources.push_back(std::move(src));
      return index;
      }
    }
  }

  // Fallback: H5Dread through libhdf5.
  warn_fallback_once(path, name, g.reason);
  index.sources.push_back(std::make_unique<LibrarySource>(std::move(g)));
  return index;
}

}  // namespace dlfeed
