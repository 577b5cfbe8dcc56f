// SPDX-License-Identifier: Apache-2.0
// HDF5: what a dataset's creation properties and storage say of how its bytes
// can be read (hdf5_source.h): the fill value, the filters, the chunk shape,
// the layouts read by extents, the dataset's own file, and unwritten storage
// without values. hdf5.cc builds the index from them.
#include <hdf5.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hdf5_source.h"
#include "hdf5_util.h"

namespace dlfeed::inline DLFEED_ABI::detail::h5 {
namespace {

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

}  // namespace

H5D_fill_value_t read_fill(hid_t dcpl, hid_t type, DatasetGeometry& g) {
  g.fill.assign(g.dtype.size, std::byte{0});
  H5D_fill_value_t fv = H5D_FILL_VALUE_DEFAULT;
  if (H5Pfill_value_defined(dcpl, &fv) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return H5D_FILL_VALUE_DEFAULT;
  }
  if (fv == H5D_FILL_VALUE_USER_DEFINED && H5Pget_fill_value(dcpl, type, g.fill.data()) < 0) {
    H5Eclear2(H5E_DEFAULT);
    g.fill.assign(g.dtype.size, std::byte{0});
  }
  return fv;
}

absl::Status check_unwritten(hid_t dset, hid_t dcpl, H5D_fill_value_t fv, const DatasetGeometry& g) {
  H5D_fill_time_t when = H5D_FILL_TIME_IFSET;
  const bool undefined = fv == H5D_FILL_VALUE_UNDEFINED;
  const bool never = H5Pget_fill_time(dcpl, &when) >= 0 && when == H5D_FILL_TIME_NEVER;
  H5Eclear2(H5E_DEFAULT);
  if (!undefined && !never) return absl::OkStatus();
  H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
  if (H5Dget_space_status(dset, &status) >= 0 && status == H5D_SPACE_STATUS_ALLOCATED) return absl::OkStatus();
  H5Eclear2(H5E_DEFAULT);
  uint64_t total = 0;
  if (g.dims.empty() || !mul_ok(g.dims[0], g.sample_bytes, &total) || total == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(g.path, ": dataset '", g.name, "' has storage never written and no value for it (",
                   undefined ? "its fill value is set to none" : "its fill time is 'never'",
                   "): its samples there have no defined bytes; write the whole dataset, or give it a fill value"));
}

std::string in_another_file(hid_t file, hid_t dset) {
  Hid own(H5Iget_file_id(dset), H5Fclose);
  if (!own.ok()) {
    H5Eclear2(H5E_DEFAULT);
    return "";
  }
  auto name_of = [](hid_t f) {
    const ssize_t n = H5Fget_name(f, nullptr, 0);
    std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
    if (n > 0) H5Fget_name(f, out.data(), out.size() + 1);
    return out;
  };
  const std::string there = name_of(own.get());
  if (there == name_of(file)) return "";
  return absl::StrCat("the dataset is in another file, ", there, " (an external link)");
}

FilterPipeline read_filters(hid_t dcpl, H5D_layout_t layout, DatasetGeometry& g) {
  FilterPipeline pipeline;
  pipeline.shuffle_size = g.dtype.size;
  std::vector<std::string> filter_names;
  int nfilters = layout == H5D_CHUNKED ? H5Pget_nfilters(dcpl) : 0;
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0, cd[8] = {};
    size_t ncd = 8;
    char fname[64] = {};
    H5Z_filter_t id = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &ncd, cd, sizeof fname, fname, nullptr);
    std::string label = filter_name(id, fname);
    if (id == H5Z_FILTER_DEFLATE && ncd >= 1) label = absl::StrCat("deflate(", cd[0], ")");
    filter_names.push_back(label);
    std::vector<Filter>& steps = pipeline.steps;
    if (id == H5Z_FILTER_SHUFFLE && steps.empty()) {
      steps.push_back(Filter::kShuffle);
      if (ncd >= 1 && cd[0] > 0) pipeline.shuffle_size = cd[0];
    } else if (id == H5Z_FILTER_DEFLATE && std::find(steps.begin(), steps.end(), Filter::kDeflate) == steps.end()) {
      steps.push_back(Filter::kDeflate);
    } else {
      if (g.reason.empty()) g.reason = absl::StrCat("filter ", filter_name(id, fname), " is not decoded by dlfeed");
      // Read through libhdf5, which needs the filter (a plugin for most): without it every chunk the
      // filter changed fails to read, mid-epoch; said at create instead.
      if (g.missing_filter.empty() && H5Zfilter_avail(id) <= 0) g.missing_filter = filter_name(id, fname);
    }
  }
  g.filters = absl::StrJoin(filter_names, "+");
  return pipeline;
}

absl::Status read_chunk_shape(hid_t dcpl, DatasetGeometry& g) {
  const int rank = static_cast<int>(g.dims.size());
  std::vector<hsize_t> hchunk(g.dims.size());
  if (H5Pget_chunk(dcpl, rank, hchunk.data()) != rank) {
    return h5_fail(g.path, absl::StrCat("the chunk shape of dataset '", g.name, "'"));
  }
  g.chunk.assign(hchunk.begin(), hchunk.end());
  return absl::OkStatus();
}

std::string unsupported_storage(hid_t dcpl, H5D_layout_t layout, const FilterPipeline& pipeline) {
  if (H5Pget_external_count(dcpl) > 0) return "the data is in external files";
  if (layout == H5D_COMPACT) return "compact layout (the data lives inside the object header)";
  if (layout == H5D_VIRTUAL) return "virtual dataset (mapped from other datasets)";
  if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED) return "an unknown storage layout";
  unsigned opts = 0;
  if (layout == H5D_CHUNKED && !pipeline.steps.empty() && H5Pget_chunk_opts(dcpl, &opts) >= 0 &&
      (opts & H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS)) {
    return "partial edge chunks are stored unfiltered";
  }
  return "";
}

uint64_t userblock_of(hid_t file) {
  hsize_t userblock = 0;
  Hid fcpl(H5Fget_create_plist(file), H5Pclose);
  if (fcpl.ok()) H5Pget_userblock(fcpl.get(), &userblock);
  return userblock;
}

}  // namespace dlfeed::detail::h5
