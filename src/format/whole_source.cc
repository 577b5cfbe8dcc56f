// SPDX-License-Identifier: Apache-2.0
// One sample per dataset: the rows a source cuts along axis 0, read and
// decoded as one sample. A contiguous dataset is one extent read straight
// into the batch; a chunked one is its rows' extents in order, each row
// decoded by the inner source into its place.
#include "whole_source.h"

#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI::detail {
namespace {

constexpr std::string_view kTagPrefix = "whole+";

class WholeSource final : public SampleSource {
 public:
  explicit WholeSource(std::unique_ptr<SampleSource> inner) : inner_(std::move(inner)), rows_(inner_->num_samples()) {
    if (auto spec = inner_->sample_spec()) {
      dtype_ = spec->first;
      shape_ = spec->second;
    } else if (rows_ > 0) {
      SampleRef r;
      inner_->fill(0, r);
      dtype_ = r.dtype;
      shape_ = r.shape;
    }
    row_bytes_ = static_cast<uint64_t>(num_elements(shape_)) * dtype_.size;
    if (!inner_->scalar()) shape_.insert(shape_.begin(), static_cast<int64_t>(rows_));
    if (inner_->reads_through_library() || rows_ == 0) return;
    // Rows one after another at their own length: one extent for them all.
    if (auto s = inner_->strided(); s && s->stride == s->length && s->length == row_bytes_) {
      extents_.push_back({s->offset, s->length * rows_});
      identity_ = true;
      return;
    }
    bool all_identity = true;
    SampleRef r;
    absl::InlinedVector<Extent, 1> last;
    for (uint64_t k = 0; k < rows_; ++k) {
      r.extents.clear();
      r.item = k;
      inner_->fill(k, r);
      all_identity = all_identity && inner_->is_identity(r);
      // The rows of one chunk row name the same chunks: read once, decoded row by row.
      if (k > 0 && r.extents == last) {
        ++groups_.back().rows;
        continue;
      }
      last = r.extents;
      groups_.push_back({1, r.read_bytes()});
      for (const Extent& e : r.extents) {
        // Only exactly adjacent runs merge, so the bytes read stay the rows' bytes in order.
        if (!extents_.empty() && extents_.back().offset + extents_.back().length == e.offset) {
          extents_.back().length += e.length;
        } else {
          extents_.push_back(e);
        }
      }
    }
    identity_ = all_identity && extents_.size() == 1 && extents_[0].length == row_bytes_ * rows_;
  }

  std::string layout() const override { return inner_->layout(); }
  std::string describe() const override {
    std::string d = inner_->describe();
    constexpr absl::string_view kAlong = ", samples along axis 0";
    if (absl::EndsWith(d, kAlong)) d.resize(d.size() - kAlong.size());
    return absl::StrCat(d, ", the whole dataset one sample (axis none)");
  }
  std::string sample_axis() const override { return "axis none"; }
  bool reads_through_library() const override { return inner_->reads_through_library(); }
  bool is_identity(const SampleRef& ref) const override { return identity_ && ref.extents.size() == 1; }
  std::optional<std::pair<DType, Shape>> sample_spec() const override { return std::make_pair(dtype_, shape_); }
  std::optional<Strided> strided() const override {
    if (!identity_) return std::nullopt;
    return Strided{extents_[0].offset, extents_[0].length, extents_[0].length};
  }
  void fill(uint64_t, SampleRef& ref) const override {
    ref.shape = shape_;
    ref.dtype = dtype_;
    for (const Extent& e : extents_) ref.extents.push_back(e);
  }
  uint64_t num_samples() const override { return 1; }
  uint64_t total_read_bytes() const override {
    uint64_t n = 0;
    for (const Extent& e : extents_) n += e.length;
    return n;
  }
  uint64_t index_bytes() const override {
    return inner_->index_bytes() + extents_.capacity() * sizeof(Extent) + groups_.capacity() * sizeof(Group);
  }
  std::string cache_tag() const override { return whole_tag(inner_->cache_tag()); }
  void cache_save(std::string& out) const override { inner_->cache_save(out); }

  absl::StatusOr<DecodedSample> decode(const SampleRef& ref, std::span<std::byte> raw,
                                       std::vector<std::byte>& scratch) const override {
    const uint64_t out_bytes = row_bytes_ * rows_;
    if (identity_) return DecodedSample{std::span<const std::byte>(raw.data(), out_bytes), shape_, dtype_};
    scratch.resize(out_bytes);
    SampleRef r;
    r.file = ref.file;
    r.source = ref.source;
    if (groups_.empty()) {  // read through libhdf5: each row by its own H5Dread, no bytes here
      for (uint64_t k = 0; k < rows_; ++k) DLFEED_RETURN_IF_ERROR(put_row(k, {}, r, scratch.data()));
    }
    thread_local std::vector<std::byte> shared;
    uint64_t pos = 0, k = 0;
    for (const Group& g : groups_) {
      if (pos + g.raw_bytes > raw.size()) {
        return absl::DataLossError(absl::StrCat(describe(), ": row ", k, " needs bytes ", pos, " to ",
                                                pos + g.raw_bytes, " of the sample's ", raw.size()));
      }
      const std::span<std::byte> bytes = raw.subspan(pos, g.raw_bytes);
      for (uint64_t j = 0; j < g.rows; ++j, ++k) {
        if (g.rows == 1) {
          DLFEED_RETURN_IF_ERROR(put_row(k, bytes, r, scratch.data()));
          continue;
        }
        shared.assign(bytes.begin(), bytes.end());  // a decoder may transform its bytes in place
        DLFEED_RETURN_IF_ERROR(put_row(k, shared, r, scratch.data()));
      }
      pos += g.raw_bytes;
    }
    return DecodedSample{std::span<const std::byte>(scratch.data(), out_bytes), shape_, dtype_};
  }

 private:
  // Row k decoded by the inner source from `bytes` (its extents' bytes) into its place in `out`.
  absl::Status put_row(uint64_t k, std::span<std::byte> bytes, SampleRef& r, std::byte* out) const {
    thread_local std::vector<std::byte> row_scratch;
    r.extents.clear();
    r.item = k;
    inner_->fill(k, r);
    DLFEED_ASSIGN_OR_RETURN(DecodedSample d, inner_->decode(r, bytes, row_scratch));
    if (d.bytes.size() != row_bytes_) {
      return absl::DataLossError(
          absl::StrCat(describe(), ": row ", k, " decoded to ", d.bytes.size(), " bytes, expected ", row_bytes_));
    }
    if (row_bytes_ > 0) std::memcpy(out + k * row_bytes_, d.bytes.data(), row_bytes_);
    return absl::OkStatus();
  }

  /// Consecutive rows that read the same extents (the rows of one chunk row).
  struct Group {
    uint64_t rows = 0, raw_bytes = 0;
  };

  std::unique_ptr<SampleSource> inner_;
  uint64_t rows_ = 0;
  DType dtype_;
  Shape shape_;  // (rows,) + a row's shape
  uint64_t row_bytes_ = 0;
  absl::InlinedVector<Extent, 1> extents_;  // the rows' extents in order, adjacent ones merged
  std::vector<Group> groups_;               // empty for one strided run or a library read
  bool identity_ = false;                   // one extent whose bytes are the sample as it is
};

}  // namespace

std::unique_ptr<SampleSource> whole_of(std::unique_ptr<SampleSource> inner) {
  return std::make_unique<WholeSource>(std::move(inner));
}

std::string whole_tag(const std::string& inner_tag) {
  return inner_tag.empty() ? std::string() : std::string(kTagPrefix) + inner_tag;
}

std::string inner_tag_of(std::string_view tag) {
  return tag.starts_with(kTagPrefix) ? std::string(tag.substr(kTagPrefix.size())) : std::string();
}

}  // namespace dlfeed::detail
