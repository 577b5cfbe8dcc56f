// SPDX-License-Identifier: Apache-2.0
// What the reliability tests and the soak run share: generated datasets whose
// every byte is known (gen::fill_sample), an epoch runner that checks each
// delivered sample against it, the exactly-once / error-names-file-and-offset
// verdict, a watchdog that turns a hang into a failure, and counts of
// dlfeed's threads, open descriptors and resident memory.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "dev/generate.h"
#include "dlfeed/format/format.h"
#include "dlfeed/loader.h"

namespace dlfeed::fault {

/// A generated dataset and how to load it.
struct DatasetCase {
  std::string name;
  FileFormat format = FileFormat::kNpz;
  bool dlio = false;
  std::vector<std::string> fields;
  gen::Compression compression = gen::Compression::kNone;
  uint64_t chunk_samples = 0;  // HDF5
};

/// npz (stored), npz (deflated), npy (DLIO: strided samples), hdf5
/// (contiguous), hdf5 (chunked + deflate), tfrecord.
std::vector<DatasetCase> standard_cases();

/// A dataset written under `root`, with what a check needs to know.
struct Dataset {
  DatasetCase c;
  std::string path;                // what LoaderOptions::paths gets
  std::vector<std::string> files;  // data files, in index order
  uint64_t files_n = 0, per_file = 0;
  uint64_t seed = 0;
  Shape shape;
  DType dtype;
};

/// Writes `c` with `files` x `per_file` samples of `shape` (float32).
Dataset make_dataset(const DatasetCase& c, const std::string& root, uint64_t files, uint64_t per_file,
                     const Shape& shape = {6, 5}, uint64_t seed = 5);

/// Loader options reading `d` (batch size 4, 2 decode threads).
LoaderOptions options_for(const Dataset& d);

/// One epoch as the consumer saw it.
struct EpochResult {
  std::vector<uint64_t> ids;       // delivered, in order
  absl::Status error;              // the error that ended it, or OK
  std::vector<std::string> wrong;  // samples whose bytes or label were not the generator's
  bool ended_after_error = true;   // next() after the error said "epoch over"
};

/// Runs epoch `epoch` to its end (or its error), checking every sample.
/// `on_batch(k)` runs after the k-th batch (0-based), e.g. to change files.
EpochResult run_epoch(Loader& loader, const Dataset& d, uint64_t epoch,
                      const std::function<void(uint64_t)>& on_batch = nullptr);

/// The verdict the reliability guarantee asks for, as text ("" when it
/// holds): no wrong sample, and either the epoch is exactly the order
/// stage's ids for this rank (every sample once, in order) or it ended with
/// an error that names one of the dataset's files and an offset.
std::string verdict(const EpochResult& r, const Loader& loader, const Dataset& d, uint64_t epoch);

/// Aborts the process with `what` if not disarmed within `limit`: a hang
/// becomes a failure with a message rather than a stuck CI job. Before it
/// aborts it prints every thread's state and, where gdb is installed, stack.
class Watchdog {
 public:
  Watchdog(std::chrono::seconds limit, std::string what);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  /// Where the watched code is now (printed after `what` if it hangs).
  void set_phase(std::string phase);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string what_;
  std::string phase_;
  std::thread thread_;
};

/// Threads of this process named "dlfeed-..." (oneTBB's pool is not ours).
int count_dlfeed_threads();
/// count_dlfeed_threads(), after giving joined threads up to ~1 s to leave /proc.
int settled_dlfeed_threads();
/// Open file descriptors of this process.
int count_fds();
/// Resident memory of this process, bytes.
uint64_t resident_bytes();
/// The I/O backends usable here (io_uring only where the probe passes).
std::vector<IoKind> backends();

/// Whether this build runs under ASan or TSan (their allocators and shadow
/// memory make resident-memory figures meaningless).
inline bool sanitized() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#endif
#endif
  return false;
}

}  // namespace dlfeed::fault
