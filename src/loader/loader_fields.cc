// SPDX-License-Identifier: Apache-2.0
#include "loader/loader_fields.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dlfeed/error.h"
#include "dlfeed/format/format.h"
#include "index/field_patterns.h"

namespace dlfeed::inline DLFEED_ABI::detail {

absl::Status open_fields(const LoaderOptions& options, counters::Counters& cnt, std::vector<std::string>& field_names,
                         std::vector<FieldSpec>& field_specs, std::vector<SampleIndex>& indices,
                         std::vector<FormatOptions>& formats) {
  std::vector<std::string> names = options.fields;
  for (size_t i = 0; i < names.size(); ++i) {
    if (std::find(names.begin(), names.begin() + i, names[i]) != names.begin() + i) {
      return absl::InvalidArgumentError(
          absl::StrCat("loader: field '", names[i], "' is named twice in fields; name each field once"));
    }
  }
  if (names.empty()) {
    const FileFormat f = options.format.format;
    names.push_back(f == FileFormat::kTfRecord ? options.format.feature : options.format.name);
  }
  std::vector<FieldEntry> entries;
  std::vector<std::string> parsed_names;
  for (const std::string& entry : names) {
    DLFEED_ASSIGN_OR_RETURN(FieldEntry field, parse_field_entry(entry));
    parsed_names.push_back(field.name.empty() ? (names.size() == 1 ? "data" : field.name) : field.name);
    if (std::find(parsed_names.begin(), parsed_names.end() - 1, parsed_names.back()) != parsed_names.end() - 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("loader: two fields are named '", parsed_names.back(), "'; name each field once"));
    }
  }
  // One field not named in `fields`: its shape and dtype may be given by
  // the name the options read (the TFRecord feature, the member) as well.
  const bool one_default = options.fields.empty();
  auto key_of = [&](const std::string& key) -> std::string {
    if (one_default && (key == options.format.feature || key == options.format.name)) return parsed_names[0];
    return key;
  };
  auto check_named = [&](const std::string& key, absl::string_view what) -> absl::Status {
    if (std::find(parsed_names.begin(), parsed_names.end(), key_of(key)) != parsed_names.end()) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("loader: ", what, " names '", key,
                     "', which is not a field (the fields: ", absl::StrJoin(parsed_names, ", "), ")"));
  };
  for (const auto& [key, shape] : options.field_shapes) DLFEED_RETURN_IF_ERROR(check_named(key, "field_shapes"));
  for (const auto& [key, dtype] : options.field_dtypes) DLFEED_RETURN_IF_ERROR(check_named(key, "field_dtypes"));
  std::map<std::string, Shape> shapes;
  std::map<std::string, DType> dtypes;
  for (const auto& [key, shape] : options.field_shapes) shapes[key_of(key)] = shape;
  for (const auto& [key, dtype] : options.field_dtypes) dtypes[key_of(key)] = dtype;
  for (const std::string& entry : names) {
    DLFEED_ASSIGN_OR_RETURN(FieldEntry field, parse_field_entry(entry));
    const std::string& name = field.name;
    FormatOptions fo = options.format;
    // A pattern names files, not a member (unless PATTERN:MEMBER names one too).
    fo.name = field.pattern.empty() ? name : !field.member.empty() ? field.member : options.format.name;
    fo.file_pattern = field.pattern;
    if (!name.empty() && field.pattern.empty()) fo.feature = name;
    if (!field.member.empty()) fo.feature = field.member;
    const std::string& called = parsed_names[entries.size()];
    if (auto it = shapes.find(called); it != shapes.end()) fo.feature_shape = it->second;
    if (auto it = dtypes.find(called); it != dtypes.end()) fo.feature_dtype = it->second;
    counters::Span open_span(&cnt, counters::kOpenSpan);
    DLFEED_ASSIGN_OR_RETURN(SampleIndex idx, options.index_opener ? options.index_opener(options.paths, fo)
                                                                  : open_dataset(options.paths, fo));
    DLFEED_RETURN_IF_ERROR(idx.check());
    open_span.args(indices.size(), idx.num_files());
    open_span.end();
    if (!indices.empty()) {
      const SampleIndex& first = indices[0];
      for (size_t k = 0; k < entries.size(); ++k) {  // the first field of a pattern pairs with every other
        if (entries[k].pattern.empty()) continue;
        DLFEED_RETURN_IF_ERROR(check_paired(indices[k], entries[k], idx, field));
        break;
      }
      if (idx.file_begin != first.file_begin) {
        return absl::InvalidArgumentError(absl::StrCat(
            "loader: field '", name, "' has ", idx.size(), " samples in ", idx.num_files(), " files but field '",
            field_names[0], "' has ", first.size(), " in ", first.num_files(),
            "; every field needs the same samples per file (", name, ": ", samples_per_file_str(idx), "; ",
            field_names[0], ": ", samples_per_file_str(first), "; axis none reads each array as one sample)"));
      }
    }
    field_names.push_back(name.empty() ? (names.size() == 1 ? "data" : name) : name);
    DLFEED_ASSIGN_OR_RETURN(FieldSpec spec, uniform_spec(idx, field_names.back(), options.ragged));
    field_specs.push_back(std::move(spec));
    indices.push_back(std::move(idx));
    formats.push_back(std::move(fo));
    entries.push_back(std::move(field));
  }
  return absl::OkStatus();
}

absl::Status still_indexed(const SampleIndex& index, uint32_t k, const FormatOptions& options) {
  if (k >= index.num_files()) return absl::InternalError(absl::StrCat("no file ", k, " in the index"));
  absl::StatusOr<SampleIndex> again = open_file(index.files[k], options);
  if (!again.ok()) return again.status();
  if (again->num_files() != 1) return absl::DataLossError(absl::StrCat(again->num_files(), " files"));
  const uint64_t begin = index.file_begin[k], n = index.file_begin[k + 1] - begin;
  if (again->size() != n) return absl::DataLossError(absl::StrCat(again->size(), " samples, not ", n));
  const SampleSource& was_src = *index.sources[k];
  const SampleSource& now_src = *again->sources[0];
  std::string was_state, now_state;
  was_src.cache_save(was_state);
  now_src.cache_save(now_state);
  if (was_src.layout() != now_src.layout() || was_state != now_state) {
    return absl::DataLossError(absl::StrCat("now ", now_src.describe(), ", was ", was_src.describe()));
  }
  auto known = [](const Shape& s) { return std::none_of(s.begin(), s.end(), [](int64_t d) { return d < 0; }); };
  SampleRef was, now;
  for (uint64_t i = 0; i < n; ++i) {
    index.ref_in_file(begin + i, k, was);
    again->ref_in_file(i, 0, now);
    if (was.item != now.item || was.extents != now.extents || !(was.dtype == now.dtype) ||
        (known(was.shape) && known(now.shape) && was.shape != now.shape)) {
      return absl::DataLossError(absl::StrCat("sample ", i, " now ", shape_str(now.shape), " ", now.dtype.name(),
                                              ", was ", shape_str(was.shape), " ", was.dtype.name()));
    }
  }
  return absl::OkStatus();
}

void add_files(const std::vector<SampleIndex>& indices, FileTable& files, std::vector<std::vector<uint32_t>>& file_ids,
               std::vector<std::string>& file_names) {
  for (const SampleIndex& idx : indices) {
    std::vector<uint32_t> ids;
    const bool identified = idx.has_identities();  // then no stat per file (an MPI rank given the index)
    for (size_t f = 0; f < idx.files.size(); ++f) {
      const std::string& path = idx.files[f];
      ids.push_back(identified ? files.add(path, idx.identities[f]) : files.add(path));
      if (file_names.size() <= ids.back()) file_names.resize(ids.back() + 1);
      file_names[ids.back()] = path;
    }
    file_ids.push_back(std::move(ids));
  }
}

}  // namespace dlfeed::inline DLFEED_ABI::detail
