// SPDX-License-Identifier: Apache-2.0
// HDF5: files that libhdf5 opens by itself, named inside a file (an external
// link's target, a dataset's external raw-data files, a virtual dataset's
// source files). libhdf5 opens them with a plain open(), which waits forever
// on a FIFO with no writer; dlfeed refuses any of them that is not a regular
// file before libhdf5 gets there (hdf5_source.h).
#include <hdf5.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
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

// Every path libhdf5 may try for `name` stored in `parent`: the name as given,
// beside the parent file, and under each entry of the prefix variable
// (`${ORIGIN}` is the parent's folder); an absolute name is also tried by its
// last component in those folders. A superset of libhdf5's search, so that
// none of its tries reaches a file dlfeed did not look at.
std::vector<std::string> candidate_paths(const std::string& parent, const std::string& name, const char* prefix_env) {
  std::vector<std::string> out = {name};
  const std::string origin = folder_of(parent);
  const std::string rel = !name.empty() && name[0] == '/' ? name.substr(name.rfind('/') + 1) : name;
  out.push_back(joined(origin, rel));
  if (const char* prefix = prefix_env != nullptr ? std::getenv(prefix_env) : nullptr; prefix != nullptr) {
    for (absl::string_view entry : absl::StrSplit(prefix, ':', absl::SkipEmpty())) {
      out.push_back(joined(absl::StrReplaceAll(entry, {{"${ORIGIN}", origin}}), rel));
    }
  }
  return out;
}

const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// "PATH (a FIFO)" for the first candidate that exists and is not a regular
// file; empty when every one that exists is a regular file.
std::string special_candidate(const std::string& parent, const std::string& name, const char* prefix_env) {
  for (const std::string& path : candidate_paths(parent, name, prefix_env)) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      return absl::StrCat(path, " (", kind_of(st.st_mode), ")");
    }
  }
  return "";
}

herr_t refuse_special_target(const char* parent_file, const char* /*parent_group*/, const char* child_file,
                             const char* child_object, unsigned* /*flags*/, hid_t /*fapl*/, void* op_data) {
  if (is_object_url(parent_file)) return 0;  // the object driver opens objects of the store only
  const std::string found = special_candidate(parent_file, child_file, "HDF5_EXT_PREFIX");
  if (found.empty()) return 0;
  *static_cast<std::string*>(op_data) =
      absl::StrCat("an external link to '", child_object, "' in ", found, ", which is not a regular file");
  return -1;
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

std::string special_storage_file(const std::string& path, hid_t dcpl) {
  const int external = H5Pget_external_count(dcpl);
  for (int i = 0; i < external; ++i) {
    char name[4096] = {};
    off_t offset = 0;
    hsize_t size = 0;
    if (H5Pget_external(dcpl, static_cast<unsigned>(i), sizeof name, name, &offset, &size) < 0) continue;
    if (is_object_url(path)) {  // libhdf5 would read it from the local file system
      return absl::StrCat("its external raw-data file '", name,
                          "' is not read from a store (libhdf5 reads such files from the local file system)");
    }
    if (std::string f = special_candidate(path, name, "HDF5_EXTFILE_PREFIX"); !f.empty()) {
      return absl::StrCat("its external raw-data file '", name, "' is ", f,
                          ", not a regular file: refused, as libhdf5 would wait on it");
    }
  }
  size_t mappings = 0;
  if (H5Pget_layout(dcpl) == H5D_VIRTUAL && H5Pget_virtual_count(dcpl, &mappings) >= 0) {
    for (size_t i = 0; i < mappings; ++i) {
      const ssize_t n = H5Pget_virtual_filename(dcpl, i, nullptr, 0);
      if (n <= 0) continue;
      std::string name(static_cast<size_t>(n), '\0');
      H5Pget_virtual_filename(dcpl, i, name.data(), name.size() + 1);
      if (name == ".") continue;  // the dataset's own file
      if (is_object_url(path)) {
        return absl::StrCat("its virtual source file '", name,
                            "' is not read from a store (libhdf5 opens source files from the local file system)");
      }
      // A name with printf-style fields (%b) is a pattern over many files;
      // "%%" is a literal percent sign.
      const std::string literal = absl::StrReplaceAll(name, {{"%%", "%"}});
      if (absl::StrContains(absl::StrReplaceAll(name, {{"%%", ""}}), '%')) continue;
      if (std::string f = special_candidate(path, literal, "HDF5_VDS_PREFIX"); !f.empty()) {
        return absl::StrCat("its virtual source file '", name, "' is ", f,
                            ", not a regular file: refused, as libhdf5 would wait on it");
      }
    }
  }
  H5Eclear2(H5E_DEFAULT);
  return "";
}

}  // namespace dlfeed::inline DLFEED_ABI::detail::h5
