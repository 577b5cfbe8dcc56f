// SPDX-License-Identifier: Apache-2.0
// Private: what open_dataset's folder listing tells the per-file opens, so
// that they make no system call the listing already answered.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "dlfeed/format/format.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// What the listing knows of one file.
struct ListedFile {
  /// Its folder holds no *.idx file, so no FILE.idx sidecar beside it (a
  /// TFRecord open does not try one: on a cold cache each failing lookup in
  /// a folder of 10^6 files is a directory block read).
  bool no_idx_beside = false;
};

/// open_tfrecord with what the listing knows (tfrecord.cc).
absl::StatusOr<SampleIndex> open_tfrecord_listed(const std::string& path, const FormatOptions& options,
                                                 const ListedFile& listed);

/// A TFRecord field's "auto" shape feature (FormatOptions::shape_feature)
/// holds for the whole field: when one file's `size` does not describe its
/// records, every file of the field is 1-D (tfrecord.cc).
void one_shape_rule(SampleIndex& index, const FormatOptions& options);
/// A TFRecord field's feature is of one kind (int64, float or bytes list) in
/// every file: an error naming the file whose kind differs from the first's.
absl::Status one_kind_rule(const SampleIndex& index, const FormatOptions& options);

}  // namespace dlfeed::detail
