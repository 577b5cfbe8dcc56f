// SPDX-License-Identifier: Apache-2.0
// Private to dlfeed (src/ and its tests): RAII and error helpers around the
// libhdf5 C API, shared by the reader (src/format/hdf5.cc), the writer
// (src/dev/hdf5_writer.cc) and the test fixtures (tests/format/).
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/dtype.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// One lock for every libhdf5 call dlfeed makes (reader and writer).
std::mutex& hdf5_mutex();

namespace h5 {

// Holds the dlfeed HDF5 lock and keeps libhdf5 from printing its error stack
// while we hold it (restoring the caller's setting afterwards).
class H5Lock {
 public:
  H5Lock() : lock_(detail::hdf5_mutex()) {
    if (H5Eget_auto2(H5E_DEFAULT, &old_func_, &old_data_) < 0) {
      old_func_ = nullptr;
      old_data_ = nullptr;
      restore_ = false;
    }
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~H5Lock() {
    if (restore_) H5Eset_auto2(H5E_DEFAULT, old_func_, old_data_);
  }
  H5Lock(const H5Lock&) = delete;
  H5Lock& operator=(const H5Lock&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
  H5E_auto2_t old_func_ = nullptr;
  void* old_data_ = nullptr;
  bool restore_ = true;
};

// An owned hid_t, closed with the matching H5*close.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer close) : id_(id), close_(close) {}
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  ~Hid() { reset(); }
  void reset() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

inline herr_t collect_error(unsigned, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<std::vector<std::string>*>(data);
  if (e->desc != nullptr && e->desc[0] != '\0') {
    std::string d = e->desc;
    if (std::find(out->begin(), out->end(), d) == out->end()) out->push_back(std::move(d));
  }
  return 0;
}

// The current thread's libhdf5 error stack, most specific first, in one line.
inline std::string h5_errors() {
  std::vector<std::string> msgs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &msgs);
  H5Eclear2(H5E_DEFAULT);
  if (msgs.empty()) return "no detail from libhdf5";
  if (msgs.size() > 3) msgs.resize(3);
  return absl::StrJoin(msgs, "; ");
}

// The HDF5 type h5py would use for `t` (bool: an int8 enum FALSE/TRUE).
inline hid_t make_type(DType t) {
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

inline hid_t create_file(const std::string& path, bool latest, uint64_t userblock) {
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (latest) H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  Hid fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  if (userblock > 0) H5Pset_userblock(fcpl.get(), userblock);
  return H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get());
}

inline hid_t create_dataset(hid_t file, const std::string& name, hid_t type, hid_t space, hid_t dcpl) {
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  return H5Dcreate2(file, name.c_str(), type, space, lcpl.get(), dcpl, H5P_DEFAULT);
}

// Writes rows [row, row + rows) of a dataset of shape dims from `buf`.
inline herr_t write_rows(hid_t dset, hid_t type, const std::vector<hsize_t>& dims, uint64_t row, uint64_t rows,
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

/// A failed libhdf5 call while writing `path`, with libhdf5's own messages.
inline absl::Status write_failed(const std::string& path, absl::string_view what) {
  return absl::InternalError(absl::StrCat(path, ": writing HDF5: ", what, " failed: ", h5_errors()));
}

}  // namespace h5
}  // namespace dlfeed::detail
