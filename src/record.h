// Private: the loader's counter recording (docs/counters.md). With
// -DDLFEED_COUNTERS=OFF every recording statement, clock reads included,
// compiles to nothing.
#pragma once

#include <cstdint>

#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/export.h"

#if DLFEED_COUNTERS_ENABLED
#define DLFEED_REC(...) \
  do {                  \
    __VA_ARGS__;        \
  } while (0)
#else
#define DLFEED_REC(...) \
  do {                  \
  } while (0)
#endif

namespace dlfeed::inline DLFEED_ABI::detail {

#if DLFEED_COUNTERS_ENABLED
inline uint64_t now_of(const counters::Counters& c) { return c.now(); }
#else
inline uint64_t now_of(const counters::Counters&) { return 0; }
#endif

/// Names the calling thread in traces, once per thread.
inline void name_thread_once(const counters::Counters& c, const char* name) {
  if constexpr (counters::kEnabled) {
    thread_local bool named = false;
    if (!named && c.tracing()) {
      named = true;
      counters::Counters::set_thread_name(name);
    }
  }
}

}  // namespace dlfeed::detail
