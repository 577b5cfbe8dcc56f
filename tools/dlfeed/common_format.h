// Flags every command that opens a dataset shares (format, names, axis, ...).
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "dlfeed/format/format.h"

ABSL_DECLARE_FLAG(std::string, format);
// Defined in common_flags.cc.
ABSL_DECLARE_FLAG(uint64_t, files);
ABSL_DECLARE_FLAG(uint64_t, samples_per_file);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(int64_t, limit);

namespace dlfeed::cli {

/// FormatOptions from the shared --format/--name/--axis/--feature... flags.
absl::StatusOr<FormatOptions> format_options_from_flags();

/// Parses "64,64" or "64x64" into a shape.
absl::StatusOr<Shape> parse_shape(absl::string_view text);

}  // namespace dlfeed::cli
