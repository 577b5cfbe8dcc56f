// SPDX-License-Identifier: Apache-2.0
// --source-throttle BW[:LATENCY]: the files read as from a parallel file
// system the job shares: one bandwidth for every rank together and a latency
// per read. A stand-in for tests and benches on one machine (a 4-rank run
// then shows what the job cache saves), not a model of any one file system.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dlfeed/io/io_backend.h"

namespace dlfeed::cli {

/// The throttle's parameters and the clock its ranks share.
struct SourceThrottle {
  double bytes_per_s = 0;   // the job's bandwidth, all ranks together
  uint64_t latency_ns = 0;  // each read completes no sooner than this after it was submitted
  /// The shared "link busy until" clock (CLOCK_MONOTONIC ns): a word in a
  /// file under /dev/shm that every rank of the job maps (process-local when
  /// the path is empty).
  std::string shared_path;
  /// Files whose path (as the FileTable has it now) starts with this are
  /// read at once: staged copies on the node (--stage-to), not the source.
  std::string local_prefix;
};

/// Parses "200M" (bytes per second; K, M, G, T powers of 1024) or "200M:1ms"
/// (latency in ns, us, ms or s).
absl::StatusOr<SourceThrottle> parse_source_throttle(const std::string& text);

/// A factory wrapping `inner` (make_io_backend when empty) in the throttle.
IoBackendFactory throttled_factory(const SourceThrottle& t, IoBackendFactory inner);

}  // namespace dlfeed::cli
