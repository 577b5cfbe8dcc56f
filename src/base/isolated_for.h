// SPDX-License-Identifier: Apache-2.0
// Private: a batch's samples spread over the arena the calling task runs in
// (the decoder's loops, the split records' checks).
#pragma once

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <cstddef>

#include "base/tbb.h"

namespace dlfeed::inline DLFEED_ABI::base {

/// one(0) .. one(n - 1): in turn on this thread when not `spread` or
/// oneTBB cannot run here (tbb_unusable(): a child forked after its parent
/// used it), else over the calling task's arena, isolated: while this thread
/// waits for the loop's last items it runs only the loop's own tasks, not
/// another batch's decode queued in the same arena (which would hold this
/// batch until it ended). `one` passes the TSan handshake itself.
template <typename F>
void isolated_for(size_t n, const F& one, bool spread) {
  if (!spread || tbb_unusable()) {
    for (size_t i = 0; i < n; ++i) one(i);
    return;
  }
  note_tbb_started();
  tsan_handshake();
  tbb::this_task_arena::isolate([&] { tbb::parallel_for(size_t(0), n, one); });
  tsan_handshake();
}

}  // namespace dlfeed::base
