// SPDX-License-Identifier: Apache-2.0
// Built against the installed dlfeed::headers alone (no libdlfeed): the
// header tier's order, state codec and dtype work from #include.
#include <cstdio>
#include <vector>

#include "dlfeed/dtype.h"
#include "dlfeed/order/order.h"

#ifdef DLFEED_COMPILED_LIB
#error "dlfeed::headers alone must not define DLFEED_COMPILED_LIB"
#endif

int main() {
  dlfeed::OrderSpec spec;
  spec.strategy = "global_feistel";
  spec.seed = 7;
  const auto layout = dlfeed::FileLayout::uniform(4, 25);
  auto ids = dlfeed::rank_order(layout, spec, dlfeed::builtin_strategy(spec.strategy));
  if (!ids.ok() || ids->size() != 100) return 1;
  std::vector<bool> seen(100);
  for (uint64_t id : *ids) seen[id] = true;
  for (bool s : seen) {
    if (!s) return 1;  // a permutation
  }
  auto cursor = dlfeed::OrderCursor::create(layout, spec, dlfeed::builtin_strategy(spec.strategy));
  if (!cursor.ok() || !dlfeed::decode_state(cursor->state()).ok()) return 1;
  auto dt = dlfeed::DType::parse(">i8");
  if (!dt.ok() || dt->name() != ">int64") return 1;
  std::printf("headers ok\n");
  return 0;
}
