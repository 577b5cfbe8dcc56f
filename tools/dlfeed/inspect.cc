// SPDX-License-Identifier: Apache-2.0
// dlfeed inspect: what dlfeed finds in a file or folder, and the raw bytes of
// one sample, so any tool can check dlfeed's reading from outside.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "command.h"
#include "common_format.h"
#include "dlfeed/error.h"
#include "dlfeed/format/format.h"
#include "index/field_patterns.h"
#include "json.h"

ABSL_FLAG(bool, json, false, "Print JSON: files, sources and every sample's shape, dtype and extents");
ABSL_FLAG(int64_t, dump_sample, -1, "Write the decoded bytes of this sample (global id) to --out");

namespace dlfeed::cli {
namespace {

std::string json_shape(const Shape& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) absl::StrAppend(&o, i ? ", " : "", s[i]);
  return o + "]";
}

std::string index_json(const SampleIndex& index, int64_t limit) {
  std::string o = "{\n  \"num_files\": " + std::to_string(index.num_files()) +
                  ",\n  \"num_samples\": " + std::to_string(index.size()) +
                  ",\n  \"samples_per_file\": " + json_quote(samples_per_file_str(index)) + ",\n  \"files\": [";
  for (size_t i = 0; i < index.files.size(); ++i) {
    absl::StrAppend(&o, i ? ", " : "", json_quote(index.files[i]));
  }
  o += "],\n  \"file_begin\": [";
  for (size_t i = 0; i < index.file_begin.size(); ++i) absl::StrAppend(&o, i ? ", " : "", index.file_begin[i]);
  o += "],\n  \"sources\": [";
  // One source per file: source i is file i's.
  for (size_t i = 0; i < index.sources.size(); ++i) {
    absl::StrAppend(&o, i ? "," : "", "\n    {\"file\": ", i, ", \"layout\": ", json_quote(index.sources[i]->layout()),
                    ", \"describe\": ", json_quote(index.sources[i]->describe()), "}");
  }
  o += "\n  ],\n  \"samples\": [";
  const uint64_t n = limit < 0 ? index.size() : std::min<uint64_t>(index.size(), limit);
  for (uint64_t id = 0; id < n; ++id) {
    const SampleRef r = index.ref(id);
    absl::StrAppend(&o, id ? "," : "", "\n    {\"id\": ", id, ", \"file\": ", r.file, ", \"item\": ", r.item,
                    ", \"shape\": ", json_shape(r.shape), ", \"dtype\": \"", r.dtype.str(), "\", \"extents\": [");
    for (size_t e = 0; e < r.extents.size(); ++e) {
      absl::StrAppend(&o, e ? ", " : "", "[", r.extents[e].offset, ", ", r.extents[e].length, "]");
    }
    o += "]}";
  }
  o += "\n  ]\n}";
  return o;
}

void print_text(const SampleIndex& index, int64_t limit) {
  std::printf("%llu files, %llu samples: %s\n", static_cast<unsigned long long>(index.num_files()),
              static_cast<unsigned long long>(index.size()), samples_per_file_str(index).c_str());
  const uint64_t per_file = limit < 0 ? 10 : static_cast<uint64_t>(limit);
  for (uint64_t f = 0; f < index.num_files(); ++f) {
    const uint64_t b = index.file_begin[f], e = index.file_begin[f + 1];
    std::printf("\nfile %llu: %s\n  %llu samples\n", static_cast<unsigned long long>(f), index.files[f].c_str(),
                static_cast<unsigned long long>(e - b));
    std::printf("  [%s] %s\n", index.sources[f]->layout().c_str(), index.sources[f]->describe().c_str());
    for (uint64_t id = b; id < e && id - b < per_file; ++id) {
      const SampleRef r = index.ref(id);
      std::string ext;
      for (const Extent& x : r.extents) absl::StrAppend(&ext, " [", x.offset, ", +", x.length, ")");
      if (r.extents.empty()) ext = " (read through the format library)";
      std::printf("  sample %llu: shape %s %s, %s bytes; reads%s\n", static_cast<unsigned long long>(id),
                  shape_str(r.shape).c_str(), r.dtype.name().c_str(),
                  r.nbytes() ? std::to_string(r.nbytes()).c_str() : "?", ext.c_str());
    }
    if (e - b > per_file) {
      std::printf("  ... %llu more\n", static_cast<unsigned long long>(e - b - per_file));
    }
  }
}

// The first data file of `paths` in the order they are read (the first
// path's, a folder's first by path), or "" when there is none.
std::string first_data_file(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string& p = paths.front();
  if (!fs::is_directory(p, ec)) return fs::exists(p, ec) ? p : "";
  std::string best;
  for (auto it = fs::recursive_directory_iterator(p, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec) || !detect_format(it->path().string()).ok()) continue;
    if (best.empty() || it->path().string() < best) best = it->path().string();
  }
  return best;
}

// What a field entry of --fields reads, as the loader takes it: a member,
// dataset, column or feature by name, or the files NAME=PATTERN matches.
FormatOptions field_options(const std::string& entry, const FormatOptions& o) {
  return detail::format_of(value_or_throw(detail::parse_field_entry(entry)), o);
}

// Every field the files offer (as h5ls lists datasets): each one's samples
// and layout over all the paths.
int print_fields(const std::vector<std::string>& paths, const std::string& file, const std::vector<std::string>& fields,
                 FormatOptions options) {
  std::printf("%s: %zu fields in %s; choose with --fields (run and inspect) or --name\n",
              absl::StrJoin(paths, " ").c_str(), fields.size(), file.c_str());
  for (const std::string& field : fields) {
    options.name = field;
    options.feature = field;
    absl::StatusOr<SampleIndex> idx = open_dataset(paths, options);
    if (!idx.ok()) {
      std::printf("  %s: not readable as samples: %s\n", field.c_str(), std::string(idx.status().message()).c_str());
      continue;
    }
    std::printf("  %s: %llu samples, %s", field.c_str(), static_cast<unsigned long long>(idx->size()),
                samples_per_file_str(*idx).c_str());
    if (!idx->sources.empty()) {
      std::printf("; [%s] %s", idx->sources[0]->layout().c_str(), idx->sources[0]->describe().c_str());
    }
    std::printf("\n");
  }
  return 0;
}

// What `dlfeed run` refuses in the listed files, said after the listing: one
// dtype per field (1: an error), one shape unless ragged (a note).
int check_uniform(const SampleIndex& index, const std::string& field) {
  if (index.size() == 0 || uniform_spec(index, field, false).ok()) return 0;
  if (absl::StatusOr<FieldSpec> loose = uniform_spec(index, field, true); !loose.ok()) {
    std::fprintf(stderr, "dlfeed inspect: error: dlfeed run refuses these files: %s\n",
                 std::string(loose.status().message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "dlfeed inspect: note: %s\n",
               std::string(uniform_spec(index, field, false).status().message()).c_str());
  return 0;
}

// --fields: each field's samples, as `run --fields` reads them.
int inspect_each_field(const std::vector<std::string>& args, const std::vector<std::string>& entries,
                       const FormatOptions& options) {
  const bool json = absl::GetFlag(FLAGS_json);
  std::string o = "{\n\"fields\": {";
  int rc = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const SampleIndex index = value_or_throw(open_dataset(args, field_options(entries[i], options)));
    const std::string name = value_or_throw(detail::parse_field_entry(entries[i])).name;
    if (json) {
      absl::StrAppend(&o, i ? ",\n" : "\n", json_quote(name), ": ", index_json(index, absl::GetFlag(FLAGS_limit)));
    } else {
      std::printf("%sfield %s: ", i ? "\n" : "", name.c_str());
      print_text(index, absl::GetFlag(FLAGS_limit));
    }
    rc = std::max(rc, check_uniform(index, name));
  }
  if (json) std::printf("%s\n}}\n", o.c_str());
  return rc;
}

int run_inspect(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fprintf(stderr, "dlfeed inspect: give a file or folder (see --help)\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_dump_sample) < -1 || absl::GetFlag(FLAGS_limit) < -1) {
    throw Error(absl::InvalidArgumentError(
        absl::StrCat(absl::GetFlag(FLAGS_limit) < -1 ? "--limit " : "--dump-sample ",
                     absl::GetFlag(FLAGS_limit) < -1 ? absl::GetFlag(FLAGS_limit) : absl::GetFlag(FLAGS_dump_sample),
                     ": 0 or more (-1: none)")));
  }
  FormatOptions options = value_or_throw(format_options_from_flags());
  const std::vector<std::string> entries = absl::StrSplit(absl::GetFlag(FLAGS_fields), ',', absl::SkipEmpty());
  if (!entries.empty() && absl::GetFlag(FLAGS_dump_sample) < 0) return inspect_each_field(args, entries, options);
  if (!entries.empty()) options = field_options(entries.front(), options);  // --dump-sample: the first field's
  absl::StatusOr<SampleIndex> opened = open_dataset(args, options);
  if (!opened.ok() && absl::IsNotFound(opened.status()) && options.name.empty() && entries.empty() &&
      absl::GetFlag(FLAGS_dump_sample) < 0 && !absl::GetFlag(FLAGS_json)) {
    // No field named and no default one (records, x): show every field the files offer.
    if (const std::string first = first_data_file(args); !first.empty()) {
      auto fields = list_fields(first, options);
      if (fields.ok()) return print_fields(args, first, *fields, options);
    }
  }
  SampleIndex index = value_or_throw(std::move(opened));
  const std::string first = index.files.empty() ? std::string() : index.files.front();
  const int64_t dump = absl::GetFlag(FLAGS_dump_sample);
  if (dump >= 0) {
    const std::string out = absl::GetFlag(FLAGS_out);
    if (out.empty()) {
      std::fprintf(stderr, "dlfeed inspect: --dump-sample needs --out PATH (or --out -)\n");
      return 2;
    }
    std::vector<std::byte> raw, scratch;
    DecodedSample s = value_or_throw(read_sample(index, static_cast<uint64_t>(dump), raw, scratch));
    if (out == "-") {
      std::fwrite(s.bytes.data(), 1, s.bytes.size(), stdout);
    } else {
      std::ofstream f(out, std::ios::binary);
      f.write(reinterpret_cast<const char*>(s.bytes.data()), static_cast<std::streamsize>(s.bytes.size()));
      if (!f) throw Error(absl::UnavailableError(absl::StrCat(out, ": cannot write the sample")));
      std::fprintf(stderr, "sample %lld: shape %s %s, %zu bytes written to %s\n", static_cast<long long>(dump),
                   shape_str(s.shape).c_str(), s.dtype.str().c_str(), s.bytes.size(), out.c_str());
    }
    return 0;
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", index_json(index, absl::GetFlag(FLAGS_limit)).c_str());
  } else {
    // The read field first, then any other the first file offers (as h5ls lists them).
    if (!first.empty()) {
      if (auto fields = list_fields(first, options); fields.ok() && fields->size() > 1) {
        std::printf("%s holds the fields %s; below, the one read by default (--fields names others)\n", first.c_str(),
                    absl::StrJoin(*fields, ", ").c_str());
      }
    }
    print_text(index, absl::GetFlag(FLAGS_limit));
  }
  return check_uniform(index, options.name.empty() ? std::string("data") : options.name);
}

std::vector<FlagGroup> inspect_flags() {
  return {flag_group("", FLAGS_json, FLAGS_limit, FLAGS_dump_sample, FLAGS_out, FLAGS_fields), format_flags()};
}

}  // namespace

DLFEED_COMMAND(inspect, "list a file's or folder's samples (shapes, dtypes, extents); dump one sample's bytes",
               "PATH...", run_inspect, inspect_flags);

}  // namespace dlfeed::cli
