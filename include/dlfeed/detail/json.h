// SPDX-License-Identifier: Apache-2.0
// Writing JSON text: string literals and numbers, spelled the same way by
// every JSON the library and the command line write (the counters' exports,
// traces, run reports, calibrations, workload manifests).
#pragma once

#include <string>

#include "absl/strings/string_view.h"

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// Appends `s` as a JSON string literal, quotes included: '"', '\\' and the
/// control characters escaped, well-formed UTF-8 as it is, and each byte that
/// is not as \\udcXX (U+DC80 + byte: Python's surrogateescape gives it back).
DLFEED_EXPORT void json_append_quoted(std::string& out, absl::string_view s);
/// `s` as a JSON string literal, quotes included.
DLFEED_EXPORT std::string json_quote(absl::string_view s);

/// A double as a JSON number that reads back as the same double: the
/// shortest digits that do (std::to_chars), as plain decimals from 1e-4 up
/// to 1e17 ("100000", "0.25", "0.0001") and with an exponent beyond
/// ("1e-05", "1e+17"). NaN and the infinities, which JSON cannot spell, as 0.
DLFEED_EXPORT std::string json_number(double v);
/// Appends json_number(v).
DLFEED_EXPORT void json_append_number(std::string& out, double v);

}  // namespace dlfeed::detail
