// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/plan/policy.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI::prefetch {
namespace {

class OffPolicy : public PrefetchPolicy {
 public:
  std::string name() const override { return "off"; }
  bool admit(const InFlight& now, uint64_t) const override { return now.batches == 0 && now.consumer_waiting; }
};

class FixedDepthPolicy : public PrefetchPolicy {
 public:
  explicit FixedDepthPolicy(uint32_t depth) : depth_(depth < 1 ? 1 : depth) {}
  std::string name() const override { return absl::StrCat("depth:", depth_); }
  bool admit(const InFlight& now, uint64_t) const override { return now.batches < depth_; }

 private:
  uint32_t depth_;
};

class ByteBudgetPolicy : public PrefetchPolicy {
 public:
  explicit ByteBudgetPolicy(uint64_t budget) : budget_(budget) {}
  std::string name() const override { return absl::StrCat("budget:", budget_); }
  bool admit(const InFlight& now, uint64_t next_bytes) const override {
    return now.batches == 0 || now.bytes + next_bytes <= budget_;
  }

 private:
  uint64_t budget_;
};

// Several limits at once: a batch starts when every one of them admits it.
class AllOfPolicy : public PrefetchPolicy {
 public:
  explicit AllOfPolicy(std::vector<std::unique_ptr<PrefetchPolicy>> parts) : parts_(std::move(parts)) {}
  std::string name() const override {
    std::string s;
    for (const auto& p : parts_) absl::StrAppend(&s, s.empty() ? "" : ",", p->name());
    return s;
  }
  bool admit(const InFlight& now, uint64_t next_bytes) const override {
    for (const auto& p : parts_) {
      if (!p->admit(now, next_bytes)) return false;
    }
    return true;
  }

 private:
  std::vector<std::unique_ptr<PrefetchPolicy>> parts_;
};

absl::StatusOr<std::unique_ptr<PrefetchPolicy>> parse_one(const std::string& spec) {
  if (spec == "off") return make_off_policy();
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  std::string value = colon == std::string::npos ? "" : spec.substr(colon + 1);
  uint64_t mult = 1;
  if (!value.empty()) {
    const char s = value.back();
    if (s == 'K' || s == 'k') mult = 1ull << 10;
    if (s == 'M' || s == 'm') mult = 1ull << 20;
    if (s == 'G' || s == 'g') mult = 1ull << 30;
    if (mult != 1) value.pop_back();
  }
  uint64_t n = 0;
  if (!value.empty() && absl::SimpleAtoi(value, &n)) {
    if (kind == "depth" && mult == 1 && n >= 1 && n <= 1'000'000)
      return make_fixed_depth_policy(static_cast<uint32_t>(n));
    if (kind == "budget" && n >= 1) return make_byte_budget_policy(n * mult);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad prefetch policy '", spec,
                   "': expected off, depth:N (batches), budget:BYTES (e.g. budget:512M), or limits joined by commas "
                   "(depth:8,budget:256M)"));
}

}  // namespace

std::unique_ptr<PrefetchPolicy> make_off_policy() { return std::make_unique<OffPolicy>(); }
std::unique_ptr<PrefetchPolicy> make_fixed_depth_policy(uint32_t depth) {
  return std::make_unique<FixedDepthPolicy>(depth);
}
std::unique_ptr<PrefetchPolicy> make_byte_budget_policy(uint64_t budget_bytes) {
  return std::make_unique<ByteBudgetPolicy>(budget_bytes);
}

absl::StatusOr<std::unique_ptr<PrefetchPolicy>> parse_policy(const std::string& spec) {
  if (spec.find(',') == std::string::npos) return parse_one(spec);
  std::vector<std::unique_ptr<PrefetchPolicy>> parts;
  for (absl::string_view part : absl::StrSplit(spec, ',')) {
    if (part == "off") {
      return absl::InvalidArgumentError(absl::StrCat("bad prefetch policy '", spec, "': off stands alone"));
    }
    DLFEED_ASSIGN_OR_RETURN(auto p, parse_one(std::string(part)));
    parts.push_back(std::move(p));
  }
  return make_all_of_policy(std::move(parts));
}

std::unique_ptr<PrefetchPolicy> make_all_of_policy(std::vector<std::unique_ptr<PrefetchPolicy>> parts) {
  return std::make_unique<AllOfPolicy>(std::move(parts));
}

}  // namespace dlfeed::prefetch
