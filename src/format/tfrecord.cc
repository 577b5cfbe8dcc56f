// SPDX-License-Identifier: Apache-2.0
// TFRecord: the tf.train.Example sample source and open_tfrecord (records, sidecars and scans:
// tfrecord_records.cc; a record's other features and the options' reading of them: tfrecord_features.cc).
#include "dlfeed/format/tfrecord.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "array_source.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/crc32c.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/format/example.h"
#include "format/checked_bytes.h"
#include "format/index_codec.h"
#include "format/open_listed.h"
#include "format/split_record.h"
#include "tfrecord_features.h"
#include "tfrecord_scan.h"

namespace dlfeed::inline DLFEED_ABI {

// ---- the sample source ----

namespace {

// The bytes open_tfrecord reads at offset 0 at once: DLIO's one-record
// files, and most records' headers of a small file, fit.
constexpr size_t kHeadBytes = size_t{1} << 16;

using detail::tfr::dtype_of;
using detail::tfr::shape_feature_for;
using example::FeatureKind;

class TfRecordSource final : public SampleSource, public detail::SplitRecords {
 public:
  TfRecordSource(std::string path, const FormatOptions& options, FeatureKind kind, DType dtype, uint64_t records,
                 std::string idx, std::shared_ptr<const tfrecord::CompressedIndex> z = nullptr,
                 tfrecord::Compression compression = tfrecord::Compression::kNone)
      : path_(std::move(path)),
        feature_(options.feature),
        shape_(options.feature_shape),
        shape_given_(options.feature_shape.has_value()),
        verify_(options.verify_crc),
        kind_(kind),
        dtype_(dtype),
        records_(records),
        idx_(std::move(idx)),
        z_(std::move(z)),
        stream_id_(z_ ? tfrecord::new_stream_id() : 0),
        // Offsets in record-level errors of a compressed file are inflated ones.
        where_(z_ ? absl::StrCat(path_, " (inflated ", tfrecord::compression_name(z_->compression), " stream)")
               : compression != tfrecord::Compression::kNone
                   ? absl::StrCat(path_, " (inflated ", tfrecord::compression_name(compression), " stream)")
                   : path_) {}

  std::string layout() const override {
    if (!z_) return "tfrecord";
    return z_->compression == tfrecord::Compression::kGzip ? "tfrecord:gzip" : "tfrecord:zlib";
  }

  std::optional<std::pair<DType, Shape>> sample_spec() const override {
    return std::make_pair(dtype_, shape_ ? *shape_ : Shape{-1});
  }

  /// Every record's shape in this file, read from its shape feature
  /// (`from` names it, for describe() and errors).
  void set_shape(Shape shape, std::string from) {
    shape_ = std::move(shape);
    shape_from_ = std::move(from);
  }
  void copy_shape_from(const TfRecordSource& other) {
    shape_ = other.shape_;
    shape_from_ = other.shape_from_;
    shape_feature_ = other.shape_feature_;
  }
  /// The shape feature every record is checked against (set_shape's, when
  /// it came from one): a record whose own differs is an error, never a
  /// sample reshaped to record 0's shape.
  void set_shape_feature(std::string name) { shape_feature_ = std::move(name); }
  bool has_shape() const { return shape_.has_value(); }
  FeatureKind kind() const { return kind_; }

  /// Reads this file's shape from the int64 feature `name` of its first
  /// record (`framed`, at `rec_off`, already checked), whose feature holds
  /// `count` elements. One value s with s*s == count is [s, s] (DLIO's
  /// `size`); values whose product is `count` are the shape. Otherwise the
  /// file stays 1-D: an error when `required`, else a note.
  absl::Status read_shape_feature(const std::string& name, bool required, std::span<const std::byte> framed,
                                  uint64_t rec_off, uint64_t count) {
    DLFEED_ASSIGN_OR_RETURN(std::span<const std::byte> payload,
                            tfrecord::unframe_record(framed, /*verify=*/false, where_, rec_off));
    const example::Context ctx{where_, rec_off + tfrecord::kHeaderSize};
    example::FeatureSlice slice;
    std::vector<int64_t> values;
    DLFEED_RETURN_IF_ERROR(detail::tfr::int64_feature(payload, name, ctx, slice, values));
    const std::string found = detail::tfr::found_text(name, slice, values);
    if (const std::optional<Shape> shape = detail::tfr::shape_of(values, count)) {
      set_shape(*shape, absl::StrCat("from ", found, " in record 0"));
      shape_feature_ = name;
      return absl::OkStatus();
    }
    const std::string expected = absl::StrCat("an int64 feature '", name, "' giving the shape of feature '", feature_,
                                              "' (", count, " elements) in record 0");
    if (required && slice.kind == FeatureKind::kNone) {
      // A name that is not there: NotFound, as a missing feature.
      return absl::NotFoundError(
          absl::StrCat(where_, ": at offset ", ctx.base, ": expected ", expected, ", found ", found));
    }
    if (required) return format_error(where_, ctx.base + slice.offset, expected, found);
    shape_from_ = absl::StrCat("1-D: record 0 has ", found, ", not the shape of its ", count, " elements");
    if (slice.kind != FeatureKind::kNone) {
      static std::atomic<bool> noted{false};
      if (!noted.exchange(true)) {
        std::fprintf(stderr,
                     "dlfeed: note: %s: feature '%s' stays 1-D: record 0 has %s, which is not the shape of its %llu "
                     "elements (DLIO writes the nominal side when record_length_stdev > 0) (further such notes are "
                     "not shown)\n",
                     path_.c_str(), feature_.c_str(), found.c_str(), static_cast<unsigned long long>(count));
      }
    }
    return absl::OkStatus();
  }

  /// The "auto" shape feature's verdict on this file: 1 shaped by it, -1
  /// left 1-D by it, 0 not asked (shapes given, or no shape feature).
  int auto_verdict() const {
    if (shape_given_ || shape_from_.empty()) return 0;
    return shape_ ? 1 : -1;
  }
  /// The shape feature's verdict that this file stays 1-D (from the index cache).
  void set_flat_verdict(std::string why) {
    shape_.reset();
    shape_from_ = std::move(why);
    shape_feature_.clear();
  }
  /// Back to 1-D: another file of the field is not described by its shape
  /// feature, and a field has one shaping rule.
  void unshape(std::string why) {
    if (shape_ && z_) counts_.assign(records_, num_elements(*shape_));  // every record matched the shape
    shape_.reset();
    shape_from_ = std::move(why);
    shape_feature_.clear();
  }

  /// The records' extents in the file (uncompressed files).
  void set_records(std::vector<Extent> records) {
    extents_ = std::move(records);
    records_ = extents_.size();
  }
  /// Each record's element count, learnt by the scan of a compressed file
  /// (used when no feature shape is given).
  void set_counts(std::vector<int64_t> counts) { counts_ = std::move(counts); }

  uint64_t num_samples() const override { return records_; }
  void fill(uint64_t k, SampleRef& ref) const override {
    ref.dtype = dtype_;
    if (z_) {
      ref.extents.push_back(z_->extent(k));
    } else {
      ref.extents.push_back(extents_[k]);
    }
    if (shape_) {
      ref.shape = *shape_;
    } else {
      ref.shape = {k < counts_.size() ? counts_[k] : -1};
    }
  }
  bool shapes_differ() const override { return !counts_.empty(); }
  // Compressed files are not cached: their checkpoints hold 32 KiB windows.
  std::string cache_tag() const override { return z_ ? "" : "tfrecord"; }
  void cache_save(std::string& out) const override {
    detail::CacheWriter w(out);
    w.u8(static_cast<uint8_t>(kind_));
    w.dtype(dtype_);
    w.str(idx_);
    // A shape read from the shape feature (one given by the options is
    // theirs): 1; the feature's verdict that the file stays 1-D (what
    // one_shape_rule needs of every file): 2; neither: 0.
    const int verdict = auto_verdict();
    w.u8(verdict > 0 ? 1 : verdict < 0 ? 2 : 0);
    if (verdict > 0) w.shape(*shape_);
    if (verdict != 0) w.str(shape_from_);
    w.u64(extents_.size());
    for (const Extent& e : extents_) w.u64(e.length);  // records lie back to back from offset 0
    w.u64(split_.offset);  // the split layout (checked when used: a wrong one only costs a whole read)
    w.u64(split_.length);
    w.u64(split_record_);
  }
  uint64_t total_read_bytes() const override {
    uint64_t total = 0;
    if (z_) {
      for (uint64_t k = 0; k < records_; ++k) total += z_->extent(k).length;
    } else {
      for (const Extent& e : extents_) total += e.length;
    }
    return total;
  }
  uint64_t index_bytes() const override {
    return extents_.capacity() * sizeof(Extent) + counts_.capacity() * sizeof(int64_t) +
           (z_ ? z_->window_bytes() + z_->points.size() * sizeof(tfrecord::InflatePoint) +
                     3 * z_->record_point.size() * sizeof(uint64_t)
               : 0);
  }
  std::string describe() const override {
    std::string s = absl::StrCat("feature '", feature_, "' (", example::kind_name(kind_), " as ", dtype_.name());
    if (shape_) absl::StrAppend(&s, ", shape ", shape_str(*shape_));
    if (!shape_from_.empty()) absl::StrAppend(&s, ", ", shape_from_);
    absl::StrAppend(&s, "), ", records_, " records, ");
    if (z_) {
      absl::StrAppend(&s, tfrecord::compression_name(z_->compression), "-compressed (", z_->compressed_size, " bytes, ",
                      z_->inflated_size, " inflated), ", z_->points.size(), " inflate checkpoints (",
                      z_->window_bytes(), " bytes of windows in memory), offsets from a scan of the inflated stream");
    } else {
      absl::StrAppend(&s, "offsets from ",
                      idx_.empty() ? "a scan of the record headers" : absl::StrCat("the idx sidecar ", idx_));
    }
    if (!verify_) absl::StrAppend(&s, ", CRC checks off");
    return s;
  }

  /// Records as long as record 0 are predicted to hold their bytes value
  /// where record 0 does (`span`, within the framed record of `record` bytes),
  /// with or without a shape: without one, the planner predicts the value's
  /// length too (predict_split_layout), and the check confirms it.
  void set_split(detail::ValueSpan span, uint64_t record) {
    const bool inside = span.length > 0 && span.offset >= tfrecord::kHeaderSize &&
                        span.offset + span.length + tfrecord::kFooterSize <= record;
    split_ = inside ? span : detail::ValueSpan{};
    split_record_ = inside ? record : 0;
  }
  std::optional<detail::ValueSpan> value_span(const SampleRef& ref) const override {
    if (z_ || split_.length == 0 || kind_ != FeatureKind::kBytes || ref.extents.size() != 1) return std::nullopt;
    const uint64_t len = ref.extents[0].length;
    if (len == split_record_) return split_;
    // A record of another length whose value has the same length (a shape
    // fixes it): another feature's value differs in length (an int64 label's
    // varint, say). The value is predicted as far from the record's end as in
    // record 0 when it was the record's last bytes there (TensorFlow writes
    // an Example's features in key order, so `y` before `x`), else at record
    // 0's offset; check_split confirms it, and a wrong guess costs only a
    // copy of the pieces into one record.
    if (!value_length_fixed()) return std::nullopt;
    const uint64_t tail = split_record_ - split_.offset - split_.length;  // footer, and any bytes after the value
    if (tail == tfrecord::kFooterSize && len >= tfrecord::kHeaderSize + split_.length + tail) {
      return detail::ValueSpan{len - tail - split_.length, split_.length};
    }
    if (split_.offset + split_.length + tfrecord::kFooterSize <= len) return split_;
    return std::nullopt;
  }
  // Every record's value has split_.length bytes: the shape is known and says so.
  bool value_length_fixed() const {
    if (!shape_) return false;
    int64_t n = 1;
    for (int64_t d : *shape_) {
      if (d < 0) return false;
      n *= d;
    }
    return static_cast<uint64_t>(n) * dtype_.size == split_.length;
  }
  bool parses_around_values(const SampleRef& ref) const override { return !z_ && ref.extents.size() == 1; }
  bool verifies_crc() const override { return verify_; }
  bool check_split(const SampleRef& ref, std::span<const std::byte> skeleton, detail::ValueSpan span,
                   std::span<const std::byte> value, const uint32_t* value_crc) const override;

  absl::StatusOr<DecodedSample> decode(const SampleRef& ref, std::span<std::byte> raw,
                                       std::vector<std::byte>& scratch) const override {
    if (!z_) {
      const uint64_t rec_off = ref.extents.empty() ? 0 : ref.extents[0].offset;
      // Another field's decode of this record checked its CRCs (the same bytes).
      return decode_framed(ref.item, raw, rec_off, scratch, 0, nullptr, !detail::already_checked(raw));
    }
    // Inflate the record from its checkpoint into scratch, then decode it there.
    const uint64_t k = ref.item;
    if (k >= z_->num_records()) return absl::InternalError(absl::StrCat(path_, ": record ", k, " out of range"));
    const uint64_t rec_off = z_->record_start[k];
    const uint64_t len = z_->record_start[k + 1] - rec_off;
    const uint64_t pi = z_->record_point[k];
    scratch.resize(len);
    {
      counters::StepTimer inflate(counters::Id::kDecodeInflate);
      DLFEED_RETURN_IF_ERROR(tfrecord::inflate_at(z_->points[pi], pi, raw, rec_off, scratch, stream_id_, path_));
    }
    return decode_framed(k, std::span<const std::byte>(scratch.data(), len), rec_off, scratch, len);
  }

  // Whether `framed`'s header gives the length its extent has.
  bool extent_matches_header(std::span<const std::byte> framed) const {
    if (framed.size() < tfrecord::kOverhead) return false;
    const absl::StatusOr<uint64_t> length = tfrecord::parse_header(framed, /*verify=*/false, where_, 0);
    return length.ok() && *length == framed.size() - tfrecord::kOverhead;
  }

  /// Decodes the framed record `framed` (record `item` at offset `rec_off`).
  /// Float and int64 values go to scratch[base...]; `framed` may itself lie
  /// in scratch before `base`. `kind_out` receives the feature's kind.
  absl::StatusOr<DecodedSample> decode_framed(uint64_t item, std::span<const std::byte> framed, uint64_t rec_off,
                                              std::vector<std::byte>& scratch, size_t base,
                                              FeatureKind* kind_out = nullptr, bool verify = true) const {
    absl::StatusOr<std::span<const std::byte>> unframed;
    {
      counters::StepTimer crc(counters::Id::kDecodeCrc);  // the framing check is the CRCs
      unframed = tfrecord::unframe_record(framed, verify_ && verify, where_, rec_off);
    }
    // A record header whose length is not the extent's (the sidecar's fault
    // as likely as the file's): the sidecar's line named.
    if (!unframed.ok() && !idx_.empty() && !z_ && !extent_matches_header(framed)) {
      return absl::Status(
          unframed.status().code(),
          absl::StrCat(unframed.status().message(), " (record ", item, "'s extent is line ", item + 1,
                       " of the idx sidecar ", idx_,
                       "; if the sidecar does not match the file, remove it: the record headers are then "
                       "scanned)"));
    }
    DLFEED_ASSIGN_OR_RETURN(std::span<const std::byte> payload, std::move(unframed));
    const example::Context ctx{where_, rec_off + tfrecord::kHeaderSize};
    absl::StatusOr<detail::tfr::Found> finding;
    {
      counters::StepTimer parse(counters::Id::kDecodeParse);
      static const std::string kNoShapeFeature;
      finding = detail::tfr::find_sample_features(payload, feature_, shape_ ? shape_feature_ : kNoShapeFeature, kind_,
                                                  where_, item, rec_off, ctx);
    }
    DLFEED_ASSIGN_OR_RETURN(const detail::tfr::Found found, std::move(finding));
    const example::FeatureSlice& slice = found[0];
    if (kind_out) *kind_out = slice.kind;
    DecodedSample out;
    uint64_t count = 0;
    switch (slice.kind) {
      case FeatureKind::kBytes: {
        thread_local std::vector<std::span<const std::byte>> values;  // kept: no allocation per record
        values.clear();
        DLFEED_RETURN_IF_ERROR(example::decode_bytes_list(slice, values, ctx));
        if (values.empty()) {
          return format_error(where_, ctx.base + slice.offset,
                              absl::StrCat("one value in bytes_list feature '", feature_, "' of record ", item),
                              "an empty list");
        }
        if (values.size() > 1) {  // the sample is one value: the others would be dropped in silence
          return format_error(where_, ctx.base + slice.offset,
                              absl::StrCat("one value in bytes_list feature '", feature_, "' of record ", item,
                                           " (as tf.io.FixedLenFeature([], tf.string) reads it)"),
                              absl::StrCat(values.size(), " values"));
        }
        const std::span<const std::byte> v = values[0];
        if (v.size() % dtype_.size != 0) {
          return format_error(where_, ctx.base + slice.offset,
                              absl::StrCat("a multiple of ", static_cast<int>(dtype_.size), " bytes (", dtype_.name(),
                                           ") in feature '", feature_, "' of record ", item),
                              absl::StrCat(v.size(), " bytes"));
        }
        out.bytes = v;
        out.dtype = dtype_;
        count = v.size() / dtype_.size;
        break;
      }
      case FeatureKind::kFloat: {
        std::vector<float> values;
        DLFEED_RETURN_IF_ERROR(example::decode_float_list(slice, values, ctx));
        scratch.resize(base + values.size() * sizeof(float));
        if (!values.empty()) std::memcpy(scratch.data() + base, values.data(), values.size() * sizeof(float));
        out.bytes = std::span<const std::byte>(scratch.data() + base, values.size() * sizeof(float));
        out.dtype = DType::f32();
        count = values.size();
        break;
      }
      case FeatureKind::kInt64: {
        std::vector<int64_t> values;
        DLFEED_RETURN_IF_ERROR(example::decode_int64_list(slice, values, ctx));
        scratch.resize(base + values.size() * sizeof(int64_t));
        if (!values.empty()) std::memcpy(scratch.data() + base, values.data(), values.size() * sizeof(int64_t));
        out.bytes = std::span<const std::byte>(scratch.data() + base, values.size() * sizeof(int64_t));
        out.dtype = DType::i64();
        count = values.size();
        break;
      }
      case FeatureKind::kNone: break;
    }
    if (shape_) {
      const uint64_t want = static_cast<uint64_t>(num_elements(*shape_));
      if (want != count) {
        return format_error(where_, ctx.base + slice.offset,
                            absl::StrCat("feature '", feature_, "' of record ", item, " with shape ",
                                         shape_str(*shape_), " = ", want, " elements of ", out.dtype.name(),
                                         shape_from_.empty() ? "" : absl::StrCat(" (", shape_from_, ")")),
                            absl::StrCat(count, " elements"));
      }
      out.shape = *shape_;
      if (!shape_feature_.empty()) DLFEED_RETURN_IF_ERROR(check_record_shape(found[1], item, ctx));
    } else {
      out.shape = {static_cast<int64_t>(count)};
    }
    return out;
  }

  // Record `item`'s own shape feature says what record 0's did (the same
  // values, or DLIO's one side s of an s x s shape).
  // `slice` is the record's shape feature, as found.
  absl::Status check_record_shape(const example::FeatureSlice& slice, uint64_t item,
                                  const example::Context& ctx) const {
    thread_local std::vector<int64_t> values;  // kept: no allocation per record
    values.clear();
    if (slice.kind == FeatureKind::kInt64) DLFEED_RETURN_IF_ERROR(example::decode_int64_list(slice, values, ctx));
    if (detail::tfr::says_shape(slice, values, *shape_)) return absl::OkStatus();
    return format_error(where_, ctx.base + slice.offset,
                        absl::StrCat("feature '", feature_, "' of record ", item, " with the shape ",
                                     shape_str(*shape_), " of every record of the file (", shape_from_, ")"),
                        detail::tfr::found_text(shape_feature_, slice, values));
  }

 private:
  std::string path_;
  std::string feature_;
  std::optional<Shape> shape_;  // every record's: the options' feature_shape or the shape feature's
  bool shape_given_;            // shape_ is the options' feature_shape
  std::string shape_from_;      // where shape_ came from, or why the shape feature gave none
  std::string shape_feature_;   // the feature shape_ was read from in record 0 ("" if none): every record's is checked
  bool verify_;
  FeatureKind kind_;
  DType dtype_;
  uint64_t records_;
  std::vector<Extent> extents_;  // uncompressed: record k's framed bytes
  std::vector<int64_t> counts_;  // compressed without a feature shape: record k's element count
  std::string idx_;
  std::shared_ptr<const tfrecord::CompressedIndex> z_;
  uint64_t stream_id_;
  std::string where_;
  detail::ValueSpan split_;    // record 0's bytes value in its framed record (length 0: none)
  uint64_t split_record_ = 0;  // record 0's framed length: records of this length are split alike
};

bool TfRecordSource::check_split(const SampleRef& ref, std::span<const std::byte> skeleton, detail::ValueSpan span,
                                 std::span<const std::byte> value, const uint32_t* value_crc) const {
  const uint64_t n = skeleton.size();
  if (z_ || value.size() != span.length || span.offset < tfrecord::kHeaderSize ||
      span.offset + span.length + tfrecord::kFooterSize > n) {
    return false;
  }
  if (verify_) {
    counters::StepTimer crc(counters::Id::kDecodeCrc);
    if (!tfrecord::split_crcs_hold(skeleton, span.offset, value, value_crc)) return false;
  }
  // The Example parsed from the skeleton: its walk reads no byte of a bytes
  // value (it keeps views), and positions only grow along it, so when the
  // value it finds is exactly the hole, it read no byte of the hole, and it
  // found what it would in the whole record.
  std::vector<std::byte> scratch;  // a bytes feature decodes to a view: no scratch used
  const uint64_t rec_off = ref.extents.empty() ? 0 : ref.extents[0].offset;
  auto d = decode_framed(ref.item, skeleton, rec_off, scratch, 0, nullptr, /*verify=*/false);
  return d.ok() && d->bytes.data() == skeleton.data() + span.offset && d->bytes.size() == span.length;
}

// A compressed file: one inflating scan finds the records and checkpoints,
// checks every record (CRCs, Example, the feature) and learns each record's
// element count, so sample shapes are exact before any read.
absl::StatusOr<SampleIndex> open_compressed(const detail::File& file, tfrecord::Compression c,
                                            const FormatOptions& options) {
  const std::string& path = file.path();
  FeatureKind kind = FeatureKind::kNone;
  DType dtype = options.feature_dtype;
  std::unique_ptr<TfRecordSource> probe;
  std::vector<int64_t> counts;
  std::vector<std::byte> scratch;
  bool shape_required = false;
  std::string shape_feature;
  auto visit = [&](uint64_t k, uint64_t offset, std::span<const std::byte> framed) -> absl::Status {
    if (k > 0 && options.feature_shape) return absl::OkStatus();  // shapes are given
    if (!probe) probe = std::make_unique<TfRecordSource>(path, options, kind, dtype, 0, "", nullptr, c);
    FeatureKind found = FeatureKind::kNone;
    DLFEED_ASSIGN_OR_RETURN(DecodedSample s, probe->decode_framed(k, framed, offset, scratch, 0, &found));
    if (k == 0) {
      // The first record tells the kind (and so the dtype); later ones must match.
      kind = found;
      dtype = dtype_of(kind, options.feature_dtype);
      probe = std::make_unique<TfRecordSource>(path, options, kind, dtype, 0, "", nullptr, c);
      shape_feature = shape_feature_for(options, path, kind, &shape_required);
      if (!shape_feature.empty()) {
        // Later records are decoded against the shape, so each must match it.
        const uint64_t count = s.shape.empty() ? 0 : static_cast<uint64_t>(s.shape[0]);
        DLFEED_RETURN_IF_ERROR(probe->read_shape_feature(shape_feature, shape_required, framed, offset, count));
      }
    }
    if (probe->has_shape()) return absl::OkStatus();
    counts.push_back(s.shape.empty() ? 0 : s.shape[0]);  // 1-D without a feature shape
    return absl::OkStatus();
  };
  DLFEED_ASSIGN_OR_RETURN(tfrecord::CompressedIndex scanned,
                          tfrecord::scan_compressed(file, c, options.verify_crc, visit));
  auto z = std::make_shared<const tfrecord::CompressedIndex>(std::move(scanned));
  const size_t n = z->num_records();
  auto src = std::make_unique<TfRecordSource>(path, options, kind, dtype, n, "", z);
  if (probe) src->copy_shape_from(*probe);
  if (!src->has_shape()) src->set_counts(std::move(counts));
  SampleIndex index;
  index.add_file(path, std::move(src));
  index.identities.assign(1, file.identity());
  return index;
}

}  // namespace

namespace detail {
absl::Status one_kind_rule(const SampleIndex& index, const FormatOptions& options) {
  const TfRecordSource* first = nullptr;
  uint32_t first_file = 0;
  for (uint32_t f = 0; f < index.sources.size(); ++f) {
    const auto* src = dynamic_cast<const TfRecordSource*>(index.sources[f].get());
    if (src == nullptr || src->kind() == FeatureKind::kNone) continue;  // no records: no kind
    if (first == nullptr) {
      first = src;
      first_file = f;
    } else if (src->kind() != first->kind()) {
      // Within a file a change of kind is an error; across files, the bytes of
      // one kind would be read as the other's values.
      return file_error(index.files[f],
                        absl::StrCat("feature '", options.feature, "' as a ", example::kind_name(first->kind()),
                                     " (as in ", index.files[first_file], ")"),
                        example::kind_name(src->kind()));
    }
  }
  return absl::OkStatus();
}

void one_shape_rule(SampleIndex& index, const FormatOptions& options) {
  if (options.shape_feature != "auto" || options.feature_shape) return;
  std::vector<TfRecordSource*> shaped;
  const TfRecordSource* flat = nullptr;  // the first file its `size` does not describe
  uint32_t flat_file = 0;
  for (uint32_t f = 0; f < index.sources.size(); ++f) {
    auto* src = dynamic_cast<TfRecordSource*>(index.sources[f].get());
    if (src == nullptr) continue;
    const int verdict = src->auto_verdict();
    if (verdict > 0) shaped.push_back(src);
    if (verdict < 0 && flat == nullptr) {
      flat = src;
      flat_file = f;
    }
  }
  if (flat == nullptr || shaped.empty()) return;
  const std::string why = absl::StrCat("1-D: the field's shape feature does not describe the records of ",
                                       index.files[flat_file], ", so no file of the field is shaped by it");
  std::fprintf(stderr,
               "dlfeed: note: feature '%s' stays 1-D in all %zu files: its shape feature does not describe the "
               "records of %s (DLIO's record_length_stdev > 0), so the %zu files it describes are 1-D too\n",
               options.feature.c_str(), index.sources.size(), index.files[flat_file].c_str(), shaped.size());
  for (TfRecordSource* src : shaped) src->unshape(why);
}

absl::StatusOr<std::unique_ptr<SampleSource>> load_tfrecord_source(const std::string& path, uint64_t file_size,
                                                                   const FormatOptions& options, CacheReader& in) {
  const uint8_t kind = in.u8();
  const DType dtype = in.dtype();
  std::string idx = in.str();
  const uint8_t derived = in.u8();
  std::optional<Shape> shape;
  std::string shape_from;
  if (derived == 1) {
    shape = in.shape();
    for (int64_t d : *shape) {
      if (d < 0) in.fail();  // a shape feature's shape has no unknown dimension
    }
  }
  if (derived == 1 || derived == 2) shape_from = in.str();
  const uint64_t n = in.u64();
  if (!in.ok() || derived > 2 || kind > static_cast<uint8_t>(FeatureKind::kInt64) || n > in.left() / 8) {
    return file_error(path, "a TFRecord entry in the index cache", "a truncated or malformed one");
  }
  // What validate_idx checks of a sidecar: records of 16 bytes or more, back
  // to back from offset 0 to the end of the file.
  std::vector<Extent> records(n);
  uint64_t at = 0;
  for (Extent& e : records) {
    e = {at, in.u64()};
    if (e.length < tfrecord::kOverhead || e.length > file_size - at) {
      return file_error(path, absl::StrCat("cached records within the file of ", file_size, " bytes"),
                        absl::StrCat("a record of ", e.length, " bytes at offset ", at));
    }
    at += e.length;
  }
  if (!in.ok() || at != file_size) {
    return file_error(path, absl::StrCat("cached records up to the end of the ", file_size, "-byte file"),
                      absl::StrCat("records ending at ", at));
  }
  const detail::ValueSpan split{in.u64(), in.u64()};
  const uint64_t split_record = in.u64();
  if (!in.ok()) return file_error(path, "a TFRecord entry in the index cache", "a truncated one");
  auto src = std::make_unique<TfRecordSource>(path, options, static_cast<FeatureKind>(kind), dtype, n, std::move(idx));
  if (shape && !options.feature_shape) {  // derived == 1
    src->set_shape(std::move(*shape), std::move(shape_from));
    bool required = false;
    src->set_shape_feature(shape_feature_for(options, path, static_cast<FeatureKind>(kind), &required));
  } else if (derived == 2 && !options.feature_shape) {
    src->set_flat_verdict(std::move(shape_from));
  }
  src->set_records(std::move(records));
  src->set_split(split, split_record);
  return std::unique_ptr<SampleSource>(std::move(src));
}
}  // namespace detail

absl::StatusOr<SampleIndex> open_tfrecord(const std::string& path, const FormatOptions& options) {
  return detail::open_tfrecord_listed(path, options, detail::ListedFile{});
}

absl::StatusOr<SampleIndex> detail::open_tfrecord_listed(const std::string& path, const FormatOptions& options,
                                                         const ListedFile& listed) {
  DLFEED_ASSIGN_OR_RETURN(detail::File file, detail::File::open(path));
  if (options.feature.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": a TFRecord needs the name of the feature to read"));
  }
  if (options.feature_shape) {
    for (int64_t d : *options.feature_shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": feature shape ", shape_str(*options.feature_shape),
                                                       " must have no unknown (-1) dimension"));
      }
    }
  }
  // One read of the file's first bytes serves the compression check, the
  // sidecar's header checks, the scan's first window and record 0 when they
  // lie in it: a small file (DLIO's one-record files) costs one read.
  std::vector<std::byte> head(std::min<uint64_t>(file.size(), kHeadBytes));
  DLFEED_RETURN_IF_ERROR(file.read_exact(0, head, "the first bytes of the TFRecord"));
  // GZIP/ZLIB by the first bytes, whatever the file's name. Sidecars are
  // ignored for compressed files: their offsets would be of the inflated
  // stream, and the scan is needed for the checkpoints anyway.
  const tfrecord::Compression c = tfrecord::detect_compression(head, file.size());
  if (c != tfrecord::Compression::kNone) return open_compressed(file, c, options);
  // An empty span means "not read" to the helpers below.
  const std::span<const std::byte> known(head);
  std::vector<Extent> records;
  std::string idx;
  if (options.use_index_files) {
    DLFEED_ASSIGN_OR_RETURN(tfrecord::FoundIdx found, tfrecord::load_idx(path, options, !listed.no_idx_beside));
    if (!found.path.empty()) {
      idx = std::move(found.path);
      records = std::move(found.records);
      DLFEED_RETURN_IF_ERROR(tfrecord::validate_idx(records, idx, file, options.verify_crc, known));
    }
  }
  if (idx.empty()) {
    DLFEED_ASSIGN_OR_RETURN(records, tfrecord::scan_records(file, options.verify_crc, known));
    if (options.write_index_files) {
      if (!options.index_dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(options.index_dir, ec);
        if (ec) return io_error(options.index_dir, "mkdir", ec.value());
      }
      DLFEED_RETURN_IF_ERROR(tfrecord::write_idx(tfrecord::idx_path_for_write(path, options), records));
    }
  }

  // The first record tells the feature's kind (and so the dtype).
  FeatureKind kind = FeatureKind::kNone;
  DType dtype = options.feature_dtype;
  uint64_t count0 = 0;           // record 0's element count (1-D)
  detail::ValueSpan split;       // where record 0's bytes value lies in it
  std::vector<std::byte> first;  // record 0's framed bytes
  auto source_for = [&](FeatureKind k, DType d) {
    return std::make_unique<TfRecordSource>(path, options, k, d, records.size(), idx);
  };
  if (!records.empty()) {
    std::vector<std::byte> raw(records[0].length);
    DLFEED_RETURN_IF_ERROR(tfrecord::read_at(file, known, records[0].offset, raw, "TFRecord record 0"));
    std::vector<std::byte> scratch;
    // Decoding the first record with an unknown kind checks it fully (CRCs,
    // Example, feature presence, shape) and tells the kind.
    auto probe = source_for(FeatureKind::kNone, options.feature_dtype);
    DLFEED_ASSIGN_OR_RETURN(DecodedSample s, probe->decode_framed(0, raw, records[0].offset, scratch, 0, &kind));
    dtype = dtype_of(kind, options.feature_dtype);
    count0 = s.shape.empty() ? 0 : static_cast<uint64_t>(s.shape[0]);
    if (kind == FeatureKind::kBytes) split = {static_cast<uint64_t>(s.bytes.data() - raw.data()), s.bytes.size()};
    first = std::move(raw);
  }

  auto src = source_for(kind, dtype);
  if (!first.empty()) src->set_split(split, first.size());
  bool shape_required = false;
  const std::string shape_feature = shape_feature_for(options, path, kind, &shape_required);
  if (!shape_feature.empty() && !records.empty()) {
    DLFEED_RETURN_IF_ERROR(src->read_shape_feature(shape_feature, shape_required, first, records[0].offset, count0));
  }
  src->set_records(std::move(records));
  SampleIndex index;
  index.add_file(path, std::move(src));
  index.identities.assign(1, file.identity());
  return index;
}

}  // namespace dlfeed
