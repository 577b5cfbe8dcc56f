// SPDX-License-Identifier: Apache-2.0
// HDF5: files that libhdf5 opens by itself, named inside a file (an external
// link's target, a dataset's external raw-data files, a virtual dataset's
// source files). libhdf5 opens them with a plain open(), which waits forever
// on a FIFO with no writer: dlfeed walks the paths libhdf5 would try, in its
// order, and refuses a FIFO or a character device it would reach before the
// file it opens (hdf5_source.h). Files of an object store name objects beside
// them, never local files.
#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/io/object_store.h"
#include "hdf5_source.h"
#include "hdf5_util.h"

namespace dlfeed::inline DLFEED_ABI::detail::h5 {
namespace {

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? std::string("/") : path.substr(0, slash);
}

std::string joined(const std::string& folder, const std::string& name) {
  if (folder.empty()) return name;
  return folder.back() == '/' ? folder + name : absl::StrCat(folder, "/", name);
}

// What names the file: an external link's target, an external raw-data file
// (libhdf5 tries one path: the prefix's, or the name itself) or a virtual
// dataset's source file.
enum class Named { kLink, kRaw, kVirtual };

const char* prefix_variable(Named what) {
  switch (what) {
    case Named::kLink: return "HDF5_EXT_PREFIX";
    case Named::kRaw: return "HDF5_EXTFILE_PREFIX";
    case Named::kVirtual: return "HDF5_VDS_PREFIX";
  }
  return "";
}

// The paths libhdf5 tries for `name` stored in `parent`, in its order: an
// absolute name as it is; then each entry of the prefix variable (`${ORIGIN}`
// is the parent's folder); then (links and virtual sources) the parent's
// folder; then the name in the working directory. An absolute name that fails
// is tried by its last component in those places.
std::vector<std::string> candidate_paths(const std::string& parent, const std::string& name, Named what) {
  std::vector<std::string> out;
  const std::string origin = folder_of(parent);
  const bool absolute = !name.empty() && name[0] == '/';
  const std::string rel = absolute ? name.substr(name.rfind('/') + 1) : name;
  if (absolute) out.push_back(name);
  if (const char* prefix = std::getenv(prefix_variable(what)); prefix != nullptr) {
    for (absl::string_view entry : absl::StrSplit(prefix, ':', absl::SkipEmpty())) {
      out.push_back(joined(absl::StrReplaceAll(entry, {{"${ORIGIN}", origin}}), rel));
    }
  }
  if (what != Named::kRaw) out.push_back(joined(origin, rel));
  out.push_back(rel);
  return out;
}

const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  return "not a regular file";
}

// Whether libhdf5 opens `path` as an HDF5 file (where its search stops): a
// regular file we may read with HDF5's signature at 0 or at 512 * 2^k (after
// a user block). A file it cannot open (not HDF5, unreadable) it passes over.
bool opens_as_hdf5(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool found = false;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    static constexpr char kSignature[8] = {'\211', 'H', 'D', 'F', '\r', '\n', '\032', '\n'};
    for (off_t at = 0; !found && at + 8 <= st.st_size; at = at == 0 ? 512 : at * 2) {
      char head[8];
      found = ::pread(fd, head, sizeof head, at) == 8 && std::memcmp(head, kSignature, 8) == 0;
    }
  }
  ::close(fd);
  return found;
}

// The path libhdf5 opens for `name`: the first candidate it opens as HDF5
// (where its search stops), or "" when none is.
std::string opened_path(const std::string& parent, const std::string& name, Named what) {
  for (const std::string& path : candidate_paths(parent, name, what)) {
    if (opens_as_hdf5(path)) return path;
  }
  return "";
}

// "PATH (a FIFO)" for a candidate libhdf5 reaches, before one it opens as
// HDF5, whose open() would wait (a FIFO with no writer, a terminal); empty
// when its search stops first. Directories, sockets, missing paths and files
// that are not HDF5 (or not readable) fail at once: libhdf5 moves on past
// them. External raw-data files are opened whatever they hold: there a
// regular file ends the search.
std::string special_candidate(const std::string& parent, const std::string& name, Named what) {
  for (const std::string& path : candidate_paths(parent, name, what)) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) return absl::StrCat(path, " (", kind_of(st.st_mode), ")");
    if (S_ISREG(st.st_mode) && (what == Named::kRaw || opens_as_hdf5(path))) return "";
  }
  return "";
}

// The names of a dataset's external raw-data files (H5Pset_external), as
// stored.
std::vector<std::string> external_names(hid_t dcpl) {
  std::vector<std::string> out;
  const int n = H5Pget_external_count(dcpl);
  for (int i = 0; i < n; ++i) {
    char name[4096] = {};
    off_t offset = 0;
    hsize_t size = 0;
    if (H5Pget_external(dcpl, static_cast<unsigned>(i), sizeof name, name, &offset, &size) >= 0) out.emplace_back(name);
  }
  return out;
}

herr_t refuse_special_target(const char* parent_file, const char* /*parent_group*/, const char* child_file,
                             const char* child_object, unsigned* /*flags*/, hid_t /*fapl*/, void* op_data) {
  if (is_object_url(parent_file)) return 0;  // the object driver opens objects of the store only
  const std::string found = special_candidate(parent_file, child_file, Named::kLink);
  if (found.empty()) return 0;
  *static_cast<std::string*>(op_data) =
      absl::StrCat("an external link to '", child_object, "' in ", found, ", which is not a regular file");
  return -1;
}

// A name with printf-style fields (%b) is a pattern over many files or
// datasets, not checked; "%%" is a literal percent sign.
std::optional<std::string> literal_name(const std::string& name) {
  if (absl::StrContains(absl::StrReplaceAll(name, {{"%%", ""}}), '%')) return std::nullopt;
  return absl::StrReplaceAll(name, {{"%%", "%"}});
}

std::string text_of(ssize_t (*get)(hid_t, size_t, char*, size_t), hid_t dcpl, size_t i) {
  const ssize_t n = get(dcpl, i, nullptr, 0);
  if (n <= 0) return "";
  std::string out(static_cast<size_t>(n), '\0');
  get(dcpl, i, out.data(), out.size() + 1);
  return out;
}

// Why mapping `i` of a virtual dataset cannot be read: its source file is a
// FIFO, or its source dataset is reached through an external link to one
// (libhdf5 opens both at read time, without dlfeed's link check), or the
// file is an object's (libhdf5 would open a local file). Empty when none.
std::string virtual_source_problem(const std::string& path, hid_t file, hid_t dcpl, size_t i) {
  const std::string name = text_of(H5Pget_virtual_filename, dcpl, i);
  const std::string dset = text_of(H5Pget_virtual_dsetname, dcpl, i);
  if (name.empty() || dset.empty()) return "";
  if (name != "." && is_object_url(path)) {
    return absl::StrCat("its virtual source file '", name,
                        "' is not read from a store (libhdf5 opens source files from the local file system)");
  }
  const std::optional<std::string> literal = literal_name(name), dataset = literal_name(dset);
  if (!literal) return "";
  Hid own;
  hid_t source = file;
  std::string at = path;
  if (name != ".") {
    if (std::string f = special_candidate(path, *literal, Named::kVirtual); !f.empty()) {
      return absl::StrCat("its virtual source file '", name, "' is ", f,
                          ", not a regular file: refused, as libhdf5 would wait on it");
    }
    at = opened_path(path, *literal, Named::kVirtual);
    if (at.empty()) return "";  // no such file: libhdf5 gives the fill value there
    own = Hid(H5Fopen(at.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!own.ok()) return "";
    source = own.get();
  }
  if (!dataset) return "";
  std::string refused;
  absl::StatusOr<Hid> access = guarded_access(at, &refused);
  if (!access.ok()) return "";
  Hid obj(H5Oopen(source, dataset->c_str(), access->get()), H5Oclose);
  if (!obj.ok() && !refused.empty()) {
    return absl::StrCat("its virtual source '", name, "' dataset '", dset, "' is ", refused,
                        ": refused, as libhdf5 would wait on it");
  }
  return "";
}

}  // namespace

absl::StatusOr<Hid> guarded_access(const std::string& path, std::string* refused) {
  Hid dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  if (!dapl.ok() || H5Pset_elink_cb(dapl.get(), refuse_special_target, refused) < 0) {
    return h5_fail(path, "a link-access property list with dlfeed's external-link check");
  }
  // An object's external link names an object beside it: its folder in the
  // store is the prefix libhdf5 tries (the object driver opens store URLs only).
  if (is_object_url(path) && H5Pset_elink_prefix(dapl.get(), (folder_of(path) + "/").c_str()) < 0) {
    return h5_fail(path, "a link-access property list with the object's folder as its external-link prefix");
  }
  return dapl;
}

absl::StatusOr<Hid> open_checked_dataset(const std::string& path, hid_t file, const std::string& name,
                                         std::string* refused, absl::string_view expected) {
  refused->clear();
  DLFEED_ASSIGN_OR_RETURN(Hid access, guarded_access(path, refused));
  Hid dset(H5Dopen2(file, name.c_str(), access.get()), H5Dclose);
  if (!dset.ok() && !refused->empty()) {
    H5Eclear2(H5E_DEFAULT);
    return absl::InvalidArgumentError(absl::StrCat(path, ": dataset '", name, "' is ", *refused));
  }
  if (!dset.ok()) return h5_fail(path, expected);
  return dset;
}

std::string special_storage_file(const std::string& path, hid_t file, hid_t dcpl) {
  for (const std::string& name : external_names(dcpl)) {
    if (is_object_url(path)) {  // libhdf5 would read it from the local file system
      return absl::StrCat("its external raw-data file '", name,
                          "' is not read from a store (libhdf5 reads such files from the local file system)");
    }
    if (std::string f = special_candidate(path, name, Named::kRaw); !f.empty()) {
      return absl::StrCat("its external raw-data file '", name, "' is ", f,
                          ", not a regular file: refused, as libhdf5 would wait on it");
    }
  }
  size_t mappings = 0;
  if (H5Pget_layout(dcpl) == H5D_VIRTUAL && H5Pget_virtual_count(dcpl, &mappings) >= 0) {
    for (size_t i = 0; i < mappings; ++i) {
      if (std::string why = virtual_source_problem(path, file, dcpl, i); !why.empty()) return why;
    }
  }
  H5Eclear2(H5E_DEFAULT);
  return "";
}

std::vector<std::pair<std::string, FileIdentity>> external_data_files(const std::string& path, hid_t dcpl) {
  std::vector<std::pair<std::string, FileIdentity>> out;
  if (is_object_url(path)) return out;
  for (const std::string& name : external_names(dcpl)) {
    for (const std::string& candidate : candidate_paths(path, name, Named::kRaw)) {
      struct stat st {};
      if (::stat(candidate.c_str(), &st) != 0) continue;
      if (S_ISREG(st.st_mode)) out.emplace_back(candidate, identity_of(st));  // where libhdf5's search ends
      break;
    }
  }
  return out;
}

}  // namespace dlfeed::inline DLFEED_ABI::detail::h5
