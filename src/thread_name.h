// SPDX-License-Identifier: Apache-2.0
// Private: names dlfeed's own threads ("dlfeed-..."), so tools (top -H, gdb,
// perf) and the tests can tell them from the application's and oneTBB's.
#pragma once

#include <pthread.h>

#include <thread>

#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// Names `t` (from the thread that started it, so the name is set before
/// anyone can look); `name` is at most 15 characters.
inline void name_thread(std::thread& t, const char* name) { pthread_setname_np(t.native_handle(), name); }

}  // namespace dlfeed::detail
