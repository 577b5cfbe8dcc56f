// Flags every command that opens a dataset shares (format, names, axis, ...).
#pragma once

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "dlfeed/format/format.h"

ABSL_DECLARE_FLAG(std::string, format);

namespace dlfeed::cli {

/// FormatOptions from the shared --format/--name/--axis/--feature... flags.
absl::StatusOr<FormatOptions> format_options_from_flags();

/// Parses "64,64" or "64x64" into a shape.
absl::StatusOr<Shape> parse_shape(absl::string_view text);

}  // namespace dlfeed::cli
