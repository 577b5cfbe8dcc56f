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
#include "absl/strings/string_view.h"

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

/// How far the loader reads ahead (LoaderOptions::advanced.prefetch), as a
/// value: auto (the loader chooses from the machine and the data), off, or
/// limits on the batches and the bytes ahead.
///
///   o.advanced.prefetch = dlfeed::prefetch::Prefetch::limits(8, 256 << 20);
///   o.advanced.prefetch = "depth:8,budget:256M";   // the string form, parsed here
///
/// A string that does not parse is kept with its error, and Loader::create
/// fails saying why (status() tells it at once).
class DLFEED_EXPORT Prefetch {
 public:
  /// auto.
  Prefetch() = default;
  /// The string form: "auto", "off", "depth:N", "budget:BYTES" (K, M, G), or
  /// limits joined by commas ("depth:8,budget:256M").
  Prefetch(const char* text);         // NOLINT(google-explicit-constructor): the string form converts
  Prefetch(const std::string& text);  // NOLINT(google-explicit-constructor)
  static Prefetch automatic() { return Prefetch(); }
  static Prefetch off();
  /// At most `depth` batches (0: no bound on batches) and `budget_bytes`
  /// bytes (0: no bound on bytes) ahead of the consumer; at least one bound.
  static Prefetch limits(uint32_t depth, uint64_t budget_bytes);
  /// The string form, or InvalidArgument saying what is expected.
  static absl::StatusOr<Prefetch> parse(absl::string_view text);

  bool is_auto() const { return kind_ == Kind::kAuto; }
  bool is_off() const { return kind_ == Kind::kOff; }
  uint32_t depth() const { return depth_; }
  uint64_t budget_bytes() const { return budget_; }
  /// OK, or why the string it was made from does not parse.
  absl::Status status() const;
  /// The string form ("auto", "off", "depth:8,budget:256M"); parse(str())
  /// gives the same value.
  std::string str() const;
  /// The policy it means: null for auto (the loader's own choice).
  absl::StatusOr<std::unique_ptr<PrefetchPolicy>> policy() const;
  bool operator==(const Prefetch&) const = default;

 private:
  enum class Kind : uint8_t { kAuto, kOff, kLimits, kInvalid };
  Kind kind_ = Kind::kAuto;
  uint32_t depth_ = 0;
  uint64_t budget_ = 0;
  std::string text_;  // kInvalid: what was given
};

}  // namespace dlfeed::prefetch
