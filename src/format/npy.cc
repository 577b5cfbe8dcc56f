// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/format/npy.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "array_source.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "format/index_codec.h"
#include "format/paths.h"

namespace dlfeed::inline DLFEED_ABI {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

}  // namespace

// The header parser (npy_header_size, parse_npy_header, NpyHeader::num_elements,
// npy_detail::shape_overflow) is in the header tier: dlfeed/format/npy-inl.h.

std::string make_npy_header(DType dtype, const Shape& shape, bool fortran_order) {
  std::string shape_text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    absl::StrAppend(&shape_text, shape[i], shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  }
  shape_text += ")";
  std::string dict = absl::StrCat("{'descr': '", dtype.str(), "', 'fortran_order': ", fortran_order ? "True" : "False",
                                  ", 'shape': ", shape_text, ", }");
  const bool v2 = dict.size() + 11 > 65535;
  const size_t pre = v2 ? 12 : 10;
  size_t total = pre + dict.size() + 1;
  const size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict.push_back('\n');
  std::string out(kMagic, 6);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back(0);
  const uint32_t len = static_cast<uint32_t>(dict.size());
  out.push_back(static_cast<char>(len & 0xff));
  out.push_back(static_cast<char>((len >> 8) & 0xff));
  if (v2) {
    out.push_back(static_cast<char>((len >> 16) & 0xff));
    out.push_back(static_cast<char>((len >> 24) & 0xff));
  }
  return out + dict;
}

namespace detail {

namespace {
bool digits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}
}  // namespace

bool dlio_file_name(const std::string& path) {
  namespace fs = std::filesystem;
  // {prefix}_{i}_of_{n}, i below n and written with n's digit count, or
  // without leading zeros (DLIO's releases before it padded them: img_3_of_12).
  const fs::path p(path);
  const std::string name = p.stem().string();
  const size_t of = name.rfind("_of_");
  if (of == std::string::npos) return false;
  const absl::string_view n_text = absl::string_view(name).substr(of + 4);
  const size_t us = name.rfind('_', of == 0 ? 0 : of - 1);
  if (us == std::string::npos || us == 0 || of == 0) return false;
  const absl::string_view i_text = absl::string_view(name).substr(us + 1, of - us - 1);
  uint64_t i = 0, n = 0;
  const bool width =
      i_text.size() == n_text.size() || (i_text.size() < n_text.size() && (i_text.size() == 1 || i_text[0] != '0'));
  return digits(n_text) && digits(i_text) && width && absl::SimpleAtoi(i_text, &i) && absl::SimpleAtoi(n_text, &n) &&
         i < n;
}

bool in_dlio_layout(const std::string& path) {
  namespace fs = std::filesystem;
  if (!dlio_file_name(path)) return false;
  // {data}/{train|valid}/ or {data}/{train|valid}/{k}/ (DLIO's subfolders),
  // by any name the folder goes by: the path given (a link or a mount point
  // named train/), the folder it resolves to (".", a relative path, a link
  // to train/) or its source under a bind mount.
  auto is_split = [&](fs::path dir) {
    if (digits(dir.filename().string())) dir = dir.parent_path();
    const std::string split = dir.filename().string();
    return split == "train" || split == "valid";
  };
  // The name given first: it costs no system call, and DLIO's folders are
  // mostly named so.
  const std::string given = fs::path(path).parent_path().lexically_normal().string();
  return is_split(fs::path(given).filename().empty() ? fs::path(given).parent_path() : fs::path(given)) ||
         is_split(real_folder(given)) || is_split(source_folder(given));
}

SampleAxis resolve_axis(const FormatOptions& options, const std::string& path) {
  if (options.axis != SampleAxis::kAuto) return options.axis;
  // A name alone proves nothing (a user's own img_0_of_1.npy keeps its first
  // axis); the name in the place DLIO's generator puts it does.
  return in_dlio_layout(path) ? SampleAxis::kLast : SampleAxis::kFirst;
}

// A sample's span (0 when it has no element: (0 - 1) x stride would count
// backwards) and whether its strides are exactly its own C-order strides,
// from g.dims and g.strides. True when the sample is empty.
bool set_span(SampleGeometry& g) {
  bool empty = false;
  for (int64_t d : g.dims) empty = empty || d == 0;
  int64_t span = 1;
  for (size_t i = 0; i < g.dims.size() && !empty; ++i) span += (g.dims[i] - 1) * g.strides[i];
  g.span = empty ? 0 : span;
  g.contiguous = true;
  int64_t expect = 1;
  for (size_t i = g.dims.size(); i-- > 0;) {
    if (g.dims[i] != 1 && g.strides[i] != expect) g.contiguous = false;
    expect *= g.dims[i];
  }
  return empty;
}

// The whole array as one sample (SampleAxis::kNone): its own shape and
// strides, any rank (a 0-d array too).
SampleGeometry whole_geometry(const NpyHeader& h, std::vector<int64_t> strides, int64_t elems) {
  SampleGeometry g;
  g.dims = h.shape;
  g.strides = std::move(strides);
  g.axis_stride = std::max<int64_t>(elems, 1);
  set_span(g);
  return g;
}

absl::StatusOr<SampleGeometry> sample_geometry(const NpyHeader& h, SampleAxis axis, absl::string_view path) {
  if (h.shape.empty() && axis == SampleAxis::kNone) return whole_geometry(h, {}, 1);
  if (h.shape.empty()) {
    // A valid file dlfeed does not read as samples: InvalidArgument (docs/formats.md), not DataLoss.
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": expected an array with at least one dimension (the sample axis), found a 0-d scalar array"));
  }
  const size_t nd = h.shape.size();
  std::vector<int64_t> strides(nd);
  int64_t s = 1;
  if (h.fortran_order) {
    for (size_t i = 0; i < nd; ++i) {
      strides[i] = s;
      s *= std::max<int64_t>(h.shape[i], 1);
    }
  } else {
    for (size_t i = nd; i-- > 0;) {
      strides[i] = s;
      s *= std::max<int64_t>(h.shape[i], 1);
    }
  }
  if (axis == SampleAxis::kNone) return whole_geometry(h, std::move(strides), s);
  const size_t a = axis == SampleAxis::kLast ? nd - 1 : 0;
  SampleGeometry g;
  g.axis_stride = strides[a];
  for (size_t i = 0; i < nd; ++i) {
    if (i == a) continue;
    g.dims.push_back(h.shape[i]);
    g.strides.push_back(strides[i]);
  }
  // Empty samples cost no bytes, so nothing in the file would bound how many
  // a header can claim (a 128-byte file announcing 10^12 of them): refused,
  // as a valid array dlfeed does not read (numpy reads it).
  if (set_span(g) && h.shape[a] > 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected samples of at least one element, found ",
                                                   h.shape[a], " empty samples in an array of shape ",
                                                   shape_str(h.shape)));
  }
  return g;
}

void gather_strided(const std::byte* src, std::byte* dst, const Shape& dims, const std::vector<int64_t>& strides,
                    size_t itemsize) {
  const size_t nd = dims.size();
  if (nd == 0) {
    std::memcpy(dst, src, itemsize);
    return;
  }
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  std::vector<int64_t> idx(nd, 0);
  const int64_t inner = dims[nd - 1];
  const int64_t inner_stride = strides[nd - 1] * static_cast<int64_t>(itemsize);
  const std::byte* base = src;
  while (true) {
    const std::byte* p = base;
    if (strides[nd - 1] == 1) {
      std::memcpy(dst, p, inner * itemsize);
      dst += inner * itemsize;
    } else {
      switch (itemsize) {
        case 1:
          for (int64_t i = 0; i < inner; ++i, p += inner_stride) *dst++ = *p;
          break;
        case 2:
          for (int64_t i = 0; i < inner; ++i, p += inner_stride, dst += 2) std::memcpy(dst, p, 2);
          break;
        case 4:
          for (int64_t i = 0; i < inner; ++i, p += inner_stride, dst += 4) std::memcpy(dst, p, 4);
          break;
        default:
          for (int64_t i = 0; i < inner; ++i, p += inner_stride, dst += 8) std::memcpy(dst, p, 8);
          break;
      }
    }
    // Advance the outer indices (odometer).
    size_t k = nd - 1;
    while (k-- > 0) {
      base += strides[k] * static_cast<int64_t>(itemsize);
      if (++idx[k] < dims[k]) break;
      base -= strides[k] * dims[k] * static_cast<int64_t>(itemsize);
      idx[k] = 0;
    }
    if (k == static_cast<size_t>(-1)) return;
  }
}

uint64_t ArraySource::num_samples() const {
  if (axis_ == SampleAxis::kNone) return 1;
  const size_t a = axis_ == SampleAxis::kLast ? header_.shape.size() - 1 : 0;
  return static_cast<uint64_t>(header_.shape[a]);
}

std::string ArraySource::describe() const {
  return absl::StrCat(name_.empty() ? "" : absl::StrCat("member '", name_, "' "), "array ", shape_str(header_.shape),
                      " ", header_.dtype.str(), header_.fortran_order ? " fortran-order" : "",
                      axis_ == SampleAxis::kNone   ? ", the whole array one sample (axis none; "
                      : axis_ == SampleAxis::kLast ? ", samples on the last axis (the DLIO layout; "
                                                   : ", samples on the first axis (",
                      geometry_.contiguous ? "contiguous" : "strided", "), NPY ", header_.major, ".", header_.minor);
}

void ArraySource::fill(uint64_t k, SampleRef& ref) const {
  ref.shape = geometry_.dims;
  ref.dtype = header_.dtype;
  const uint64_t isz = header_.dtype.size;
  if (deflated_) {
    ref.extents.push_back({member_.data_offset, member_.compressed_size});
  } else if (geometry_.span > 0) {
    ref.extents.push_back({array_offset_ + header_.data_offset + k * geometry_.axis_stride * isz,
                           static_cast<uint64_t>(geometry_.span) * isz});
  }
}

void ArraySource::cache_save(std::string& out) const {
  CacheWriter w(out);
  w.str(name_);
  w.u32(static_cast<uint32_t>(header_.major));
  w.u32(static_cast<uint32_t>(header_.minor));
  w.dtype(header_.dtype);
  w.u8(header_.fortran_order ? 1 : 0);
  w.shape(header_.shape);
  w.u64(header_.data_offset);
  w.u8(axis_ == SampleAxis::kNone ? 2 : axis_ == SampleAxis::kLast ? 1 : 0);
  w.str(layout_);
  w.u8(deflated_ ? 1 : 0);
  w.str(member_.name);
  w.u32(member_.method);
  w.u32(member_.crc32);
  w.u64(member_.compressed_size);
  w.u64(member_.uncompressed_size);
  w.u64(member_.local_header_offset);
  w.u64(member_.data_offset);
  w.u64(array_offset_);
}

absl::StatusOr<std::unique_ptr<ArraySource>> load_array_source(const std::string& path, uint64_t file_size,
                                                               CacheReader& in) {
  std::string name = in.str();
  NpyHeader h;
  h.major = static_cast<int>(in.u32());
  h.minor = static_cast<int>(in.u32());
  h.dtype = in.dtype();
  h.fortran_order = in.u8() != 0;
  h.shape = in.shape();
  h.data_offset = in.u64();
  const uint8_t axis_tag = in.u8();
  const SampleAxis axis = axis_tag == 2 ? SampleAxis::kNone : axis_tag == 1 ? SampleAxis::kLast : SampleAxis::kFirst;
  std::string layout = in.str();
  const bool deflated = in.u8() != 0;
  ZipMember m;
  m.name = in.str();
  m.method = static_cast<uint16_t>(in.u32());
  m.crc32 = in.u32();
  m.compressed_size = in.u64();
  m.uncompressed_size = in.u64();
  m.local_header_offset = in.u64();
  m.data_offset = in.u64();
  const uint64_t array_offset = in.u64();
  if (!in.ok()) return file_error(path, "an array entry in the index cache", "a truncated or malformed one");
  // The checks open_npy and open_npz make on a header, on the cached one.
  uint64_t elems = 0, bytes = 0, end = 0;
  if (std::any_of(h.shape.begin(), h.shape.end(), [](int64_t d) { return d < 0; }) ||
      npy_detail::shape_overflow(h.shape, elems) != nullptr) {
    return file_error(path, "a cached array shape of sizes 0 or more", shape_str(h.shape));
  }
  if (__builtin_mul_overflow(elems, uint64_t{h.dtype.size}, &bytes) ||
      __builtin_add_overflow(bytes, h.data_offset, &end)) {
    return file_error(path, "a cached array that fits in 64-bit offsets", shape_str(h.shape));
  }
  if (deflated) {
    uint64_t member_end = 0;
    if (__builtin_add_overflow(m.data_offset, m.compressed_size, &member_end) || member_end > file_size ||
        end > m.uncompressed_size || m.uncompressed_size / 1032 > m.compressed_size + 1) {
      return file_error(
          path, absl::StrCat("a cached deflated member within the file of ", file_size, " bytes"),
          absl::StrCat(m.compressed_size, " bytes at offset ", m.data_offset, " inflating to ", m.uncompressed_size));
    }
  } else if (__builtin_add_overflow(end, array_offset, &end) || end > file_size) {
    return file_error(path, absl::StrCat("cached array data within the file of ", file_size, " bytes"),
                      absl::StrCat("data ending at offset ", end));
  }
  DLFEED_ASSIGN_OR_RETURN(SampleGeometry g, sample_geometry(h, axis, path));
  auto src = std::make_unique<ArraySource>(path, std::move(name), std::move(h), std::move(g), axis, std::move(layout));
  if (deflated) src->set_deflated(m);
  src->set_array_offset(array_offset);
  return src;
}

uint64_t ArraySource::total_read_bytes() const {
  if (deflated_) return num_samples() * member_.compressed_size;
  return geometry_.span > 0 ? num_samples() * static_cast<uint64_t>(geometry_.span) * header_.dtype.size : 0;
}

bool ArraySource::unpack_pays() const {
  if (deflated_) return true;
  const uint64_t isz = header_.dtype.size;
  const uint64_t sample = static_cast<uint64_t>(num_elements(geometry_.dims)) * isz;
  return !geometry_.contiguous && sample > 0 && static_cast<uint64_t>(geometry_.span) * isz >= 2 * sample;
}

Extent ArraySource::unpack_extent() const {
  if (deflated_) return {member_.data_offset, member_.compressed_size};
  return {array_offset_ + header_.data_offset, header_.data_bytes()};
}

absl::StatusOr<std::span<const std::byte>> ArraySource::unpack(std::span<const std::byte> raw, ByteBuffer& out) const {
  if (!deflated_) return raw;
  // Inflate the whole member; check its CRC-32 and size against the directory.
  out.resize(member_.uncompressed_size);
  std::span<std::byte> inflated(out.data(), out.size());
  {
    counters::StepTimer inflate(counters::Id::kDecodeInflate);
    DLFEED_RETURN_IF_ERROR(
        inflate_raw(raw, inflated, path_, member_.data_offset, absl::StrCat("member '", member_.name, "'")));
  }
  uint32_t crc = 0;
  {
    counters::StepTimer check(counters::Id::kDecodeCrc);
    crc = zip_crc32(inflated);
  }
  if (crc != member_.crc32) {
    return format_error(path_, member_.data_offset,
                        absl::StrFormat("CRC-32 %08x of member '%s'", member_.crc32, member_.name),
                        absl::StrFormat("%08x", crc));
  }
  if (header_.data_offset > inflated.size() || header_.data_bytes() > inflated.size() - header_.data_offset) {
    return format_error(path_, member_.data_offset, "the array's data inside the inflated member",
                        "a member shorter than its header says");
  }
  return std::span<const std::byte>(inflated.data() + header_.data_offset, header_.data_bytes());
}

absl::StatusOr<DecodedSample> ArraySource::decode_unpacked(const SampleRef& ref, std::span<const std::byte> data,
                                                           std::vector<std::byte>& scratch) const {
  const uint64_t isz = header_.dtype.size;
  const uint64_t out_bytes = ref.nbytes();
  DecodedSample out{{}, ref.shape, ref.dtype};
  if (geometry_.span == 0) return out;
  const uint64_t start = ref.item * geometry_.axis_stride * isz;
  const uint64_t span = static_cast<uint64_t>(geometry_.span) * isz;
  if (start > data.size() || span > data.size() - start) {
    const Extent e = unpack_extent();
    return format_error(path_, e.offset, absl::StrCat(span, " bytes of sample ", ref.item, " at ", start),
                        absl::StrCat("array data of ", data.size(), " bytes"));
  }
  return view_or_gather(data.data() + start, std::move(out), out_bytes, scratch);
}

DecodedSample ArraySource::view_or_gather(const std::byte* first, DecodedSample out, uint64_t out_bytes,
                                          std::vector<std::byte>& scratch) const {
  if (geometry_.contiguous) {
    out.bytes = std::span<const std::byte>(first, out_bytes);
    return out;
  }
  scratch.resize(out_bytes);
  gather_strided(first, scratch.data(), geometry_.dims, geometry_.strides, header_.dtype.size);
  out.bytes = std::span<const std::byte>(scratch.data(), out_bytes);
  return out;
}

absl::StatusOr<DecodedSample> ArraySource::decode(const SampleRef& ref, std::span<std::byte> raw,
                                                  std::vector<std::byte>& scratch) const {
  const uint64_t isz = header_.dtype.size;
  const uint64_t out_bytes = ref.nbytes();
  DecodedSample out{{}, ref.shape, ref.dtype};
  if (geometry_.span == 0) return out;
  if (deflated_) {
    // Each sample's extent is the whole member: inflate it all (the loader
    // unpacks it once instead, src/read/unpacked.h).
    ByteBuffer inflated;
    DLFEED_ASSIGN_OR_RETURN(std::span<const std::byte> data, unpack(raw, inflated));
    DLFEED_ASSIGN_OR_RETURN(out, decode_unpacked(ref, data, scratch));
    if (out.bytes.data() != scratch.data()) {  // a view into `inflated`, which goes away
      scratch.assign(out.bytes.begin(), out.bytes.end());
      out.bytes = std::span<const std::byte>(scratch.data(), out_bytes);
    }
    return out;
  }
  if (raw.size() < static_cast<uint64_t>(geometry_.span) * isz) {
    return format_error(path_, ref.extents.empty() ? 0 : ref.extents[0].offset,
                        absl::StrCat(geometry_.span * isz, " bytes of sample ", ref.item),
                        absl::StrCat(raw.size(), " bytes"));
  }
  return view_or_gather(raw.data(), std::move(out), out_bytes, scratch);
}

}  // namespace detail

absl::StatusOr<SampleIndex> open_npy(const std::string& path, const FormatOptions& options) {
  DLFEED_ASSIGN_OR_RETURN(detail::File f, detail::File::open(path));
  std::vector<std::byte> pre(std::min<uint64_t>(kNpyPreamble, f.size()));
  DLFEED_RETURN_IF_ERROR(f.read_exact(0, pre, "NPY preamble"));
  DLFEED_ASSIGN_OR_RETURN(uint64_t hsize, npy_header_size(pre, path, 0));
  std::vector<std::byte> hbytes(hsize);
  DLFEED_RETURN_IF_ERROR(f.read_exact(0, hbytes, "NPY header"));
  DLFEED_ASSIGN_OR_RETURN(NpyHeader h, parse_npy_header(hbytes, path, 0));
  if (h.data_bytes() > f.size() - h.data_offset) {
    return format_error(
        path, h.data_offset,
        absl::StrCat(h.data_bytes(), " bytes of array data for shape ", shape_str(h.shape), " ", h.dtype.str()),
        absl::StrCat(f.size() - h.data_offset, " bytes before the end of the file"));
  }
  const SampleAxis axis = detail::resolve_axis(options, path);
  DLFEED_ASSIGN_OR_RETURN(detail::SampleGeometry g, detail::sample_geometry(h, axis, path));
  SampleIndex index;
  index.add_file(path, std::make_unique<detail::ArraySource>(path, "", h, g, axis, "npy"));
  index.identities.assign(1, f.identity());
  return index;
}

}  // namespace dlfeed
