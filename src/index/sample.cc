// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/sample.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI {

// num_elements and shape_str: header tier, dlfeed/sample-inl.h.

uint64_t SampleRef::read_bytes() const {
  uint64_t n = 0;
  for (const Extent& e : extents) n += e.length;
  return n;
}

uint64_t SampleSource::total_read_bytes() const {
  uint64_t total = 0;
  SampleRef r;
  const uint64_t n = num_samples();
  for (uint64_t k = 0; k < n; ++k) {
    fill(k, r);
    total += r.read_bytes();
  }
  return total;
}

std::string samples_per_file_str(const SampleIndex& index) {
  const uint64_t n = index.num_files();
  if (n == 0 || index.sources.size() != n) return "no file";
  uint64_t lo = UINT64_MAX, hi = 0;
  for (uint64_t f = 0; f < n; ++f) {
    const uint64_t k = index.file_begin[f + 1] - index.file_begin[f];
    lo = std::min(lo, k);
    hi = std::max(hi, k);
  }
  const std::string along = index.sources[0]->sample_axis();
  const std::string count = lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, " to ", hi);
  const std::string noun = hi == 1 ? "sample" : "samples";
  if (along == "axis none") return absl::StrCat(count, " ", noun, " per file (axis none)");
  if (along == "records") return absl::StrCat(count, " ", noun, " per file (one per record)");
  return absl::StrCat(count, " ", noun, " per file along ", along);
}

uint32_t SampleIndex::file_of(uint64_t id) const {
  // The last file whose first sample is at or before id (files of no
  // samples share their begin with the next file, and are skipped).
  const auto it = std::upper_bound(file_begin.begin(), file_begin.end(), id);
  return static_cast<uint32_t>(it - file_begin.begin()) - 1;
}

void SampleIndex::ref_in_file(uint64_t id, uint32_t file, SampleRef& out) const {
  out.file = file;
  out.source = file;
  out.item = id - file_begin[file];
  out.extents.clear();
  sources[file]->fill(out.item, out);
}

void SampleIndex::ref(uint64_t id, SampleRef& out) const { ref_in_file(id, file_of(id), out); }

SampleRef SampleIndex::ref(uint64_t id) const {
  SampleRef r;
  ref(id, r);
  return r;
}

uint64_t SampleIndex::total_read_bytes() const {
  uint64_t total = 0;
  for (const auto& s : sources) total += s->total_read_bytes();
  return total;
}

uint64_t SampleIndex::index_bytes() const {
  uint64_t total = file_begin.capacity() * sizeof(uint64_t) + files.capacity() * sizeof(std::string) +
                   sources.capacity() * sizeof(void*);
  for (const auto& f : files) total += f.capacity() > 15 ? f.capacity() + 1 : 0;
  for (const auto& s : sources) total += s->index_bytes();
  return total;
}

void SampleIndex::add_file(std::string path, std::unique_ptr<SampleSource> source) {
  const uint64_t n = source->num_samples();
  files.push_back(std::move(path));
  sources.push_back(std::move(source));
  file_begin.push_back(size() + n);
}

void SampleIndex::append(SampleIndex&& other) {
  const uint64_t sample_base = size();
  // Identities stay one per file only while every part has them.
  if (has_identities() && other.has_identities()) {
    identities.insert(identities.end(), other.identities.begin(), other.identities.end());
  } else if (!identities.empty()) {
    identities.clear();
    identities.shrink_to_fit();
  }
  for (auto& f : other.files) files.push_back(std::move(f));
  for (auto& s : other.sources) sources.push_back(std::move(s));
  for (size_t i = 1; i < other.file_begin.size(); ++i) {
    file_begin.push_back(sample_base + other.file_begin[i]);
  }
  other = SampleIndex{};
}

absl::Status SampleIndex::check() const {
  if (file_begin.size() != files.size() + 1 || file_begin.empty() || file_begin[0] != 0) {
    return absl::InternalError(absl::StrCat("sample index: ", files.size(), " files but ", file_begin.size(),
                                            " file boundaries (expected one more, the first 0)"));
  }
  if (sources.size() != files.size()) {
    return absl::InternalError(absl::StrCat("sample index: ", files.size(), " files but ", sources.size(),
                                            " sources (expected one per file)"));
  }
  for (size_t f = 0; f < files.size(); ++f) {
    if (file_begin[f + 1] < file_begin[f] || file_begin[f + 1] - file_begin[f] != sources[f]->num_samples()) {
      return absl::InternalError(absl::StrCat("sample index: ", files[f], " spans ids ", file_begin[f], " to ",
                                              file_begin[f + 1], " but its source holds ", sources[f]->num_samples(),
                                              " samples"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<FieldSpec> uniform_spec(const SampleIndex& index, absl::string_view field, bool allow_varying_shapes) {
  FieldSpec spec;
  if (index.empty()) {
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
  const SampleRef first = index.ref(0);
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
  std::optional<SampleRef> other_shape;  // the first sample whose shape differs, for the error
  auto visit = [&](const SampleRef& r) -> absl::Status {
    if (!(r.dtype == first.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("field '", field, "': ", index.files[first.file], " holds ",
                                                     first.dtype.str(), " (", first.dtype.name(), ") samples but ",
                                                     index.files[r.file], " holds ", r.dtype.str(), " (",
                                                     r.dtype.name(), "); every file of a field needs one dtype"));
    }
    if (r.shape.size() != spec.shape.size()) {
      spec.rank_varies = true;
      if (!other_shape) other_shape = r;
      return absl::OkStatus();
    }
    for (size_t d = 0; d < r.shape.size(); ++d) {
      if (spec.shape[d] == r.shape[d]) continue;
      // -1 is "known after decode" (TFRecord), not a difference the index sees.
      if (spec.shape[d] >= 0 && r.shape[d] >= 0 && !other_shape && !variable(first, d) && !variable(r, d)) {
        other_shape = r;
      }
      spec.shape[d] = -1;
    }
    return absl::OkStatus();
  };
  // Within a source samples share dtype and shape, except where the source
  // says they may differ: its first sample stands for the others.
  SampleRef r;
  for (uint32_t f = 0; f < index.num_files(); ++f) {
    const uint64_t b = index.file_begin[f], e = index.file_begin[f + 1];
    const uint64_t last = index.sources[f]->shapes_differ() ? e : std::min(e, b + 1);
    for (uint64_t id = b; id < last; ++id) {
      index.ref_in_file(id, f, r);
      DLFEED_RETURN_IF_ERROR(visit(r));
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
  if (id >= index.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample ", id, " out of range: the dataset has ", index.size(), " samples"));
  }
  const SampleRef ref = index.ref(id);
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
