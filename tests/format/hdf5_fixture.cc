// SPDX-License-Identifier: Apache-2.0
// Test fixture: writes single HDF5 datasets with exactly the storage a test
// asks for (layouts, filters, fill values, user blocks, odd types), with
// libhdf5 directly. Linked into hdf5_test only.
#include <hdf5.h>
#include <zlib.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dlfeed/dtype.h"
#include "format/hdf5_util.h"

namespace dlfeed::inline DLFEED_ABI::gen {
namespace {
using detail::h5::create_dataset;
using detail::h5::create_file;
using detail::h5::H5Lock;
using detail::h5::Hid;
using detail::h5::make_type;
using detail::h5::write_failed;
using detail::h5::write_rows;

}  // namespace

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
    if (kv.first == "append")
      append = true;
    else if (kv.first == "earliest")
      latest = false;
    else if (kv.first == "compact")
      compact = true;
    else if (kv.first == "shuffle")
      shuffle = true;
    else if (kv.first == "fletcher32")
      fletcher = true;
    else if (kv.first == "direct")
      direct = true;
    else if (kv.first == "string")
      string_type = true;
    else if (kv.first == "scalar")
      scalar = true;
    else if (kv.first == "deflate") {
      if (!absl::SimpleAtoi(kv.second, &deflate)) deflate = 4;
    } else if (kv.first == "fill") {
      if (!absl::SimpleAtoi(kv.second, &fill)) fill = 0;
    } else if (kv.first == "userblock") {
      if (!absl::SimpleAtoi(kv.second, &userblock)) userblock = 512;
    } else if (kv.first == "chunk") {
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
  if (!file.ok()) return write_failed(path, "opening the file");
  Hid type(string_type ? H5Tcopy(H5T_C_S1) : make_type(dtype), H5Tclose);
  if (string_type) H5Tset_size(type.get(), 8);
  std::vector<hsize_t> hdims(dims.begin(), dims.end());
  Hid space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(hdims.size()), hdims.data(), nullptr),
            H5Sclose);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!type.ok() || !space.ok() || !dcpl.ok()) return write_failed(path, "making type and dataspace");
  if (compact) H5Pset_layout(dcpl.get(), H5D_COMPACT);
  if (!chunk.empty()) {
    if (H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) < 0)
      return write_failed(path, "H5Pset_chunk");
    if (shuffle) H5Pset_shuffle(dcpl.get());
    if (deflate >= 0) H5Pset_deflate(dcpl.get(), static_cast<unsigned>(deflate));
    if (fletcher) H5Pset_fletcher32(dcpl.get());
  }
  if (fill >= 0) {
    std::vector<uint8_t> fv(H5Tget_size(type.get()), static_cast<uint8_t>(fill));
    H5Pset_fill_value(dcpl.get(), type.get(), fv.data());
  }
  Hid dset(create_dataset(file.get(), name, type.get(), space.get(), dcpl.get()), H5Dclose);
  if (!dset.ok()) return write_failed(path, absl::StrCat("creating dataset '", name, "'"));
  if (string_type) return absl::OkStatus();
  if (scalar) {
    if (H5Dwrite(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) < 0)
      return write_failed(path, "write");
    return absl::OkStatus();
  }

  const uint64_t es = dtype.size;
  uint64_t row_elems = 1;
  for (size_t d = 1; d < dims.size(); ++d) row_elems *= dims[d];
  if ((row_end > row_begin || direct) && data.size() != (dims.empty() ? 0 : dims[0]) * row_elems * es) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": test data has ", data.size(), " bytes, dims need ", dims[0] * row_elems * es));
  }
  if (!direct) {
    if (row_end > row_begin && write_rows(dset.get(), type.get(), hdims, row_begin, row_end - row_begin,
                                          data.data() + row_begin * row_elems * es) < 0) {
      return write_failed(path, "H5Dwrite");
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
      return write_failed(path, "H5Dwrite_chunk");
    }
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace dlfeed::gen
