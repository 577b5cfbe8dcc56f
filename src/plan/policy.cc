// SPDX-License-Identifier: Apache-2.0
#include "dlfeed/plan/policy.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI::prefetch {
namespace {

constexpr uint64_t kMostDepth = 1'000'000;  // batches ahead, at most

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
    if (kind == "depth" && mult == 1 && n >= 1 && n <= kMostDepth)
      return make_fixed_depth_policy(static_cast<uint32_t>(n));
    if (kind == "budget" && n >= 1 && n <= UINT64_MAX / mult) return make_byte_budget_policy(n * mult);
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

namespace {
std::string bytes_text(uint64_t n) {
  for (const auto& [unit, shift] : {std::pair{"G", 30}, std::pair{"M", 20}, std::pair{"K", 10}}) {
    if (n >= (uint64_t{1} << shift) && n % (uint64_t{1} << shift) == 0) return absl::StrCat(n >> shift, unit);
  }
  return absl::StrCat(n);
}
}  // namespace

Prefetch::Prefetch(const char* text) : Prefetch(std::string(text == nullptr ? "" : text)) {}

Prefetch::Prefetch(const std::string& text) {
  absl::StatusOr<Prefetch> p = parse(text);
  if (p.ok()) {
    *this = *std::move(p);
  } else {
    kind_ = Kind::kInvalid;
    text_ = text;
  }
}

Prefetch Prefetch::off() {
  Prefetch p;
  p.kind_ = Kind::kOff;
  return p;
}

Prefetch Prefetch::limits(uint32_t depth, uint64_t budget_bytes) {
  Prefetch p;
  if ((depth == 0 && budget_bytes == 0) || depth > kMostDepth) {
    p.kind_ = Kind::kInvalid;
    p.text_ = absl::StrCat("limits(", depth, ", ", budget_bytes, ")");
    return p;
  }
  p.kind_ = Kind::kLimits;
  p.depth_ = depth;
  p.budget_ = budget_bytes;
  return p;
}

absl::StatusOr<Prefetch> Prefetch::parse(absl::string_view text) {
  if (text == "auto") return automatic();
  // parse_policy's grammar and errors; the value is read back from its parts.
  DLFEED_ASSIGN_OR_RETURN(std::unique_ptr<PrefetchPolicy> checked, parse_policy(std::string(text)));
  if (text == "off") return off();
  uint32_t depth = 0;
  uint64_t budget = 0;
  for (absl::string_view part : absl::StrSplit(checked->name(), ',')) {  // "depth:N", "budget:BYTES" (exact)
    uint64_t n = 0;
    if (absl::ConsumePrefix(&part, "depth:") && absl::SimpleAtoi(part, &n)) {
      depth = depth == 0 ? static_cast<uint32_t>(n) : std::min(depth, static_cast<uint32_t>(n));  // all must admit
    } else if (absl::ConsumePrefix(&part, "budget:") && absl::SimpleAtoi(part, &n)) {
      budget = budget == 0 ? n : std::min(budget, n);
    }
  }
  const Prefetch p = limits(depth, budget);
  DLFEED_RETURN_IF_ERROR(p.status());
  return p;
}

absl::Status Prefetch::status() const {
  if (kind_ != Kind::kInvalid) return absl::OkStatus();
  if (absl::StartsWith(text_, "limits(")) {
    return absl::InvalidArgumentError(absl::StrCat("prefetch: ", text_, ": a depth of 1 to ", kMostDepth,
                                                   " batches, a budget of bytes, or both (0: that one unbounded)"));
  }
  return parse_policy(text_).status();
}

std::string Prefetch::str() const {
  switch (kind_) {
    case Kind::kAuto: return "auto";
    case Kind::kOff: return "off";
    case Kind::kInvalid: return text_;
    case Kind::kLimits: break;
  }
  std::string s = depth_ ? absl::StrCat("depth:", depth_) : "";
  if (budget_) absl::StrAppend(&s, s.empty() ? "" : ",", "budget:", bytes_text(budget_));
  return s;
}

absl::StatusOr<std::unique_ptr<PrefetchPolicy>> Prefetch::policy() const {
  switch (kind_) {
    case Kind::kAuto: return std::unique_ptr<PrefetchPolicy>();
    case Kind::kOff: return make_off_policy();
    case Kind::kInvalid: return status();
    case Kind::kLimits: break;
  }
  std::vector<std::unique_ptr<PrefetchPolicy>> parts;
  if (depth_) parts.push_back(make_fixed_depth_policy(depth_));
  if (budget_) parts.push_back(make_byte_budget_policy(budget_));
  if (parts.size() == 1) return std::move(parts[0]);
  return make_all_of_policy(std::move(parts));
}

}  // namespace dlfeed::prefetch
