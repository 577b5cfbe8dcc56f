// SPDX-License-Identifier: Apache-2.0
// The order strategy registry: mutable, process-wide state, so it lives in
// libdlfeed only (never in the header tier, where each shared library would
// get its own copy). The built-in strategies are registered first; the
// registry-consulting entry points look a name up and hand the factory to the
// header tier's factory-taking versions (dlfeed/order/order-inl.h).
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "dlfeed/error.h"
#include "dlfeed/order/order.h"

namespace dlfeed::inline DLFEED_ABI {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, StrategyFactory> factories;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    for (const auto& name : builtin_strategy_names()) reg->factories[name] = builtin_strategy(name);
    return reg;
  }();
  return *r;
}

/// The registered factory of `name`, or NotFound listing the known names.
absl::StatusOr<StrategyFactory> lookup(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.factories.find(name);
  if (it == r.factories.end()) {
    std::string known;
    for (const auto& [n, f] : r.factories) absl::StrAppend(&known, known.empty() ? "" : ", ", n);
    return absl::NotFoundError(absl::StrCat("unknown order strategy '", name, "' (known: ", known, ")"));
  }
  return it->second;
}

}  // namespace

absl::Status register_strategy(const std::string& name, StrategyFactory factory) {
  if (name.empty() || !factory) return absl::InvalidArgumentError("register_strategy: empty name or factory");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.factories.emplace(name, std::move(factory)).second) {
    return absl::AlreadyExistsError(absl::StrCat("order strategy '", name, "' is already registered"));
  }
  return absl::OkStatus();
}

std::vector<std::string> strategy_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories) names.push_back(name);
  return names;
}

StrategyFactory registered_strategy(absl::string_view name) {
  auto f = lookup(std::string(name));
  return f.ok() ? *std::move(f) : StrategyFactory{};
}

absl::StatusOr<std::unique_ptr<GlobalOrder>> make_global_order(const FileLayout& layout, const OrderSpec& spec) {
  DLFEED_RETURN_IF_ERROR(check_order_spec(layout, spec));
  DLFEED_ASSIGN_OR_RETURN(StrategyFactory factory, lookup(spec.strategy));
  return make_global_order(layout, spec, factory);
}

absl::StatusOr<OrderCursor> OrderCursor::create(const FileLayout& layout, const OrderSpec& spec) {
  DLFEED_RETURN_IF_ERROR(check_order_spec(layout, spec));
  DLFEED_ASSIGN_OR_RETURN(StrategyFactory factory, lookup(spec.strategy));
  return create(layout, spec, factory);
}

absl::StatusOr<OrderCursor> OrderCursor::from_state(const FileLayout& layout, absl::string_view state,
                                                    std::shared_ptr<const std::vector<uint64_t>> indices) {
  return from_state(layout, state, std::move(indices), registered_strategy);
}

absl::StatusOr<std::vector<uint64_t>> rank_order(const FileLayout& layout, const OrderSpec& spec) {
  DLFEED_RETURN_IF_ERROR(check_order_spec(layout, spec));
  DLFEED_ASSIGN_OR_RETURN(StrategyFactory factory, lookup(spec.strategy));
  return rank_order(layout, spec, factory);
}

}  // namespace dlfeed
