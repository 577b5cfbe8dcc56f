// Writing HDF5 files with libhdf5: the generator's files (as h5py and the
// DLIO benchmark write them) and, for the test suite, single datasets with
// exactly the storage a test asks for.
#include <hdf5.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dlfeed/error.h"
#include "dlfeed/gen/generate.h"

namespace dlfeed {
namespace detail {
std::mutex& hdf5_mutex();  // defined in src/format/hdf5.cc
}  // namespace detail

namespace gen {
namespace {

class H5Lock {
 public:
  H5Lock() : lock_(detail::hdf5_mutex()) {
    if (H5Eget_auto2(H5E_DEFAULT, &old_func_, &old_data_) < 0) restore_ = false;
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~H5Lock() {
    if (restore_) H5Eset_auto2(H5E_DEFAULT, old_func_, old_data_);
  }

 private:
  std::lock_guard<std::mutex> lock_;
  H5E_auto2_t old_func_ = nullptr;
  void* old_data_ = nullptr;
  bool restore_ = true;
};

class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid(hid_t id, Closer close) : id_(id), close_(close) {}
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  Closer close_;
};

herr_t collect_error(unsigned, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<std::vector<std::string>*>(data);
  if (e->desc != nullptr && e->desc[0] != '\0' && out->size() < 3) out->push_back(e->desc);
  return 0;
}

absl::Status h5_fail(const std::string& path, absl::string_view what) {
  std::vector<std::string> msgs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &msgs);
  H5Eclear2(H5E_DEFAULT);
  return absl::InternalError(absl::StrCat(path, ": writing HDF5: ", what, " failed: ",
                                          msgs.empty() ? "no detail from libhdf5" : absl::StrJoin(msgs, "; ")));
}

// The HDF5 type h5py would use for `t` (bool: an int8 enum FALSE/TRUE).
hid_t make_type(DType t) {
  const bool be = t.big_endian && t.size > 1;
  switch (t.kind) {
    case DType::Kind::kBool: {
      hid_t e = H5Tenum_create(H5T_NATIVE_INT8);
      int8_t f = 0, tr = 1;
      H5Tenum_insert(e, "FALSE", &f);
      H5Tenum_insert(e, "TRUE", &tr);
      return e;
    }
    case DType::Kind::kInt:
      switch (t.size) {
        case 1: return H5Tcopy(H5T_STD_I8LE);
        case 2: return H5Tcopy(be ? H5T_STD_I16BE : H5T_STD_I16LE);
        case 4: return H5Tcopy(be ? H5T_STD_I32BE : H5T_STD_I32LE);
        case 8: return H5Tcopy(be ? H5T_STD_I64BE : H5T_STD_I64LE);
      }
      break;
    case DType::Kind::kUInt:
      switch (t.size) {
        case 1: return H5Tcopy(H5T_STD_U8LE);
        case 2: return H5Tcopy(be ? H5T_STD_U16BE : H5T_STD_U16LE);
        case 4: return H5Tcopy(be ? H5T_STD_U32BE : H5T_STD_U32LE);
        case 8: return H5Tcopy(be ? H5T_STD_U64BE : H5T_STD_U64LE);
      }
      break;
    case DType::Kind::kFloat:
      switch (t.size) {
        case 2: {  // IEEE binary16, built the way h5py builds it
          hid_t h = H5Tcopy(H5T_IEEE_F32LE);
          H5Tset_fields(h, 15, 10, 5, 0, 10);
          H5Tset_size(h, 2);
          H5Tset_ebias(h, 15);
          H5Tset_order(h, be ? H5T_ORDER_BE : H5T_ORDER_LE);
          return h;
        }
        case 4: return H5Tcopy(be ? H5T_IEEE_F32BE : H5T_IEEE_F32LE);
        case 8: return H5Tcopy(be ? H5T_IEEE_F64BE : H5T_IEEE_F64LE);
      }
      break;
  }
  return H5I_INVALID_HID;
}

hid_t create_file(const std::string& path, bool latest, uint64_t userblock) {
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (latest) H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  Hid fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  if (userblock > 0) H5Pset_userblock(fcpl.get(), userblock);
  return H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get());
}

hid_t create_dataset(hid_t file, const std::string& name, hid_t type, hid_t space, hid_t dcpl) {
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  return H5Dcreate2(file, name.c_str(), type, space, lcpl.get(), dcpl, H5P_DEFAULT);
}

// Writes rows [row, row + rows) of a dataset of shape dims from `buf`.
herr_t write_rows(hid_t dset, hid_t type, const std::vector<hsize_t>& dims, uint64_t row, uint64_t rows,
                  const void* buf) {
  std::vector<hsize_t> start(dims.size(), 0), count(dims);
  start[0] = row;
  count[0] = rows;
  Hid fspace(H5Dget_space(dset), H5Sclose);
  Hid mspace(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
  if (!fspace.ok() || !mspace.ok()) return -1;
  if (H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0) return -1;
  return H5Dwrite(dset, type, mspace.get(), fspace.get(), H5P_DEFAULT, buf);
}

}  // namespace

absl::Status write_hdf5_file(const FileSpec& spec) {
  if (spec.data_names.empty()) return absl::InvalidArgumentError(spec.path + ": no dataset names to write");
  uint64_t sample_elems = 1;
  for (int64_t d : spec.sample_shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(spec.path, ": sample shape ", shape_str(spec.sample_shape), " has an unknown dimension"));
    if (__builtin_mul_overflow(sample_elems, static_cast<uint64_t>(d), &sample_elems)) {
      return absl::InvalidArgumentError(absl::StrCat(spec.path, ": sample shape ", shape_str(spec.sample_shape), " too large"));
    }
  }
  const uint64_t sample_bytes = sample_elems * spec.dtype.size;
  const uint64_t n = spec.num_samples;
  std::vector<hsize_t> dims{n};
  for (int64_t d : spec.sample_shape) dims.push_back(static_cast<hsize_t>(d));

  // Filters need chunks; with none asked for, one sample per chunk.
  const bool deflate = spec.compression == Compression::kDeflate;
  uint64_t chunk_samples = spec.chunk_samples;
  if (chunk_samples == 0 && (deflate || spec.hdf5_shuffle)) chunk_samples = 1;
  chunk_samples = std::min<uint64_t>(chunk_samples, std::max<uint64_t>(n, 1));

  H5Lock lock;
  Hid file(create_file(spec.path, /*latest=*/true, 0), H5Fclose);
  if (!file.ok()) return h5_fail(spec.path, "creating the file");
  Hid type(make_type(spec.dtype), H5Tclose);
  if (!type.ok()) return h5_fail(spec.path, absl::StrCat("making the type ", spec.dtype.name()));
  Hid space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!space.ok() || !dcpl.ok()) return h5_fail(spec.path, "making the dataspace");
  if (chunk_samples > 0) {
    std::vector<hsize_t> chunk(dims);
    chunk[0] = chunk_samples;
    if (H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) < 0) {
      return h5_fail(spec.path, absl::StrCat("setting chunks of ", chunk_samples, " samples"));
    }
    if (spec.hdf5_shuffle && H5Pset_shuffle(dcpl.get()) < 0) return h5_fail(spec.path, "adding the shuffle filter");
    if (deflate && H5Pset_deflate(dcpl.get(), static_cast<unsigned>(std::clamp(spec.level, 0, 9))) < 0) {
      return h5_fail(spec.path, "adding the deflate filter");
    }
  }

  // Rows in batches of about 32 MiB, whole chunks at a time.
  uint64_t batch = std::max<uint64_t>(1, (uint64_t{32} << 20) / std::max<uint64_t>(sample_bytes, 1));
  if (chunk_samples > 0) batch = std::max<uint64_t>(chunk_samples, batch / chunk_samples * chunk_samples);
  batch = std::min<uint64_t>(batch, std::max<uint64_t>(n, 1));
  std::vector<std::byte> buf(batch * sample_bytes);

  for (const std::string& name : spec.data_names) {
    Hid dset(create_dataset(file.get(), name, type.get(), space.get(), dcpl.get()), H5Dclose);
    if (!dset.ok()) return h5_fail(spec.path, absl::StrCat("creating dataset '", name, "'"));
    for (uint64_t row = 0; row < n && sample_bytes > 0; row += batch) {
      const uint64_t rows = std::min(batch, n - row);
      for (uint64_t k = 0; k < rows; ++k) {
        fill_sample(spec.seed, spec.first_global_id + row + k, spec.dtype,
                    std::span<std::byte>(buf.data() + k * sample_bytes, sample_bytes));
      }
      if (write_rows(dset.get(), type.get(), dims, row, rows, buf.data()) < 0) {
        return h5_fail(spec.path, absl::StrCat("writing samples ", row, "..", row + rows - 1, " of '", name, "'"));
      }
    }
  }

  if (!spec.label_name.empty()) {
    std::vector<int64_t> labels(n, 0);
    if (!spec.zero_labels) {
      for (uint64_t k = 0; k < n; ++k) labels[k] = sample_label(spec.first_global_id + k);
    }
    hsize_t ldim = n;
    Hid lspace(H5Screate_simple(1, &ldim, nullptr), H5Sclose);
    Hid ltype(H5Tcopy(H5T_STD_I64LE), H5Tclose);
    Hid ldset(create_dataset(file.get(), spec.label_name, ltype.get(), lspace.get(), H5P_DEFAULT), H5Dclose);
    if (!ldset.ok()) return h5_fail(spec.path, absl::StrCat("creating dataset '", spec.label_name, "'"));
    if (n > 0 && H5Dwrite(ldset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) < 0) {
      return h5_fail(spec.path, absl::StrCat("writing '", spec.label_name, "'"));
    }
  }
  if (H5Fflush(file.get(), H5F_SCOPE_LOCAL) < 0) return h5_fail(spec.path, "flushing the file");
  return absl::OkStatus();
}

namespace internal {

/// For dlfeed's tests (declared there, not in a public header): writes one
/// dataset of `dims` holding `data` (C order, dtype's byte order) with exactly
/// the storage asked for. `options`, comma separated:
///   append          add to an existing file instead of creating it
///   earliest        oldest file format (v1 B-tree chunk index)
///   userblock=N     a user block of N bytes before the HDF5 data
///   chunk=AxBxC     chunked layout with these chunk dims
///   compact         compact layout
///   shuffle, deflate=L, fletcher32   filters, in this order
///   rows=A:B        write only rows A..B-1 (the rest stays unwritten)
///   fill=V          fill value: every byte of an element is V
///   direct          write chunks with H5Dwrite_chunk: even chunks stored raw
///                   with a filter mask that skips every filter, odd chunks
///                   filtered here (shuffle, zlib) with mask 0
///   string          a fixed-length 8-byte string dataset (data ignored)
///   scalar          a 0-dimensional dataset (dims ignored, data = one element)
absl::Status write_hdf5_custom(const std::string& path, const std::string& name, DType dtype,
                               const std::vector<uint64_t>& dims, std::span<const std::byte> data,
                               const std::string& options) {
  bool append = false, latest = true, compact = false, shuffle = false, fletcher = false, direct = false;
  bool string_type = false, scalar = false;
  int deflate = -1;
  int fill = -1;
  uint64_t userblock = 0, row_begin = 0, row_end = dims.empty() ? 0 : dims[0];
  std::vector<hsize_t> chunk;
  for (absl::string_view opt : absl::StrSplit(options, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(opt, absl::MaxSplits('=', 1));
    if (kv.first == "append") append = true;
    else if (kv.first == "earliest") latest = false;
    else if (kv.first == "compact") compact = true;
    else if (kv.first == "shuffle") shuffle = true;
    else if (kv.first == "fletcher32") fletcher = true;
    else if (kv.first == "direct") direct = true;
    else if (kv.first == "string") string_type = true;
    else if (kv.first == "scalar") scalar = true;
    else if (kv.first == "deflate") { if (!absl::SimpleAtoi(kv.second, &deflate)) deflate = 4; }
    else if (kv.first == "fill") { if (!absl::SimpleAtoi(kv.second, &fill)) fill = 0; }
    else if (kv.first == "userblock") { if (!absl::SimpleAtoi(kv.second, &userblock)) userblock = 512; }
    else if (kv.first == "chunk") {
      for (absl::string_view c : absl::StrSplit(kv.second, 'x')) {
        uint64_t v = 0;
        if (!absl::SimpleAtoi(c, &v)) return absl::InvalidArgumentError(absl::StrCat("bad chunk option ", opt));
        chunk.push_back(v);
      }
    } else if (kv.first == "rows") {
      std::pair<absl::string_view, absl::string_view> ab = absl::StrSplit(kv.second, ':');
      if (!absl::SimpleAtoi(ab.first, &row_begin) || !absl::SimpleAtoi(ab.second, &row_end)) {
        return absl::InvalidArgumentError(absl::StrCat("bad rows option ", opt));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown option ", opt));
    }
  }

  H5Lock lock;
  hid_t fid = append ? H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT) : create_file(path, latest, userblock);
  Hid file(fid, H5Fclose);
  if (!file.ok()) return h5_fail(path, "opening the file");
  Hid type(string_type ? H5Tcopy(H5T_C_S1) : make_type(dtype), H5Tclose);
  if (string_type) H5Tset_size(type.get(), 8);
  std::vector<hsize_t> hdims(dims.begin(), dims.end());
  Hid space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(hdims.size()), hdims.data(), nullptr),
            H5Sclose);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!type.ok() || !space.ok() || !dcpl.ok()) return h5_fail(path, "making type and dataspace");
  if (compact) H5Pset_layout(dcpl.get(), H5D_COMPACT);
  if (!chunk.empty()) {
    if (H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) < 0) return h5_fail(path, "H5Pset_chunk");
    if (shuffle) H5Pset_shuffle(dcpl.get());
    if (deflate >= 0) H5Pset_deflate(dcpl.get(), static_cast<unsigned>(deflate));
    if (fletcher) H5Pset_fletcher32(dcpl.get());
  }
  if (fill >= 0) {
    std::vector<uint8_t> fv(H5Tget_size(type.get()), static_cast<uint8_t>(fill));
    H5Pset_fill_value(dcpl.get(), type.get(), fv.data());
  }
  Hid dset(create_dataset(file.get(), name, type.get(), space.get(), dcpl.get()), H5Dclose);
  if (!dset.ok()) return h5_fail(path, absl::StrCat("creating dataset '", name, "'"));
  if (string_type) return absl::OkStatus();
  if (scalar) {
    if (H5Dwrite(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) < 0) return h5_fail(path, "write");
    return absl::OkStatus();
  }

  const uint64_t es = dtype.size;
  uint64_t row_elems = 1;
  for (size_t d = 1; d < dims.size(); ++d) row_elems *= dims[d];
  if ((row_end > row_begin || direct) && data.size() != (dims.empty() ? 0 : dims[0]) * row_elems * es) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": test data has ", data.size(), " bytes, dims need ",
                                                   dims[0] * row_elems * es));
  }
  if (!direct) {
    if (row_end > row_begin &&
        write_rows(dset.get(), type.get(), hdims, row_begin, row_end - row_begin, data.data() + row_begin * row_elems * es) < 0) {
      return h5_fail(path, "H5Dwrite");
    }
    return absl::OkStatus();
  }

  // Direct chunk writes: gather every chunk (zero padded at the edges).
  const size_t r = dims.size();
  uint64_t chunk_elems = 1, cells = 1;
  std::vector<uint64_t> grid(r);
  for (size_t d = 0; d < r; ++d) {
    grid[d] = (dims[d] + chunk[d] - 1) / chunk[d];
    cells *= grid[d];
    chunk_elems *= chunk[d];
  }
  std::vector<std::byte> cbuf(chunk_elems * es), sbuf(cbuf.size());
  std::vector<hsize_t> origin(r);
  for (uint64_t c = 0; c < cells; ++c) {
    uint64_t rem = c;
    for (size_t d = r; d-- > 0;) {
      origin[d] = (rem % grid[d]) * chunk[d];
      rem /= grid[d];
    }
    std::fill(cbuf.begin(), cbuf.end(), std::byte{0});
    for (uint64_t e = 0; e < chunk_elems; ++e) {  // element by element: tests use small data
      uint64_t erem = e, src = 0, stride = 1;
      bool inside = true;
      for (size_t d = r; d-- > 0;) {
        const uint64_t i = origin[d] + erem % chunk[d];
        erem /= chunk[d];
        inside = inside && i < dims[d];
        src += i * stride;
        stride *= dims[d];
      }
      if (inside) std::memcpy(cbuf.data() + e * es, data.data() + src * es, es);
    }
    uint32_t mask = 0;
    std::vector<std::byte> out;
    const unsigned nfilters = static_cast<unsigned>(H5Pget_nfilters(dcpl.get()));
    if (c % 2 == 0) {
      mask = nfilters >= 32 ? 0xffffffffu : (1u << nfilters) - 1;
      out = cbuf;
    } else {
      const std::byte* cur = cbuf.data();
      if (shuffle) {
        const uint64_t ne = chunk_elems;
        for (uint64_t b = 0; b < es; ++b) {
          for (uint64_t i = 0; i < ne; ++i) sbuf[b * ne + i] = cbuf[i * es + b];
        }
        cur = sbuf.data();
      }
      if (deflate >= 0) {
        uLongf len = compressBound(static_cast<uLong>(cbuf.size()));
        out.resize(len);
        if (compress2(reinterpret_cast<Bytef*>(out.data()), &len, reinterpret_cast<const Bytef*>(cur),
                      static_cast<uLong>(cbuf.size()), deflate) != Z_OK) {
          return absl::InternalError("compress2 failed");
        }
        out.resize(len);
      } else {
        out.assign(cur, cur + cbuf.size());
      }
    }
    if (H5Dwrite_chunk(dset.get(), H5P_DEFAULT, mask, origin.data(), out.size(), out.data()) < 0) {
      return h5_fail(path, "H5Dwrite_chunk");
    }
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace gen
}  // namespace dlfeed
