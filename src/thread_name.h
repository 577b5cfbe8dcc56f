// Private: names dlfeed's own threads ("dlfeed-..."), so tools (top -H, gdb,
// perf) and the tests can tell them from the application's and oneTBB's.
#pragma once

#include <pthread.h>

namespace dlfeed::detail {

/// Names the calling thread; `name` is at most 15 characters.
inline void name_this_thread(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace dlfeed::detail
