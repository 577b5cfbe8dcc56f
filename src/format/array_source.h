// SPDX-License-Identifier: Apache-2.0
// Private: samples cut from one dense array (an .npy file or an .npz member)
// along its first or last axis, stored raw or inside a deflated zip member.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dlfeed/batch/batch.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/format/format.h"
#include "dlfeed/format/npy.h"
#include "dlfeed/format/zip.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// How one sample sits in the array: element strides of its dimensions and
/// the element span it touches.
struct SampleGeometry {
  Shape dims;                    // the sample's shape (C order)
  std::vector<int64_t> strides;  // element strides in the array, per sample dim
  int64_t axis_stride = 0;       // element stride between consecutive samples
  int64_t span = 0;              // elements from the sample's first to last element, inclusive
  bool contiguous = false;       // C-ordered and dense: zero-copy
};

/// Geometry of samples of `h` along `axis` (kFirst or kLast), or of the
/// whole array as one sample (kNone).
absl::StatusOr<SampleGeometry> sample_geometry(const NpyHeader& h, SampleAxis axis, absl::string_view path);

/// Copies a strided sample into C order: `src` points at the sample's first element.
void gather_strided(const std::byte* src, std::byte* dst, const Shape& dims, const std::vector<int64_t>& strides,
                    size_t itemsize);

/// True for a file named as DLIO's generator names it: {prefix}_{i}_of_{n}.ext,
/// i below n and zero-padded to n's digits.
bool dlio_file_name(const std::string& path);

/// True for a file where and as DLIO's generator writes it:
/// .../{train|valid}/[{k}/]{prefix}_{i}_of_{n}.ext, i zero-padded to n's digits.
/// The folder is judged by every name it goes by (the path given, and
/// format/paths.h's real_folder and source_folder): ./x, train/x and a link
/// to train/ read alike.
bool in_dlio_layout(const std::string& path);

/// The resolved sample axis for a file under `options` (kAuto: kLast only for
/// files in_dlio_layout).
SampleAxis resolve_axis(const FormatOptions& options, const std::string& path);

class CacheReader;
class ArraySource;
/// An ArraySource from its cache_save() bytes, checked as open_npy and
/// open_npz check a file's header (the cache is untrusted input):
/// InvalidArgument naming what is wrong.
absl::StatusOr<std::unique_ptr<ArraySource>> load_array_source(const std::string& path, uint64_t file_size,
                                                               CacheReader& in);

/// A dense array's samples; raw bytes or a deflated zip member.
class ArraySource : public SampleSource {
 public:
  ArraySource(std::string path, std::string name, NpyHeader header, SampleGeometry geometry, SampleAxis axis,
              std::string layout)
      : path_(std::move(path)),
        name_(std::move(name)),
        header_(std::move(header)),
        geometry_(std::move(geometry)),
        axis_(axis),
        layout_(std::move(layout)) {}

  /// Samples live inside a deflated zip member: every sample's extent is the
  /// whole compressed member, inflated (and CRC-checked) at decode.
  void set_deflated(const ZipMember& m) {
    deflated_ = true;
    member_ = m;
  }

  std::string layout() const override { return layout_; }
  std::string sample_axis() const override {
    return axis_ == SampleAxis::kNone ? "axis none" : axis_ == SampleAxis::kLast ? "the last axis" : "axis 0";
  }
  bool is_identity(const SampleRef& ref) const override {
    return !deflated_ && geometry_.contiguous && ref.extents.size() == 1;
  }
  std::optional<Strided> strided() const override {
    if (deflated_ || !geometry_.contiguous || geometry_.span <= 0) return std::nullopt;
    const uint64_t isz = header_.dtype.size;
    return Strided{array_offset_ + header_.data_offset, static_cast<uint64_t>(geometry_.axis_stride) * isz,
                   static_cast<uint64_t>(geometry_.span) * isz};
  }
  std::string describe() const override;
  std::optional<std::pair<DType, Shape>> sample_spec() const override {
    return std::make_pair(header_.dtype, geometry_.dims);
  }
  absl::StatusOr<DecodedSample> decode(const SampleRef& ref, std::span<std::byte> raw,
                                       std::vector<std::byte>& scratch) const override;

  /// Where the NPY stream starts in the file (0 for an .npy file).
  void set_array_offset(uint64_t offset) { array_offset_ = offset; }
  void fill(uint64_t k, SampleRef& ref) const override;
  uint64_t num_samples() const override;
  uint64_t total_read_bytes() const override;
  std::string cache_tag() const override { return "array"; }

  // Unpacking (LoaderOptions::unpack, src/read/unpacked.h): the whole array
  // read (and inflated) once, its samples gathered from memory.
  /// True when that beats reading per sample: a deflated member (each
  /// sample would read and inflate all of it) or a strided array whose
  /// samples each span at least twice their own bytes (the DLIO layout:
  /// each spans nearly the whole array).
  bool unpack_pays() const;
  /// What to read for it: the compressed member, or the array's data.
  Extent unpack_extent() const;
  /// Bytes it keeps beyond what was read: the inflated member (0 for a raw
  /// array, whose data is what was read).
  uint64_t unpack_inflated_bytes() const { return deflated_ ? member_.uncompressed_size : 0; }
  /// The array's data from the bytes of unpack_extent(): a deflated member
  /// is inflated into `out` and its CRC-32 checked (the view is into `out`);
  /// a raw array's data is `raw` itself. Errors name the file and offset.
  absl::StatusOr<std::span<const std::byte>> unpack(std::span<const std::byte> raw, ByteBuffer& out) const;
  /// Sample `ref` from the data unpack() gave: a view into it when the
  /// sample is contiguous there, else gathered into `scratch`.
  absl::StatusOr<DecodedSample> decode_unpacked(const SampleRef& ref, std::span<const std::byte> data,
                                                std::vector<std::byte>& scratch) const;
  void cache_save(std::string& out) const override;

 private:
  /// `out` holding the sample whose first element is at `first`: a view
  /// when the sample is contiguous, else gathered into `scratch`.
  DecodedSample view_or_gather(const std::byte* first, DecodedSample out, uint64_t out_bytes,
                               std::vector<std::byte>& scratch) const;

  std::string path_;
  std::string name_;
  NpyHeader header_;
  SampleGeometry geometry_;
  SampleAxis axis_;
  std::string layout_;
  bool deflated_ = false;
  ZipMember member_;
  uint64_t array_offset_ = 0;
};

}  // namespace dlfeed::detail
