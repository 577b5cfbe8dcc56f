// SPDX-License-Identifier: Apache-2.0
// The sample index: for every sample, the file, the byte extents to read and
// what the decoded sample is (shape, dtype). Built once at open by a format;
// after that the bytes are read with plain reads and decoded from memory,
// with no format library on the hot path.
//
// The index holds no object per sample. Each file has one source, and the
// source computes a sample's extents, shape and dtype from its number: from
// the array geometry for NPY, stored NPZ and contiguous HDF5 (no memory per
// sample), from the chunk table for chunked HDF5 (memory per chunk), from a
// table of record offsets for TFRecord (16 bytes per record). A SampleRef is
// made on demand (SampleIndex::ref) and is not kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/dtype.h"

namespace dlfeed::inline DLFEED_ABI {

/// A run of bytes in one file: what a read request fetches.
struct DLFEED_EXPORT Extent {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const Extent&) const = default;
};

/// A tensor shape; -1 in a dimension means "known only after decode".
using Shape = absl::InlinedVector<int64_t, 4>;

/// Number of elements of a shape (0 if any dimension is unknown).
DLFEED_EXPORT int64_t num_elements(const Shape& shape);
/// "(2, 3, 4)" as numpy prints shapes.
DLFEED_EXPORT std::string shape_str(const Shape& shape);

/// One sample as the index knows it, before any byte is read: made on
/// demand by SampleIndex::ref from its file's source.
struct DLFEED_EXPORT SampleRef {
  uint32_t file = 0;                       // into SampleIndex::files
  uint32_t source = 0;                     // into SampleIndex::sources: the decoder of this sample
  uint64_t item = 0;                       // the sample's position within its source
  absl::InlinedVector<Extent, 1> extents;  // bytes to read, in this order
  Shape shape;                             // decoded shape (may hold -1)
  DType dtype;                             // decoded element type

  /// Decoded byte count, or 0 when the shape is not known before decode.
  uint64_t nbytes() const { return static_cast<uint64_t>(num_elements(shape)) * dtype.size; }
  /// Total bytes the extents cover on disk.
  uint64_t read_bytes() const;
};

/// A decoded sample: a view of its bytes (into the raw buffer or scratch).
struct DLFEED_EXPORT DecodedSample {
  std::span<const std::byte> bytes;
  Shape shape;
  DType dtype;
};

/// One dataset / member / record stream inside one file. It knows the
/// geometry its samples share and turns a sample's raw bytes into the sample.
class DLFEED_EXPORT SampleSource {
 public:
  virtual ~SampleSource() = default;
  /// Short layout tag shown by `dlfeed inspect`, e.g. "npy", "npz:deflated",
  /// "hdf5:chunked+deflate", "tfrecord".
  virtual std::string layout() const = 0;
  /// One line describing the source (name, shape, dtype, sample axis).
  virtual std::string describe() const = 0;
  /// How its samples are cut from what the file holds: "axis 0", "the last
  /// axis", "axis none" (the whole array one sample), or "records" (the
  /// default: each record of the file is a sample, as in TFRecord).
  virtual std::string sample_axis() const { return "records"; }
  /// Decodes `ref` from `raw`, the bytes of its extents concatenated in
  /// order. The result views `raw` where it can (zero copy) or `scratch`.
  /// `raw` is mutable so decoders may transform in place.
  virtual absl::StatusOr<DecodedSample> decode(const SampleRef& ref, std::span<std::byte> raw,
                                               std::vector<std::byte>& scratch) const = 0;
  /// True when samples cannot be resolved to extents and decode() reads
  /// through the format library itself (raw is then empty).
  virtual bool reads_through_library() const { return false; }
  /// True when decode(ref) would return exactly the bytes of ref's single
  /// extent (raw, contiguous, unchecked): the loader then reads such samples
  /// straight into the batch and skips decode.
  virtual bool is_identity(const SampleRef& ref) const {
    (void)ref;
    return false;
  }
  /// The dtype and shape its samples have (-1 for dimensions known only
  /// after decode), when the source knows them without any sample: what
  /// describes a field whose files hold no sample at all.
  virtual std::optional<std::pair<DType, Shape>> sample_spec() const { return std::nullopt; }
  /// Where the samples sit when every one is a single raw extent at a fixed
  /// stride, decoded as is (is_identity for each) to sample_spec()'s dtype
  /// and shape: sample k is the `length` bytes at `offset + k * stride`. The
  /// loader then places a batch of them without a SampleRef per sample.
  struct Strided {
    uint64_t offset = 0, stride = 0, length = 0;
  };
  virtual std::optional<Strided> strided() const { return std::nullopt; }

  /// Sets `ref`'s extents, shape and dtype for sample `item` (below
  /// num_samples()); SampleIndex::ref sets file, source and item. Cheap and
  /// thread-safe: called per sample on the hot path.
  virtual void fill(uint64_t item, SampleRef& ref) const = 0;
  /// The number of samples the source holds.
  virtual uint64_t num_samples() const = 0;
  /// True when samples of this source may differ in shape in ways fill()
  /// knows (a compressed TFRecord's exact per-record shapes): uniform_spec
  /// then looks at every sample, not only the first.
  virtual bool shapes_differ() const { return false; }
  /// True when the source is one 0-d array (an HDF5 scalar dataset read with
  /// axis none): one sample of shape (), which stays 0-d read whole.
  virtual bool scalar() const { return false; }
  /// Bytes all samples' extents cover on disk (what an epoch reads without
  /// coalescing). The default sums fill() over every sample.
  virtual uint64_t total_read_bytes() const;
  /// Bytes of memory the source holds for its samples (tables of offsets,
  /// chunks or shapes), for `dlfeed inspect` and the scale benchmark.
  virtual uint64_t index_bytes() const { return 0; }

  /// For the dataset index cache (FormatOptions::index_cache): a tag naming
  /// the source's kind, and its state appended to `out`. An empty tag: the
  /// source is not cached and its file is indexed again at each open.
  virtual std::string cache_tag() const { return {}; }
  virtual void cache_save(std::string& out) const { (void)out; }
};

/// What identifies a file's bytes without reading them: stat's size, mtime
/// (ns), inode, device and change time (ns: st_ctime, which a write sets and
/// no user call can set back, unlike the mtime that `rsync -t`, `tar -x` or
/// `os.utime` restore). device 0 means unknown and is not compared (an
/// identity from another host, whose device numbers may differ); so does
/// ctime_ns 0.
struct DLFEED_EXPORT FileIdentity {
  uint64_t size = 0, mtime_ns = 0, inode = 0, device = 0, ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

/// All samples of a set of files, with file boundaries (for the order stage).
/// File f's samples are ids [file_begin[f], file_begin[f+1]), and
/// sources[f] is its source: sample id is item id - file_begin[f] of it.
struct DLFEED_EXPORT SampleIndex {
  std::vector<std::string> files;
  std::vector<std::unique_ptr<SampleSource>> sources;  // one per file
  /// file_begin[f] is the first sample id of file f; file_begin.back() is
  /// the number of samples.
  std::vector<uint64_t> file_begin{0};
  /// Each file's identity when the index knows it without asking the file
  /// system again (from the index cache's check, or from the rank that
  /// indexed for an MPI job): one per file, else empty or incomplete, and
  /// then not used. The loader's file table takes them instead of a stat
  /// per file; a file whose first open finds another identity is an error.
  std::vector<FileIdentity> identities;
  bool has_identities() const { return identities.size() == files.size(); }

  uint64_t size() const { return file_begin.empty() ? 0 : file_begin.back(); }
  bool empty() const { return size() == 0; }
  uint64_t num_files() const { return files.size(); }
  /// The file holding sample `id` (below size()).
  uint32_t file_of(uint64_t id) const;
  /// Sample `id` (below size()) as its source describes it.
  SampleRef ref(uint64_t id) const;
  /// The same into `out`, reusing its storage.
  void ref(uint64_t id, SampleRef& out) const;
  /// The same when the caller knows the file (file_of(id)).
  void ref_in_file(uint64_t id, uint32_t file, SampleRef& out) const;
  /// Bytes every sample's extents cover on disk, summed over the sources.
  uint64_t total_read_bytes() const;
  /// Memory the sources hold for their samples, plus the file table.
  uint64_t index_bytes() const;
  /// Adds one file: its path, its source and its sample count
  /// (source->num_samples()).
  void add_file(std::string path, std::unique_ptr<SampleSource> source);
  /// Appends another index (renumbering its files and sources).
  void append(SampleIndex&& other);
  /// OK when there is one source per file and each source's sample count
  /// matches file_begin; what a hand-built index must satisfy.
  absl::Status check() const;
};

/// How many samples a file gives, along what, so that a misread shows at a
/// glance: "1 sample per file (axis none)", "2304 samples per file along
/// axis 0", "1 to 709 samples per file along axis 0", "no file".
DLFEED_EXPORT std::string samples_per_file_str(const SampleIndex& index);

/// What the samples of one field share.
struct DLFEED_EXPORT FieldSpec {
  DType dtype;
  /// The sample shape: -1 where samples differ or the size is known only
  /// after decode. Empty with rank_varies when samples differ in rank.
  Shape shape;
  bool rank_varies = false;
  bool known = false;  // false: no sample and no source says (dtype and shape are guesses)
};

/// The spec every sample of `index` shares. A dtype that differs between
/// samples is an InvalidArgument error naming both files and both dtypes
/// (bytes of one dtype must never be read as another); so is a shape, unless
/// `allow_varying_shapes` (ragged batches), or unless the dimension is one
/// its source declares variable (-1 in sample_spec(): a TFRecord feature
/// without a fixed shape). `field` names the field in errors.
DLFEED_EXPORT absl::StatusOr<FieldSpec> uniform_spec(const SampleIndex& index, absl::string_view field,
                                                     bool allow_varying_shapes);

/// Reads and decodes sample `id` with plain pread (no prefetch): the simple
/// path used by tools and tests. `out` receives the decoded bytes.
DLFEED_EXPORT absl::StatusOr<DecodedSample> read_sample(const SampleIndex& index, uint64_t id,
                                                        std::vector<std::byte>& raw, std::vector<std::byte>& scratch);

}  // namespace dlfeed

#include "dlfeed/detail/inline.h"
#ifdef DLFEED_HEADER_ONLY
#include "dlfeed/sample-inl.h"
#endif
