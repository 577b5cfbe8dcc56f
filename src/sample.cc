#include "dlfeed/sample.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI {

int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return 0;
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

uint64_t SampleRef::read_bytes() const {
  uint64_t n = 0;
  for (const Extent& e : extents) n += e.length;
  return n;
}

void SampleIndex::append(SampleIndex&& other) {
  const uint32_t file_base = static_cast<uint32_t>(files.size());
  const uint32_t source_base = static_cast<uint32_t>(sources.size());
  for (auto& f : other.files) files.push_back(std::move(f));
  for (auto& s : other.sources) sources.push_back(std::move(s));
  samples.reserve(samples.size() + other.samples.size());
  const uint64_t sample_base = samples.size();
  for (auto& r : other.samples) {
    r.file += file_base;
    r.source += source_base;
    samples.push_back(std::move(r));
  }
  for (size_t i = 1; i < other.file_begin.size(); ++i) {
    file_begin.push_back(sample_base + other.file_begin[i]);
  }
  other = SampleIndex{};
}

absl::StatusOr<FieldSpec> uniform_spec(const SampleIndex& index, absl::string_view field, bool allow_varying_shapes) {
  FieldSpec spec;
  if (index.samples.empty()) {
    for (const auto& src : index.sources) {
      if (auto s = src->sample_spec()) {
        spec.dtype = s->first;
        spec.shape = s->second;
        spec.known = true;
        break;
      }
    }
    return spec;
  }
  const SampleRef& first = index.samples.front();
  spec.dtype = first.dtype;
  spec.shape = first.shape;
  spec.known = true;
  // A dimension its source declares variable (-1 in sample_spec(): a
  // TFRecord feature without a fixed shape) may differ between samples; that
  // is the feature, not a mismatch of files. Asked per source only on a
  // difference.
  std::vector<std::optional<Shape>> declared(index.sources.size());
  std::vector<bool> asked(index.sources.size(), false);
  auto variable = [&](const SampleRef& r, size_t d) {
    if (!asked[r.source]) {
      asked[r.source] = true;
      if (auto s = index.sources[r.source]->sample_spec()) declared[r.source] = s->second;
    }
    const auto& dims = declared[r.source];
    return dims && d < dims->size() && (*dims)[d] < 0;
  };
  const SampleRef* other_shape = nullptr;  // the first sample whose shape differs, for the error
  for (const SampleRef& r : index.samples) {
    if (!(r.dtype == first.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("field '", field, "': ", index.files[first.file], " holds ",
                                                     first.dtype.str(), " (", first.dtype.name(), ") samples but ",
                                                     index.files[r.file], " holds ", r.dtype.str(), " (",
                                                     r.dtype.name(), "); every file of a field needs one dtype"));
    }
    if (r.shape.size() != spec.shape.size()) {
      spec.rank_varies = true;
      if (!other_shape) other_shape = &r;
      continue;
    }
    for (size_t d = 0; d < r.shape.size(); ++d) {
      if (spec.shape[d] == r.shape[d]) continue;
      // -1 is "known after decode" (TFRecord), not a difference the index sees.
      if (spec.shape[d] >= 0 && r.shape[d] >= 0 && !other_shape && !variable(first, d) && !variable(r, d)) {
        other_shape = &r;
      }
      spec.shape[d] = -1;
    }
  }
  if (other_shape && !allow_varying_shapes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "field '", field, "': sample ", first.item, " of ", index.files[first.file], " has shape ",
        shape_str(first.shape), " but sample ", other_shape->item, " of ", index.files[other_shape->file],
        " has shape ", shape_str(other_shape->shape),
        "; allow samples of different shapes (ragged batches) with the loader's ragged option, or read the "
        "files separately"));
  }
  if (spec.rank_varies) spec.shape.clear();
  return spec;
}

absl::StatusOr<DecodedSample> read_sample(const SampleIndex& index, uint64_t id, std::vector<std::byte>& raw,
                                          std::vector<std::byte>& scratch) {
  if (id >= index.samples.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample ", id, " out of range: the dataset has ", index.samples.size(), " samples"));
  }
  const SampleRef& ref = index.samples[id];
  const SampleSource& source = *index.sources[ref.source];
  raw.resize(ref.read_bytes());
  if (!ref.extents.empty()) {
    DLFEED_ASSIGN_OR_RETURN(detail::File f, detail::File::open(index.files[ref.file]));
    size_t pos = 0;
    for (const Extent& e : ref.extents) {
      DLFEED_RETURN_IF_ERROR(
          f.read_exact(e.offset, std::span<std::byte>(raw.data() + pos, e.length), absl::StrCat("sample ", ref.item)));
      pos += e.length;
    }
  }
  return source.decode(ref, std::span<std::byte>(raw.data(), raw.size()), scratch);
}

}  // namespace dlfeed
