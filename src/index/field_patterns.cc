// SPDX-License-Identifier: Apache-2.0
#include "index/field_patterns.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "dlfeed/format/format.h"

namespace dlfeed::inline DLFEED_ABI::detail {
namespace fs = std::filesystem;

absl::StatusOr<FieldEntry> parse_field_entry(const std::string& entry) {
  const size_t eq = entry.find('=');
  // Without a '*' after it, '=' is part of a plain name (an HDF5 dataset "x=y"):
  // every NAME=PATTERN has one; but a data file's name after it (x=data.npy)
  // is a pattern missing its '*', refused below.
  if (eq == std::string::npos ||
      (entry.find('*', eq) == std::string::npos && !detect_format(entry.substr(eq + 1)).ok())) {
    return FieldEntry{entry, "", ""};
  }
  FieldEntry f{entry.substr(0, eq), entry.substr(eq + 1), ""};
  // PATTERN:MEMBER: the pattern is a file name (no '/') with a data file's
  // extension, so the first ':' after its '*' that follows one ends it (a
  // name holding ':', as a time of day, stays whole).
  const size_t star = f.pattern.find('*');
  size_t colon = f.pattern.find(':', star == std::string::npos ? 0 : star);
  while (colon != std::string::npos && !detect_format(f.pattern.substr(0, colon)).ok()) {
    colon = f.pattern.find(':', colon + 1);
  }
  if (colon != std::string::npos) {
    f.member = f.pattern.substr(colon + 1);
    f.pattern.resize(colon);
    if (f.member.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("field '", entry,
                       "': expected NAME=PATTERN:MEMBER with a member, dataset or feature after ':' "
                       "(x=data-*.h5:climate/data)"));
    }
  }
  if (f.name.empty() || std::count(f.pattern.begin(), f.pattern.end(), '*') != 1 ||
      f.pattern.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", entry,
                     "': expected NAME=PATTERN, a field name and a file name with exactly one '*' (x=*_data.npy), "
                     "NAME=PATTERN:MEMBER (x=data-*.h5:climate/data), or a plain name"));
  }
  return f;
}

FormatOptions format_of(const FieldEntry& f, FormatOptions o) {
  // A pattern names files, not a member (unless PATTERN:MEMBER names one too).
  if (f.pattern.empty()) {
    o.name = f.name;
    if (!f.name.empty()) o.feature = f.name;
  } else if (!f.member.empty()) {
    o.name = f.member;
    o.feature = f.member;
  }
  o.file_pattern = f.pattern;
  return o;
}

namespace {

using Key = std::pair<std::string, std::string>;  // (folder, what '*' matched)

Key key_of(const std::string& path, const std::string& pattern) {
  std::optional<std::string> stem = pattern_stem(path, pattern);
  return {fs::path(path).parent_path().string(), stem.value_or(fs::path(path).filename().string())};
}

std::string partner_of(const Key& k, const std::string& pattern) {
  return (fs::path(k.first) / absl::StrReplaceAll(pattern, {{"*", k.second}})).string();
}

}  // namespace

absl::Status check_paired(const SampleIndex& a, const FieldEntry& fa, const SampleIndex& b, const FieldEntry& fb) {
  if (fa.pattern.empty() || fb.pattern.empty()) return absl::OkStatus();  // paired by samples per file (the loader)
  std::vector<Key> ka, kb;
  for (const std::string& f : a.files) ka.push_back(key_of(f, fa.pattern));
  for (const std::string& f : b.files) kb.push_back(key_of(f, fb.pattern));
  // Both lists are sorted by key (open_dataset orders a pattern's files so).
  size_t i = 0, j = 0;
  while (i < ka.size() || j < kb.size()) {
    if (j == kb.size() || (i < ka.size() && ka[i] < kb[j])) {
      return absl::InvalidArgumentError(absl::StrCat(a.files[i], " (field '", fa.name, "', ", fa.pattern,
                                                     ") has no partner for field '", fb.name, "' (", fb.pattern,
                                                     "): expected ", partner_of(ka[i], fb.pattern)));
    }
    if (i == ka.size() || kb[j] < ka[i]) {
      return absl::InvalidArgumentError(absl::StrCat(b.files[j], " (field '", fb.name, "', ", fb.pattern,
                                                     ") has no partner for field '", fa.name, "' (", fa.pattern,
                                                     "): expected ", partner_of(kb[j], fa.pattern)));
    }
    ++i;
    ++j;
  }
  return absl::OkStatus();
}

bool is_npy_column(const SampleIndex& index, const std::string& name) {
  if (index.files.empty() || name.empty()) return false;
  return std::all_of(index.files.begin(), index.files.end(), [&](const std::string& f) {
    return absl::EqualsIgnoreCase(fs::path(f).extension().string(), ".npy") && npy_column_of(f) == name;
  });
}

absl::Status check_columns_paired(const SampleIndex& a, const std::string& name_a, const SampleIndex& b,
                                  const std::string& name_b) {
  // (folder, shard tag): x_007.npy's tag is "_007", x.npy's "".
  auto key = [](const std::string& f, const std::string& column) -> Key {
    const fs::path p(f);
    return {p.parent_path().string(), p.stem().string().substr(column.size())};
  };
  // The file of `column` with `f`'s folder and tag (and its extension: .npy or .NPY).
  auto partner = [&](const std::string& f, const std::string& column_of_f, const std::string& column) {
    const Key k = key(f, column_of_f);
    return (fs::path(k.first) / absl::StrCat(column, k.second, fs::path(f).extension().string())).string();
  };
  const size_t n = std::min(a.files.size(), b.files.size());
  for (size_t i = 0; i < n; ++i) {
    const Key ka = key(a.files[i], name_a), kb = key(b.files[i], name_b);
    if (ka == kb) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        a.files[i], " (NPY column '", name_a, "') and ", b.files[i], " (column '", name_b, "') are file ", i + 1,
        " of their columns: their samples would be paired, but column files pair by folder and shard tag (expected ",
        partner(a.files[i], name_a, name_b), "; x_007.npy pairs with y_007.npy beside it)"));
  }
  if (a.files.size() != b.files.size()) {
    const bool a_more = a.files.size() > b.files.size();
    const std::string& extra = a_more ? a.files[n] : b.files[n];
    const std::string& its = a_more ? name_a : name_b;
    const std::string& other = a_more ? name_b : name_a;
    return absl::InvalidArgumentError(absl::StrCat(extra, " (NPY column '", its, "') has no partner in column '", other,
                                                   "': expected ", partner(extra, its, other)));
  }
  return absl::OkStatus();
}

}  // namespace dlfeed::detail
