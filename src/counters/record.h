// SPDX-License-Identifier: Apache-2.0
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

/// Counts `requests` reads of `bytes` in all, done from t0 to t1 without an
/// I/O engine (copies from held files, unpacked arrays), as an engine counts
/// a batch's reads: each a request with that latency, the bytes, and the
/// time as I/O busy. Call it inside DLFEED_REC.
inline void record_reads(counters::Counters& c, uint64_t t0, uint64_t t1, uint64_t requests, uint64_t bytes) {
  c.interval_begin(counters::Component::kIo, t0);
  c.interval_end(counters::Component::kIo, t1);
  c.add(counters::Id::kIoOperations, requests);
  c.add(counters::Id::kBytesRead, bytes);
  for (uint64_t i = 0; i < requests; ++i) c.sample(counters::Id::kIoLatency, t1 - t0);
}
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
