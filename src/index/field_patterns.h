// SPDX-License-Identifier: Apache-2.0
// Private to the loader: fields given as NAME=PATTERN (LoaderOptions::fields),
// whose files pair by what the pattern's '*' matched.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "dlfeed/format/format.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// A field as the user named it: "x" (a member, dataset, column or feature),
/// "x=*_data.npy" (the files whose name matches the pattern), or
/// "x=data-*.h5:climate/data" (in those files, that member, dataset or
/// feature: a CDB folder's data files beside its stats.h5).
struct FieldEntry {
  std::string name;
  std::string pattern;  // empty: none
  std::string member;   // empty: the files' default one (or `name` without a pattern)
};

/// "x=*_data.npy" -> {x, *_data.npy, ""}; "x=d-*.h5:a/b" -> {x, d-*.h5, a/b};
/// "x" -> {x, "", ""}. An empty name or member, or a pattern without exactly
/// one '*', is InvalidArgument.
absl::StatusOr<FieldEntry> parse_field_entry(const std::string& entry);

/// The format options that read field `f`: `o` with the member, dataset,
/// column or feature it names, or the files its pattern matches (and the
/// member named after the pattern, if any).
FormatOptions format_of(const FieldEntry& f, FormatOptions o);

/// OK when the files of `b` pair one by one with those of `a` by folder and
/// what '*' matched; else InvalidArgument naming the first file without its
/// partner and the partner's expected name.
absl::Status check_paired(const SampleIndex& a, const FieldEntry& fa, const SampleIndex& b, const FieldEntry& fb);

/// True when `index` holds NPY column files of column `name` (x.npy,
/// x_000.npy...: npy_column_of), as a plain field name selects them.
bool is_npy_column(const SampleIndex& index, const std::string& name);

/// OK when the NPY column files of `b` (column `name_b`) pair one by one, in
/// the order read, with those of `a` (column `name_a`) by folder and shard
/// tag (x_007.npy with y_007.npy in the same folder); else InvalidArgument
/// naming the two files paired and the partner expected.
absl::Status check_columns_paired(const SampleIndex& a, const std::string& name_a, const SampleIndex& b,
                                  const std::string& name_b);

}  // namespace dlfeed::detail
