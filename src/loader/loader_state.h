// SPDX-License-Identifier: Apache-2.0
// Private: the Loader's resume state (the public decoder is
// include/dlfeed/loader_state.h): the bytes state() writes, and what
// restore() makes of them.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/loader_state.h"
#include "dlfeed/order/order.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// "dlfL", the version byte, then `order_state`.
std::string encode_loader_state(absl::string_view order_state);

/// The state of a loader whose epoch started at `base` (null: none started,
/// which resumes at the beginning of epoch 0 of `spec`) and whose consumer
/// has taken the samples before rank position `position`.
std::string loader_state_at(const FileLayout& layout, const OrderSpec& spec, const OrderCursor* base,
                            uint64_t position);

/// Where a restored loader starts: the epoch, where its cut of the global
/// order starts (OrderSpec::global_start), and the rank position.
struct ResumePoint {
  uint64_t epoch = 0;
  uint64_t global_start = 0;
  uint64_t position = 0;
};

/// Checks `state` against a loader over `layout` with order options `want`
/// (strategy, seed and parameters must match; the layout and the explicit
/// index array must be the ones the state was saved with) and says where it
/// resumes. A state from another rank or world size resumes elastically: the
/// job consumed global positions [0, G + k*W), and this rank reads its share
/// of the rest.
absl::StatusOr<ResumePoint> resume_point(absl::string_view state, const FileLayout& layout, const OrderSpec& want);

}  // namespace dlfeed::detail
