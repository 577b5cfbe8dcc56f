// SPDX-License-Identifier: Apache-2.0
// The resume state a Loader saves (Loader::state()), read without a Loader:
// which epoch, strategy, rank and position it resumes, for tools, bindings
// and checkpoint code that want to look inside one.
//
//   auto s = dlfeed::decode_loader_state(bytes);
//   if (s.ok()) printf("epoch %llu at %llu\n", s->order.spec.epoch, s->order.position);
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/order/order.h"

namespace dlfeed::inline DLFEED_ABI {

/// The fields of a Loader state. The bytes are "dlfL", a version byte, then
/// the order state (OrderCursor::state(), decode_state()) at the position of
/// the consumer: the first sample not yet handed out.
struct DLFEED_EXPORT LoaderState {
  uint8_t version = 1;
  OrderState order;
};

/// The current version byte of Loader::state().
inline constexpr uint8_t kLoaderStateVersion = 1;

/// True when `bytes` start as a Loader state does ("dlfL" and a version
/// byte); a bare order state (OrderCursor::state()) does not.
DLFEED_EXPORT bool is_loader_state(absl::string_view bytes);

/// Decodes a Loader::state(). Anything else (a bare order state, another
/// version, truncated or corrupt bytes) is an InvalidArgument error saying
/// what was expected.
DLFEED_EXPORT absl::StatusOr<LoaderState> decode_loader_state(absl::string_view bytes);

}  // namespace dlfeed
