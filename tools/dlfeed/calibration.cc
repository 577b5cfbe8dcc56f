// SPDX-License-Identifier: Apache-2.0
#include "calibration.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "dlfeed/order/order.h"
#include "dlfeed/order/random.h"
#include "json.h"

namespace dlfeed::cli {
namespace fs = std::filesystem;

namespace {

constexpr const char* kSchema = "dlfeed.calibration/1";

uint64_t hash_string(uint64_t h, absl::string_view s) {
  h = mix64(h ^ s.size());
  for (const char c : s) h = mix64(h ^ static_cast<unsigned char>(c));
  return h;
}

}  // namespace

std::string DatasetIdentity::fingerprint_hex() const { return absl::StrFormat("%016x", fingerprint); }

std::string DatasetIdentity::describe() const {
  return absl::StrCat(files, " files, ", samples, " samples, fingerprint ", fingerprint_hex());
}

DatasetIdentity identify(const SampleIndex& index) {
  DatasetIdentity id;
  id.files = index.num_files();
  id.samples = index.size();
  uint64_t h = FileLayout::of(index).fingerprint();
  const bool identified = index.has_identities();  // sizes known (index cache, MPI root): no stat per file
  for (size_t i = 0; i < index.files.size(); ++i) {
    const std::string& f = index.files[i];
    std::error_code ec;
    const uint64_t size = identified ? index.identities[i].size : fs::file_size(f, ec);
    h = hash_string(h, fs::path(f).filename().string());
    h = mix64(h ^ (ec ? UINT64_MAX : size));
  }
  id.fingerprint = h;
  return id;
}

std::string ReaderResult::label() const {
  return reader == "io_uring" ? absl::StrCat("io_uring QD", queue_depth) : reader;
}

const PatternLimit* Calibration::find(const std::string& pattern) const {
  for (const PatternLimit& p : patterns) {
    if (p.pattern == pattern) return &p;
  }
  return nullptr;
}

std::string Calibration::to_json() const {
  std::vector<std::string> quoted;
  for (const std::string& p : paths) quoted.push_back(json_quote(p));
  std::string s = absl::StrCat(
      "{\n  \"schema\": \"", kSchema, "\",\n  \"dataset\": {\"paths\": [", absl::StrJoin(quoted, ", "),
      "], \"field\": ", json_quote(field), ", \"files\": ", dataset.files, ", \"samples\": ", dataset.samples,
      ", \"bytes\": ", dataset_bytes, ", \"sample_bytes\": ",
      json_number(dataset.samples ? static_cast<double>(dataset_bytes) / static_cast<double>(dataset.samples) : 0),
      ", \"fingerprint\": \"", dataset.fingerprint_hex(), "\"},\n  \"settings\": {\"queue_depth\": ", queue_depth,
      ", \"max_bytes\": ", max_bytes, ", \"max_seconds\": ", json_number(max_seconds), ", \"seed\": ", seed,
      "},\n  \"eviction\": {\"files\": ", evicted_files, ", \"resident_bytes_after\": ", resident_bytes_after_evict,
      ", \"effective\": ", resident_bytes_after_evict == 0 ? "true" : "false", "},\n  \"patterns\": {");
  for (size_t i = 0; i < patterns.size(); ++i) {
    const PatternLimit& p = patterns[i];
    absl::StrAppend(&s, i ? "," : "", "\n    ", json_quote(p.pattern), ": {\"strategy\": ", json_quote(p.strategy),
                    ", \"limit_mib_per_s\": ", json_number(p.limit_mib_per_s),
                    ", \"limit_reader\": ", json_quote(p.limit_reader), ", \"readers\": {");
    for (size_t k = 0; k < p.readers.size(); ++k) {
      const ReaderResult& r = p.readers[k];
      absl::StrAppend(&s, k ? ", " : "", "\n      ", json_quote(r.reader), ": {\"queue_depth\": ", r.queue_depth,
                      ", \"samples\": ", r.result.samples, ", \"requests\": ", r.result.requests,
                      ", \"bytes\": ", r.result.bytes, ", \"seconds\": ", json_number(r.result.seconds),
                      ", \"mib_per_s\": ", json_number(r.result.mib_per_s()),
                      ", \"samples_per_s\": ", json_number(r.result.samples_per_s()),
                      ", \"truncated\": ", r.result.truncated ? "true" : "false", "}");
    }
    s += "}}";
  }
  s += "\n  }\n}\n";
  return s;
}

namespace {

using T = Json::Type;

absl::StatusOr<double> positive(const Json& obj, absl::string_view key, const std::string& path,
                                absl::string_view where) {
  DLFEED_ASSIGN_OR_RETURN(const Json* v, json_member(obj, key, T::kNumber, path, where));
  if (!(v->number() > 0) || !std::isfinite(v->number())) {
    return format_error(path, v->offset(), absl::StrCat(where, ".", key, " to be a positive number"),
                        json_number(v->number()));
  }
  return v->number();
}

absl::StatusOr<uint64_t> count(const Json& obj, absl::string_view key, const std::string& path,
                               absl::string_view where) {
  DLFEED_ASSIGN_OR_RETURN(const Json* v, json_member(obj, key, T::kNumber, path, where));
  const double d = v->number();
  if (!(d >= 0) || d != std::floor(d) || d > 1.8e19) {
    return format_error(path, v->offset(), absl::StrCat(where, ".", key, " to be a whole number >= 0"), json_number(d));
  }
  return static_cast<uint64_t>(d);
}

}  // namespace

absl::StatusOr<Calibration> load_calibration(const std::string& path) {
  DLFEED_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  DLFEED_ASSIGN_OR_RETURN(Json root, Json::parse(text, path));
  Calibration c;
  c.file = path;
  DLFEED_ASSIGN_OR_RETURN(const Json* schema, json_member(root, "schema", T::kString, path, "the calibration"));
  if (schema->string() != kSchema) {
    return format_error(path, schema->offset(), absl::StrCat("schema \"", kSchema, "\" (a dlfeed calibrate file)"),
                        absl::StrCat("\"", schema->string(), "\""));
  }
  DLFEED_ASSIGN_OR_RETURN(const Json* ds, json_member(root, "dataset", T::kObject, path, "the calibration"));
  DLFEED_ASSIGN_OR_RETURN(c.dataset.files, count(*ds, "files", path, "dataset"));
  DLFEED_ASSIGN_OR_RETURN(c.dataset.samples, count(*ds, "samples", path, "dataset"));
  DLFEED_ASSIGN_OR_RETURN(c.dataset_bytes, count(*ds, "bytes", path, "dataset"));
  DLFEED_ASSIGN_OR_RETURN(const Json* fp, json_member(*ds, "fingerprint", T::kString, path, "dataset"));
  if (fp->string().size() != 16 || fp->string().find_first_not_of("0123456789abcdef") != std::string::npos) {
    return format_error(path, fp->offset(), "dataset.fingerprint to be 16 lowercase hex digits",
                        absl::StrCat("\"", fp->string(), "\""));
  }
  c.dataset.fingerprint = std::stoull(fp->string(), nullptr, 16);
  if (const Json* f = ds->find("field"); f && f->type() == T::kString) c.field = f->string();
  if (const Json* ps = ds->find("paths"); ps && ps->type() == T::kArray) {
    for (const Json& p : ps->array()) {
      if (p.type() == T::kString) c.paths.push_back(p.string());
    }
  }
  if (const Json* st = root.find("settings"); st && st->type() == T::kObject) {
    if (const Json* q = st->find("queue_depth"); q && q->type() == T::kNumber) {
      c.queue_depth = static_cast<uint32_t>(q->number());
    }
  }
  DLFEED_ASSIGN_OR_RETURN(const Json* patterns, json_member(root, "patterns", T::kObject, path, "the calibration"));
  for (const auto& [name, p] : patterns->object()) {
    const std::string where = absl::StrCat("patterns.", name);
    PatternLimit pl;
    pl.pattern = name;
    DLFEED_ASSIGN_OR_RETURN(const Json* strategy, json_member(p, "strategy", T::kString, path, where));
    pl.strategy = strategy->string();
    DLFEED_ASSIGN_OR_RETURN(pl.limit_mib_per_s, positive(p, "limit_mib_per_s", path, where));
    if (const Json* r = p.find("limit_reader"); r && r->type() == T::kString) pl.limit_reader = r->string();
    c.patterns.push_back(std::move(pl));
  }
  if (c.patterns.empty()) {
    return format_error(path, patterns->offset(), "at least one measured pattern in \"patterns\"", "none");
  }
  return c;
}

std::string pattern_strategy(const std::string& pattern) {
  if (pattern == "random") return "global_shuffle";
  return pattern;
}

std::string pattern_class(const std::string& strategy) {
  if (strategy == "sequential" || strategy == "file_shuffle" || strategy == "buffered_shuffle" ||
      strategy == "block_shuffle") {
    return "sequential";
  }
  return "random";
}

const PatternLimit* limit_for(const Calibration& c, const std::string& strategy) {
  for (const PatternLimit& p : c.patterns) {
    if (p.strategy == strategy) return &p;
  }
  return c.find(pattern_class(strategy));
}

std::string default_calibration_path(const std::vector<std::string>& paths, const DatasetIdentity& id) {
  std::error_code ec;
  if (paths.size() == 1 && fs::is_directory(paths[0], ec)) {
    return (fs::path(paths[0]) / "dlfeed-calibration.json").string();
  }
  return (fs::path("data") / "calibration" / absl::StrCat("dataset-", id.fingerprint_hex(), ".json")).string();
}

}  // namespace dlfeed::cli
