// SPDX-License-Identifier: Apache-2.0
// HDF5: the sample index is built once from libhdf5's metadata (dataset
// shape, type, layout, contiguous offset or chunk table); after that samples
// are plain byte extents of the file, decoded here without libhdf5 (zlib for
// deflate, a byte transpose for shuffle). Layouts and filters we cannot turn
// into extents fall back to H5Dread through the library. This file reads the
// metadata and holds the contiguous and library sources; chunked storage is
// in hdf5_chunks.cc, what the storage properties allow in hdf5_storage.cc.
#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/format/format.h"
#include "dlfeed/io/object_store.h"
#include "format/hdf5_object.h"
#include "hdf5_source.h"
#include "hdf5_util.h"

namespace dlfeed::inline DLFEED_ABI {
namespace detail {
/// One lock for every libhdf5 call dlfeed makes (reader and writer).
std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

namespace h5 {
absl::Status h5_fail(const std::string& path, absl::string_view expected) {
  return file_error(path, expected, absl::StrCat("libhdf5 error: ", h5_errors()));
}
absl::Status h5_fail(const std::string& path, uint64_t offset, absl::string_view expected) {
  return format_error(path, offset, expected, absl::StrCat("libhdf5 error: ", h5_errors()));
}
}  // namespace h5
}  // namespace detail

namespace {

using detail::h5::add_ok;
using detail::h5::check_unwritten;
using detail::h5::DatasetGeometry;
using detail::h5::file_access_for;
using detail::h5::FilterPipeline;
using detail::h5::h5_fail;
using detail::h5::H5Lock;
using detail::h5::Hdf5Source;
using detail::h5::Hid;
using detail::h5::in_another_file;
using detail::h5::mul_ok;
using detail::h5::object_open_error;
using detail::h5::read_chunk_shape;
using detail::h5::read_fill;
using detail::h5::read_filters;
using detail::h5::unsupported_storage;
using detail::h5::userblock_of;

// Limits that keep a corrupt or hostile header from causing unbounded work
// (the chunk grid's are in hdf5_chunks.cc).
constexpr uint64_t kMaxSampleBytes = uint64_t{1} << 32;  // 4 GiB per decoded sample
constexpr uint64_t kMaxSamples = uint64_t{1} << 31;      // samples per dataset
constexpr int kMaxListed = 64;                           // datasets listed in errors

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

// Datasets under `group` (to depth 4). A link libhdf5 cannot open goes to
// `broken` with why (empty when libhdf5 does not say: dangling, or newer);
// `access` is guarded_access's list, `refused` the string it writes.
struct Broken {
  std::vector<std::string> names;
  std::vector<std::string> why;
};

void list_datasets(hid_t group, hid_t access, std::string& refused, const std::string& prefix, int depth,
                   std::vector<std::string>& out, Broken* broken = nullptr) {
  H5G_info_t info;
  if (depth > 4 || H5Gget_info(group, &info) < 0) return;
  for (hsize_t i = 0; i < info.nlinks && static_cast<int>(out.size()) < kMaxListed; ++i) {
    ssize_t len = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len <= 0) continue;
    std::string name(static_cast<size_t>(len), '\0');
    H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT);
    refused.clear();
    Hid obj(H5Oopen(group, name.c_str(), access), H5Oclose);
    if (!obj.ok()) {  // a dangling soft or external link, a refused one, or an object this libhdf5 cannot decode
      if (broken != nullptr) {
        broken->names.push_back(prefix + name);
        broken->why.push_back(refused);
      }
      continue;
    }
    H5I_type_t t = H5Iget_type(obj.get());
    if (t == H5I_DATASET) {
      out.push_back(prefix + name);
    } else if (t == H5I_GROUP) {
      list_datasets(obj.get(), access, refused, prefix + name + "/", depth + 1, out, broken);
    }
  }
  H5Eclear2(H5E_DEFAULT);
}

// ---------------------------------------------------------------------------
// The sources: contiguous extents, or H5Dread through libhdf5.

// Contiguous storage: sample k is one extent; decode is a view of it.
class ContiguousSource final : public Hdf5Source {
 public:
  ContiguousSource(DatasetGeometry g, bool allocated, uint64_t offset)
      : Hdf5Source(std::move(g)), allocated_(allocated), offset_(offset) {}
  std::string layout() const override { return "hdf5:contiguous"; }
  void fill(uint64_t k, SampleRef& ref) const override {
    Hdf5Source::fill(k, ref);
    if (allocated_ && g_.sample_bytes > 0) ref.extents.push_back({offset_ + k * g_.sample_bytes, g_.sample_bytes});
  }
  uint64_t total_read_bytes() const override { return allocated_ ? num_samples() * g_.sample_bytes : 0; }
  // Data never written (fill values) is indexed from the file each time:
  // nothing in the file bounds its samples' size for a cache to check.
  std::string cache_tag() const override { return allocated_ ? "hdf5:contiguous" : ""; }
  void cache_save(std::string& out) const override {
    detail::h5::save_geometry(g_, out);
    detail::CacheWriter w(out);
    w.u8(allocated_ ? 1 : 0);
    w.u64(offset_);
  }
  bool is_identity(const SampleRef& ref) const override { return allocated_ && ref.extents.size() == 1; }
  std::optional<Strided> strided() const override {
    if (!allocated_ || g_.sample_bytes == 0) return std::nullopt;
    return Strided{offset_, g_.sample_bytes, g_.sample_bytes};
  }
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
  uint64_t offset_;  // of sample 0's bytes in the file
};

// Anything else: H5Dread of row k through libhdf5.
class LibrarySource final : public Hdf5Source {
 public:
  // `external`: the external files of its data (H5Pset_external) found at
  // indexing, each with what stat said then.
  LibrarySource(DatasetGeometry g, const FileIdentity& indexed,
                std::vector<std::pair<std::string, FileIdentity>> external)
      : Hdf5Source(std::move(g)), indexed_(indexed), external_(std::move(external)) {}
  ~LibrarySource() override {
    H5Lock lock;
    dset_.reset();
    file_.reset();
  }
  std::string layout() const override { return "hdf5:library-read"; }
  bool reads_through_library() const override { return true; }
  uint64_t total_read_bytes() const override { return 0; }

  absl::StatusOr<DecodedSample> decode(const SampleRef& ref, std::span<std::byte>,
                                       std::vector<std::byte>& scratch) const override {
    scratch.resize(g_.sample_bytes);
    if (g_.sample_bytes == 0) return sample_view(scratch.data(), 0);
    H5Lock lock;
    if (!dset_.ok()) {
      DLFEED_ASSIGN_OR_RETURN(Hid fapl, file_access_for(g_.path));
      file_ = Hid(H5Fopen(g_.path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
      if (!file_.ok()) return h5_fail(g_.path, "an HDF5 file libhdf5 can open");
      DLFEED_ASSIGN_OR_RETURN(dset_, detail::h5::open_checked_dataset(g_.path, file_.get(), g_.name, &refused_,
                                                                      absl::StrCat("dataset '", g_.name, "'")));
    }
    DLFEED_RETURN_IF_ERROR(check_unchanged());
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
        (g_.scalar
             ? H5Sselect_all(fspace.get())
             : H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr)) < 0 ||
        H5Dread(dset_.get(), type.get(), mspace.get(), fspace.get(), H5P_DEFAULT, scratch.data()) < 0) {
      return h5_fail(g_.path, absl::StrCat("H5Dread of sample ", ref.item, " of '", g_.name, "'"));
    }
    return sample_view(scratch.data(), g_.sample_bytes);
  }

 private:
  // The file libhdf5 has open is the one indexed, as FileTable checks the
  // files read by extents: a file truncated, rewritten or appended to since
  // reads as zeros or from libhdf5's caches, so it is an error naming what
  // changed. Asked of the descriptor before each read (a read here is an
  // H5Dread, far dearer than an fstat); files of a driver with no
  // descriptor (an object store's) are not asked.
  absl::Status check_unchanged() const {
    for (const auto& [name, was] : external_) {
      struct stat st {};
      if (::stat(name.c_str(), &st) != 0) return io_error(name, "stat (an external file of its data)", errno);
      if (std::string what = detail::file_changes(was, detail::identity_of(st)); !what.empty()) {
        return file_error(name, absl::StrCat("the external data file of '", g_.name, "' in ", g_.path, " as indexed"),
                          absl::StrCat(what, ": changed (rewritten, truncated or appended to) while being read"));
      }
    }
    void* handle = nullptr;
    Hid fapl(H5Fget_access_plist(file_.get()), H5Pclose);
    if (indexed_.mtime_ns == 0 || !fapl.ok() || H5Pget_driver(fapl.get()) != H5FD_SEC2 ||
        H5Fget_vfd_handle(file_.get(), H5P_DEFAULT, &handle) < 0 || handle == nullptr) {
      return absl::OkStatus();
    }
    struct stat st {};
    if (::fstat(*static_cast<int*>(handle), &st) != 0) return io_error(g_.path, "fstat", errno);
    const std::string what = detail::file_changes(indexed_, detail::identity_of(st));
    if (what.empty()) return absl::OkStatus();
    return file_error(g_.path, "the file as it was indexed",
                      absl::StrCat(what,
                                   ": changed in place (rewritten, truncated or appended to) while the loader "
                                   "read it through libhdf5"));
  }

  FileIdentity indexed_;
  std::vector<std::pair<std::string, FileIdentity>> external_;
  mutable std::string refused_;  // the link check's answer: outlives the access list libhdf5 may keep
  mutable Hid file_;             // opened on first decode; guarded by the HDF5 lock
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
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": dataset '", name, "': expected integer, float or bool elements, found ", what,
                     " elements (HDF5 type class ", type_class_name(cls), ", ", size, " bytes)"));
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
        is_bool = mname != nullptr &&
                  ((std::strcmp(mname, "FALSE") == 0 && v == 0) || (std::strcmp(mname, "TRUE") == 0 && v == 1));
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
    const size_t bias = size == 2 ? 15 : size == 4 ? 127 : 1023;
    if (!ieee || H5Tget_ebias(type) != bias || H5Tget_norm(type) != H5T_NORM_IMPLIED ||
        H5Tget_precision(type) != size * 8 || H5Tget_offset(type) != 0) {
      return refuse(absl::StrCat("non-IEEE ", size, "-byte float (sign bit ", spos, ", exponent ", esize, " bits at ",
                                 epos, " biased by ", H5Tget_ebias(type), ", mantissa ", msize, " bits at ", mpos,
                                 ")"));
    }
    DType t;
    t.kind = DType::Kind::kFloat;
    t.size = static_cast<uint8_t>(size);
    t.big_endian = order_big(type);
    return t;
  }
  return refuse(type_class_name(cls));
}

absl::StatusOr<std::string> pick_dataset(const std::string& path, hid_t file, const std::string& wanted,
                                         std::vector<std::string>& names) {
  Broken broken;  // links libhdf5 cannot open: never passed over as if absent
  std::string refused;
  DLFEED_ASSIGN_OR_RETURN(Hid access, detail::h5::guarded_access(path, &refused));
  list_datasets(file, access.get(), refused, "", 0, names, &broken);
  auto in = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  auto listing = [&] {
    std::string s = names.empty() ? std::string("no datasets") : absl::StrCat("datasets: ", absl::StrJoin(names, ", "));
    if (static_cast<int>(names.size()) >= kMaxListed) s += ", ...";
    if (!broken.names.empty()) {
      std::vector<std::string> each;
      for (size_t i = 0; i < broken.names.size(); ++i) {
        each.push_back(broken.why[i].empty() ? broken.names[i]
                                             : absl::StrCat(broken.names[i], " (", broken.why[i], ")"));
      }
      absl::StrAppend(&s, "; links libhdf5 cannot open: ", absl::StrJoin(each, ", "));
    }
    return s;
  };
  auto unopenable = [&](const std::string& n) {
    const size_t at =
        static_cast<size_t>(std::find(broken.names.begin(), broken.names.end(), n) - broken.names.begin());
    if (at < broken.why.size() && !broken.why[at].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": dataset '", n, "' is ", broken.why[at], ": refused, as libhdf5 would wait on it"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": dataset '", n,
        "' cannot be opened by this libhdf5 (a dangling soft or external link, or an object written by a newer "
        "libhdf5, such as a virtual dataset of HDF5 1.12 or later) (",
        listing(), ")"));
  };
  if (!wanted.empty()) {
    std::string n = wanted;
    while (!n.empty() && n[0] == '/') n.erase(0, 1);
    if (in(names, n)) return n;
    if (in(broken.names, n)) return unopenable(n);
    return absl::NotFoundError(absl::StrCat(path, ": no dataset named '", wanted, "' (", listing(), ")"));
  }
  for (const char* conventional : {"records", "records_0"}) {
    if (in(names, conventional)) return std::string(conventional);
    if (in(broken.names, conventional)) return unopenable(conventional);
  }
  if (names.size() == 1 && broken.names.empty()) return names[0];  // the only one, as for an NPZ with one member
  if (names.empty() && !broken.names.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no dataset this libhdf5 can open (", listing(), ")"));
  }
  if (names.size() == 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": one dataset libhdf5 can open, '", names[0],
        "', beside links it cannot: choose the dataset by its name rather than have dlfeed guess (", listing(), ")"));
  }
  return absl::NotFoundError(absl::StrCat(path,
                                          ": no dataset named 'records' or 'records_0' and more than one "
                                          "other: choose one by its name (",
                                          listing(), ")"));
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

// Whether an object holds HDF5's signature where libhdf5 looks for it: at 0,
// or after a user block, at 512, 1024, 2048...; a read that fails is its
// error (a 403, a timeout), not "no signature". Needs the HDF5 lock.
absl::StatusOr<bool> object_has_signature(const std::string& path, uint64_t size) {
  for (uint64_t at = 0; at + 8 <= size; at = at == 0 ? 512 : at * 2) {
    std::byte head[8];
    DLFEED_RETURN_IF_ERROR(detail::h5::read_object(path, at, std::span<std::byte>(head, 8)));
    if (std::memcmp(head, "\211HDF\r\n\032\n", 8) == 0) return true;
  }
  return false;
}

// The file, opened read-only once its signature is HDF5's. Needs the HDF5 lock.
absl::StatusOr<Hid> open_file(const std::string& path, uint64_t file_size) {
  constexpr absl::string_view kSignature = "an HDF5 file (signature \\211HDF\\r\\n\\032\\n)";
  const bool object = is_object_url(path);
  if (object) {
    // libhdf5 1.10 looks for the signature through its default driver only.
    DLFEED_ASSIGN_OR_RETURN(const bool hdf5, object_has_signature(path, file_size));
    if (!hdf5) return format_error(path, 0, kSignature, hex_prefix(path, file_size));
  } else {
    htri_t is = H5Fis_hdf5(path.c_str());
    if (is == 0) return format_error(path, 0, kSignature, hex_prefix(path, file_size));
    if (is < 0) return h5_fail(path, kSignature);
  }
  DLFEED_ASSIGN_OR_RETURN(Hid fapl, file_access_for(path));
  Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file.ok()) {
    if (absl::Status why = object ? object_open_error() : absl::OkStatus(); !why.ok()) {
      H5Eclear2(H5E_DEFAULT);
      return why;
    }
    return h5_fail(path, "an HDF5 file libhdf5 can open");
  }
  return file;
}

// Element type and shape, within the limits on samples.
absl::StatusOr<DatasetGeometry> read_geometry(const std::string& path, const std::string& name, hid_t dset, hid_t type,
                                              SampleAxis axis) {
  DatasetGeometry g;
  g.path = path;
  g.name = name;
  DLFEED_ASSIGN_OR_RETURN(g.dtype, dtype_of(path, name, type));

  Hid space(H5Dget_space(dset), H5Sclose);
  if (!space.ok()) return h5_fail(path, absl::StrCat("the dataspace of dataset '", name, "'"));
  H5S_class_t sclass = H5Sget_simple_extent_type(space.get());
  int rank = H5Sget_simple_extent_ndims(space.get());
  if (sclass == H5S_SCALAR && axis == SampleAxis::kNone) {
    g.scalar = true;  // read whole: one sample of shape ()
    rank = 0;
  } else if (sclass != H5S_SIMPLE || rank < 1) {
    // A valid file dlfeed does not read as samples: InvalidArgument (docs/formats.md), not DataLoss.
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": expected dataset '", name, "' with at least one dimension (samples along axis 0), found ",
        sclass == H5S_NULL ? "a null dataspace"
                           : "a 0-dimensional (scalar) dataset (axis=\"none\", --axis none, reads it as one sample "
                             "of shape ())"));
  }
  std::vector<hsize_t> hdims(static_cast<size_t>(rank)), hmax(static_cast<size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), hdims.data(), hmax.data());
  // A dimension above its maximum is a damaged header (libhdf5 1.12 and
  // later refuse it; 1.10 reads the samples past the maximum as fill).
  for (size_t d = 0; d < hdims.size(); ++d) {
    if (hmax[d] != H5S_UNLIMITED && hdims[d] > hmax[d]) {
      return file_error(path, absl::StrCat("dimension ", d, " of dataset '", name, "' at most its maximum, ", hmax[d]),
                        absl::StrCat(hdims[d], " (a damaged dataspace)"));
    }
  }
  g.dims.assign(hdims.begin(), hdims.end());
  if (g.scalar) g.dims = {1};
  g.sample_elems = 1;
  for (size_t d = 1; d < g.dims.size(); ++d) {
    if (!mul_ok(g.sample_elems, g.dims[d], &g.sample_elems)) g.sample_elems = UINT64_MAX;
  }
  if (g.sample_elems == UINT64_MAX || !mul_ok(g.sample_elems, g.dtype.size, &g.sample_bytes) ||
      g.sample_bytes > kMaxSampleBytes) {
    return file_error(path, absl::StrCat("samples of at most ", kMaxSampleBytes, " bytes in dataset '", name, "'"),
                      absl::StrCat("shape ", shape_str(g.full_shape()), " of ", g.dtype.name()));
  }
  if (g.dims[0] > kMaxSamples) {
    return file_error(path, absl::StrCat("at most ", kMaxSamples, " samples in dataset '", name, "'"),
                      absl::StrCat("shape ", shape_str(g.full_shape())));
  }
  return g;
}

// Contiguous storage: sample k is the k-th run of sample_bytes from the
// data's offset; none when the data was never written (all fill).
absl::StatusOr<std::unique_ptr<SampleSource>> index_contiguous(hid_t dset, DatasetGeometry& g, uint64_t file_size) {
  const uint64_t n = g.dims[0];
  haddr_t off = H5Dget_offset(dset);
  H5Eclear2(H5E_DEFAULT);
  const bool allocated = off != HADDR_UNDEF;
  if (allocated) {
    uint64_t total = 0, end = 0;
    if (!mul_ok(n, g.sample_bytes, &total) || !add_ok(off, total, &end) || end > file_size) {
      return format_error(g.path, off,
                          absl::StrCat("the ", shape_str(g.full_shape()), " ", g.dtype.name(), " data of '", g.name,
                                       "' within the file of ", file_size, " bytes"),
                          absl::StrCat("it would end at offset ", end == 0 ? UINT64_MAX : end));
    }
  }
  return std::make_unique<ContiguousSource>(std::move(g), allocated, allocated ? off : 0);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> hdf5_dataset_names(const std::string& path) {
  DLFEED_ASSIGN_OR_RETURN(detail::File f, detail::File::open(path));
  H5Lock lock;
  DLFEED_ASSIGN_OR_RETURN(Hid file, open_file(path, f.size()));
  std::vector<std::string> names;
  std::string refused;
  DLFEED_ASSIGN_OR_RETURN(Hid access, detail::h5::guarded_access(path, &refused));
  list_datasets(file.get(), access.get(), refused, "", 0, names);
  return names;
}

absl::StatusOr<SampleIndex> open_hdf5(const std::string& path, const FormatOptions& options) {
  uint64_t file_size = 0;
  FileIdentity identity;
  {
    DLFEED_ASSIGN_OR_RETURN(detail::File f, detail::File::open(path));
    file_size = f.size();
    identity = f.identity();
  }
  if (file_size == 0) {
    return format_error(path, 0, "an HDF5 file (signature \\211HDF\\r\\n\\032\\n)", "an empty file");
  }

  H5Lock lock;
  DLFEED_ASSIGN_OR_RETURN(Hid file, open_file(path, file_size));
  std::vector<std::string> names;
  DLFEED_ASSIGN_OR_RETURN(std::string name, pick_dataset(path, file.get(), options.name, names));
  std::string refused;  // outlives dset
  DLFEED_ASSIGN_OR_RETURN(Hid dset,
                          detail::h5::open_checked_dataset(path, file.get(), name, &refused,
                                                           absl::StrCat("dataset '", name, "' that libhdf5 can open")));
  Hid type(H5Dget_type(dset.get()), H5Tclose);
  if (!type.ok()) return h5_fail(path, absl::StrCat("the type of dataset '", name, "'"));
  DLFEED_ASSIGN_OR_RETURN(DatasetGeometry g, read_geometry(path, name, dset.get(), type.get(), options.axis));

  // Storage: fill value, filters, layout.
  Hid dcpl(H5Dget_create_plist(dset.get()), H5Pclose);
  if (!dcpl.ok()) return h5_fail(path, absl::StrCat("the creation properties of dataset '", name, "'"));
  const H5D_fill_value_t fill_defined = read_fill(dcpl.get(), type.get(), g);
  DLFEED_RETURN_IF_ERROR(check_unwritten(dset.get(), dcpl.get(), fill_defined, g));
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  FilterPipeline filters = read_filters(dcpl.get(), layout, g);
  if (layout == H5D_CHUNKED) DLFEED_RETURN_IF_ERROR(read_chunk_shape(dcpl.get(), g));
  if (!g.missing_filter.empty()) {
    H5Eclear2(H5E_DEFAULT);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": dataset '", name, "' is compressed with filter ", g.missing_filter,
        ", which neither dlfeed nor this libhdf5 decodes: install its plugin where HDF5_PLUGIN_PATH points (for "
        "LZF, h5py's lzf filter or hdf5plugin), or write the dataset with gzip"));
  }
  if (std::string special = detail::h5::special_storage_file(path, file.get(), dcpl.get()); !special.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": dataset '", name, "': ", special));
  }
  if (g.reason.empty()) g.reason = in_another_file(file.get(), dset.get());
  if (g.reason.empty()) g.reason = unsupported_storage(dcpl.get(), layout, filters);

  // Where the samples' bytes are: the source computes each one's extents.
  SampleIndex index;
  if (g.reason.empty() && layout == H5D_CONTIGUOUS) {
    DLFEED_ASSIGN_OR_RETURN(auto src, index_contiguous(dset.get(), g, file_size));
    index.add_file(path, std::move(src));
    index.identities.assign(1, identity);
    return index;
  }
  if (g.reason.empty() && layout == H5D_CHUNKED) {
    DLFEED_ASSIGN_OR_RETURN(
        auto src, detail::h5::index_chunked(dset.get(), g, std::move(filters), userblock_of(file.get()), file_size));
    if (src != nullptr) {
      index.add_file(path, std::move(src));
      index.identities.assign(1, identity);
      return index;
    }
  }

  // Fallback: H5Dread through libhdf5 (g.reason says why).
  warn_fallback_once(path, name, g.reason);
  index.add_file(
      path, std::make_unique<LibrarySource>(std::move(g), identity, detail::h5::external_data_files(path, dcpl.get())));
  index.identities.assign(1, identity);
  return index;
}

namespace detail::h5 {

void save_geometry(const DatasetGeometry& g, std::string& out) {
  CacheWriter w(out);
  w.str(g.name);
  w.u64s(g.dims);
  w.u64s(g.chunk);
  w.dtype(g.dtype);
  w.u64(g.fill.size());
  out.append(reinterpret_cast<const char*>(g.fill.data()), g.fill.size());
  w.str(g.filters);
  w.u8(g.scalar ? 1 : 0);
}

absl::StatusOr<DatasetGeometry> load_geometry(const std::string& path, uint64_t file_size, CacheReader& in) {
  DatasetGeometry g;
  g.path = path;
  g.name = in.str();
  g.dims = in.u64s();
  g.chunk = in.u64s();
  g.dtype = in.dtype();
  const std::string fill = in.str();  // written as a length and bytes, as str() reads it
  g.filters = in.str();
  const uint8_t scalar = in.u8();
  g.scalar = scalar == 1;
  if (!in.ok() || scalar > 1 || (g.scalar && (g.dims.size() != 1 || g.dims[0] != 1 || !g.chunk.empty())) ||
      g.dims.empty() || g.dims.size() > 32 || (!g.chunk.empty() && g.chunk.size() != g.dims.size()) ||
      (!fill.empty() && fill.size() != g.dtype.size)) {
    return file_error(path, "an HDF5 dataset entry in the index cache", "a truncated or malformed one");
  }
  g.fill.resize(fill.size());
  if (!fill.empty()) std::memcpy(g.fill.data(), fill.data(), fill.size());
  g.sample_elems = 1;
  for (size_t d = 1; d < g.dims.size(); ++d) {
    if (!mul_ok(g.sample_elems, g.dims[d], &g.sample_elems)) {
      return file_error(path, "a cached dataset shape whose samples fit in 64 bits", shape_str(g.full_shape()));
    }
  }
  if (!mul_ok(g.sample_elems, g.dtype.size, &g.sample_bytes)) {
    return file_error(path, "a cached dataset shape whose samples fit in 64 bits", shape_str(g.full_shape()));
  }
  // open_hdf5's limits, and one of its own: no decoded sample larger than
  // deflate could make from the whole file (a sample of fill values the
  // file does not hold is indexed from the file, not taken from a cache).
  const uint64_t most =
      std::max<uint64_t>(uint64_t{1} << 20, file_size > kMaxSampleBytes ? kMaxSampleBytes : file_size * 1032);
  if (g.sample_bytes > std::min(kMaxSampleBytes, most) || g.dims[0] > kMaxSamples) {
    return file_error(path,
                      absl::StrCat("cached samples of at most ", std::min(kMaxSampleBytes, most), " bytes, at most ",
                                   kMaxSamples, " of them, in the file of ", file_size, " bytes"),
                      absl::StrCat(g.dims[0], " samples of ", g.sample_bytes, " bytes"));
  }
  return g;
}

absl::StatusOr<std::unique_ptr<SampleSource>> load_contiguous(const std::string& path, uint64_t file_size,
                                                              CacheReader& in) {
  DLFEED_ASSIGN_OR_RETURN(DatasetGeometry g, load_geometry(path, file_size, in));
  const bool allocated = in.u8() != 0;
  const uint64_t off = in.u64();
  if (!in.ok()) return file_error(path, "an HDF5 contiguous entry in the index cache", "a truncated one");
  uint64_t total = 0, end = 0;
  if (allocated && (!mul_ok(g.dims[0], g.sample_bytes, &total) || !add_ok(off, total, &end) || end > file_size)) {
    return file_error(path, absl::StrCat("cached contiguous data within the file of ", file_size, " bytes"),
                      absl::StrCat(g.dims[0], " samples of ", g.sample_bytes, " bytes at offset ", off));
  }
  if (!allocated) {  // never cached (cache_tag), so a cache that says so is not dlfeed's
    return file_error(path, "a cached contiguous dataset with data", "one never written (all fill values)");
  }
  return std::make_unique<ContiguousSource>(std::move(g), allocated, allocated ? off : 0);
}

}  // namespace detail::h5

}  // namespace dlfeed
