// SPDX-License-Identifier: Apache-2.0
// Fuzz target: HDF5 extent resolution.
//
// libhdf5 parses HDF5 metadata; it is not ours to fuzz (mutating whole files
// crashes it inside its own B-tree and symbol-table code within seconds, e.g.
// a NULL read in H5F__accum_read under H5Gget_info). What dlfeed owns is what
// it does with the answers: H5Dget_offset and the storage size of contiguous
// data, H5Dget_chunk_info's addresses and sizes of chunks, then reading and
// inflating/unshuffling those bytes itself. So this target mutates exactly
// those values in valid files and leaves the rest of the file alone.
//
// At start it writes base files with libhdf5 (contiguous, chunked, deflate,
// shuffle + deflate, a partial last chunk; the default file format, as h5py
// writes it, and the latest one) and finds where each data address and size
// is stored. An input is <base index byte> then 9-byte patches
// <field selector><8 bytes>: the selected field gets the value (or, with the
// selector's top bit, its old value plus a small signed delta). dlfeed must
// then refuse the file with an error naming it, or index samples whose
// extents lie inside the file and decode to the bytes announced.
#include <hdf5.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "dlfeed/format/format.h"
#include "fuzz_util.h"

namespace {

struct Field {
  size_t pos;
  int width;  // 4 or 8 bytes, little endian
};
struct Base {
  std::string bytes;
  std::vector<Field> fields;
};

uint64_t load(const std::string& s, size_t pos, int width) {
  uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(s[pos + i]);
  return v;
}
void store(std::string& s, size_t pos, int width, uint64_t v) {
  for (int i = 0; i < width; ++i) s[pos + i] = static_cast<char>(v >> (8 * i));
}

// Writes records (6 x 4 x 3 bytes, with `chunk` rows per chunk, 0 for
// contiguous) and labels (6 int64) with libhdf5.
std::string write_base(const std::string& path, bool latest, hsize_t chunk, bool deflate, bool shuffle) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (latest) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  const hsize_t dims[3] = {6, 4, 3};
  hid_t space = H5Screate_simple(3, dims, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (chunk > 0) {
    const hsize_t cdims[3] = {chunk, 4, 3};
    H5Pset_chunk(dcpl, 3, cdims);
    if (shuffle) H5Pset_shuffle(dcpl);
    if (deflate) H5Pset_deflate(dcpl, 4);
  }
  unsigned char data[72];
  for (int i = 0; i < 72; ++i) data[i] = static_cast<unsigned char>(i * 37 + 11);
  hid_t d = H5Dcreate2(f, "records", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(d);
  const hsize_t ldims[1] = {6};
  hid_t lspace = H5Screate_simple(1, ldims, nullptr);
  int64_t labels[6] = {0, 1, 2, 3, 4, 5};
  hid_t l = H5Dcreate2(f, "labels", H5T_STD_I64LE, lspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(l, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels);
  H5Dclose(l);
  H5Sclose(lspace);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Where the file stores each dataset's data address(es) and size(s).
std::vector<Field> find_fields(const std::string& path, const std::string& bytes) {
  std::vector<std::pair<uint64_t, uint64_t>> extents;  // address, size
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  for (const char* name : {"records", "labels"}) {
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t dcpl = H5Dget_create_plist(d);
    if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
      hid_t space = H5Dget_space(d);
      hsize_t n = 0;
      H5Dget_num_chunks(d, space, &n);
      for (hsize_t i = 0; i < n; ++i) {
        hsize_t offset[3];
        unsigned mask = 0;
        haddr_t addr = 0;
        hsize_t size = 0;
        H5Dget_chunk_info(d, space, i, offset, &mask, &addr, &size);
        extents.emplace_back(addr, size);
      }
      H5Sclose(space);
    } else {
      extents.emplace_back(H5Dget_offset(d), H5Dget_storage_size(d));
    }
    H5Pclose(dcpl);
    H5Dclose(d);
  }
  H5Fclose(f);
  std::vector<Field> fields;
  for (const auto& [addr, size] : extents) {
    for (size_t p = 0; p + 8 <= bytes.size(); ++p) {
      if (load(bytes, p, 8) != addr) continue;
      fields.push_back({p, 8});
      // The size is stored near its address (layout message: address then
      // size; v1 B-tree key: size, filter mask, offsets, then the address).
      const size_t lo = p >= 64 ? p - 64 : 0, hi = std::min(bytes.size(), p + 24);
      for (size_t q = lo; q + 4 <= hi; ++q) {
        if (q + 8 <= hi && load(bytes, q, 8) == size)
          fields.push_back({q, 8});
        else if (load(bytes, q, 4) == size)
          fields.push_back({q, 4});
      }
    }
  }
  return fields;
}

std::vector<Base>& bases() {
  static std::vector<Base> b = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    std::vector<Base> out;
    const std::string path = dlfeed::fuzz::scratch() + "/base.h5";
    struct Spec {
      hsize_t chunk;
      bool deflate, shuffle;
    };
    for (bool latest : {false, true}) {
      for (Spec s : {Spec{0, false, false}, Spec{2, false, false}, Spec{2, true, false}, Spec{1, true, true},
                     Spec{4, false, false}}) {
        Base base;
        base.bytes = write_base(path, latest, s.chunk, s.deflate, s.shuffle);
        base.fields = find_fields(path, base.bytes);
        if (base.fields.empty()) dlfeed::fuzz::fail("hdf5 base file: no data address found in it");
        out.push_back(std::move(base));
      }
    }
    return out;
  }();
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  bases();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dlfeed;
  if (size < 1) return 0;
  const Base& base = bases()[data[0] % bases().size()];
  std::string bytes = base.bytes;
  for (size_t at = 1; at + 9 <= size; at += 9) {
    const uint8_t sel = data[at];
    const Field& f = base.fields[(sel & 0x7f) % base.fields.size()];
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | data[at + 1 + i];
    if (sel & 0x80) v = load(bytes, f.pos, f.width) + static_cast<uint64_t>(static_cast<int16_t>(v & 0xffff));
    store(bytes, f.pos, f.width, v);
  }
  const std::string path = fuzz::write_input("input.h5", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  for (const char* name : {"records", "labels"}) {
    FormatOptions o;
    o.name = name;
    auto index = open_hdf5(path, o);
    if (!index.ok()) {
      fuzz::check_error_names(index.status(), path, "open_hdf5");
      continue;
    }
    fuzz::check_index(*index, path, bytes.size(), 8);
  }
  return 0;
}
