// SPDX-License-Identifier: Apache-2.0
// Flags every command that opens a dataset shares (format, names, axis, ...).
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "command.h"
#include "dlfeed/format/format.h"
#include "dlfeed/order/order.h"

ABSL_DECLARE_FLAG(std::string, format);
ABSL_DECLARE_FLAG(std::string, layout);
// Defined in common_flags.cc.
ABSL_DECLARE_FLAG(uint64_t, files);
ABSL_DECLARE_FLAG(uint64_t, samples_per_file);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(int64_t, limit);
ABSL_DECLARE_FLAG(std::string, strategy);
ABSL_DECLARE_FLAG(uint32_t, rank);
ABSL_DECLARE_FLAG(uint32_t, world_size);
ABSL_DECLARE_FLAG(bool, drop_last);
ABSL_DECLARE_FLAG(uint64_t, buffer_size);
ABSL_DECLARE_FLAG(uint64_t, block_size);
ABSL_DECLARE_FLAG(uint64_t, window);
ABSL_DECLARE_FLAG(uint64_t, batch_size);
ABSL_DECLARE_FLAG(std::string, fields);
ABSL_DECLARE_FLAG(std::string, out);

namespace dlfeed::cli {

/// FormatOptions from the shared --format/--name/--axis/--feature... flags.
absl::StatusOr<FormatOptions> format_options_from_flags();
/// The flags format_options_from_flags() reads (for a command's flag list).
FlagGroup format_flags();

/// OrderSpec from the shared --strategy/--seed/--rank/... flags (epoch 0).
absl::StatusOr<OrderSpec> order_spec_from_flags();
/// The flags order_spec_from_flags() reads (for a command's flag list).
FlagGroup order_flags();

/// Parses "64,64" or "64x64" into a shape.
absl::StatusOr<Shape> parse_shape(absl::string_view text);

}  // namespace dlfeed::cli
