// SPDX-License-Identifier: Apache-2.0
// Prefetch policies: how far the loader reads ahead of the consumer over the
// known order. Plug-ins: a policy only answers whether one more batch may be
// put in flight.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::prefetch {

/// The look-ahead now: batches admitted (reads issued or done) and not yet
/// handed to the consumer, and their bytes; whether the consumer is waiting
/// for a batch; and the bytes of every batch not yet dropped (the look-ahead
/// and the batches the consumer holds: LoaderOptions::memory_budget bounds
/// these). Batches the consumer holds are not look-ahead: holding some must
/// not shrink the read-ahead (the memory budget still bounds them).
struct DLFEED_EXPORT InFlight {
  uint64_t batches = 0;
  uint64_t bytes = 0;
  bool consumer_waiting = false;
  uint64_t total_bytes = 0;
};

/// Decides whether the next batch may start reading.
class DLFEED_EXPORT PrefetchPolicy {
 public:
  virtual ~PrefetchPolicy() = default;
  virtual std::string name() const = 0;
  /// May a batch needing `next_bytes` start now? (The loader itself always
  /// admits one when the consumer waits and nothing is on the way, and it
  /// also enforces LoaderOptions::memory_budget.)
  virtual bool admit(const InFlight& now, uint64_t next_bytes) const = 0;
};

/// No look-ahead: a batch is read only when the consumer asks for it.
DLFEED_EXPORT std::unique_ptr<PrefetchPolicy> make_off_policy();
/// At most `depth` batches read ahead of the consumer.
DLFEED_EXPORT std::unique_ptr<PrefetchPolicy> make_fixed_depth_policy(uint32_t depth);
/// Read ahead while the look-ahead's bytes (not the consumer's batches) fit in `budget_bytes`.
DLFEED_EXPORT std::unique_ptr<PrefetchPolicy> make_byte_budget_policy(uint64_t budget_bytes);

/// Admits a batch when every one of `parts` does (e.g. depth and bytes).
DLFEED_EXPORT std::unique_ptr<PrefetchPolicy> make_all_of_policy(std::vector<std::unique_ptr<PrefetchPolicy>> parts);

/// "off", "depth:N", "budget:BYTES" (suffixes K, M, G allowed), or limits
/// joined by commas, all of which must admit ("depth:8,budget:256M"), as the
/// command line and the Python options spell them.
DLFEED_EXPORT absl::StatusOr<std::unique_ptr<PrefetchPolicy>> parse_policy(const std::string& spec);

}  // namespace dlfeed::prefetch
