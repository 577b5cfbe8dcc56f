// Prefetch policies: how far the loader reads ahead of the consumer over the
// known order. Plug-ins: a policy only answers whether one more batch may be
// put in flight.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace dlfeed::prefetch {

/// What is in flight now: batches planned (reads issued or done) and not yet
/// released by the consumer, and the bytes they hold.
struct InFlight {
  uint64_t batches = 0;
  uint64_t bytes = 0;
};

/// Decides whether the next batch may start reading.
class PrefetchPolicy {
 public:
  virtual ~PrefetchPolicy() = default;
  virtual std::string name() const = 0;
  /// May a batch needing `next_bytes` start now? A policy must admit when
  /// nothing is in flight, or the loader would stall forever.
  virtual bool admit(const InFlight& now, uint64_t next_bytes) const = 0;
};

/// No look-ahead: a batch is read only after the previous one was released.
std::unique_ptr<PrefetchPolicy> make_off_policy();
/// At most `depth` batches in flight (the consumer's one included).
std::unique_ptr<PrefetchPolicy> make_fixed_depth_policy(uint32_t depth);
/// As many batches as fit in `budget_bytes` (always at least one).
std::unique_ptr<PrefetchPolicy> make_byte_budget_policy(uint64_t budget_bytes);

/// "off", "depth:N", "budget:BYTES" (suffixes K, M, G allowed), as the
/// command line and the Python options spell them.
absl::StatusOr<std::unique_ptr<PrefetchPolicy>> parse_policy(const std::string& spec);

}  // namespace dlfeed::prefetch
