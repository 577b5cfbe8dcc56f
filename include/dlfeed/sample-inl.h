// SPDX-License-Identifier: Apache-2.0
// The shape helpers of dlfeed/sample.h (header tier: see dlfeed/detail/inline.h).
#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dlfeed/detail/inline.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI {

DLFEED_INLINE int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return 0;
    n *= d;
  }
  return n;
}

DLFEED_INLINE std::string shape_str(const Shape& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

}  // namespace dlfeed
