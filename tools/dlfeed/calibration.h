// SPDX-License-Identifier: Apache-2.0
// Calibrations: the storage's limits for a dataset's access patterns, as
// `dlfeed calibrate` measures them (dlfeed::raw_read, cold cache) and writes
// them (JSON schema "dlfeed.calibration/1", docs/workloads.md), and as
// `dlfeed run` reads them to report efficiency.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dev/raw_read.h"
#include "dlfeed/sample.h"

namespace dlfeed::cli {

/// Which dataset a calibration belongs to: the data files' names and sizes
/// and the samples per file, hashed. Moving the folder keeps it; regenerating
/// the data with other parameters changes it.
struct DatasetIdentity {
  uint64_t files = 0;
  uint64_t samples = 0;
  uint64_t fingerprint = 0;
  std::string fingerprint_hex() const;
  std::string describe() const;  // "8 files, 3208 samples, fingerprint 0123..."
};
DatasetIdentity identify(const SampleIndex& index);

/// One reader's measurement of one pattern.
struct ReaderResult {
  std::string reader;  // "io_uring" or "pread"
  uint32_t queue_depth = 1;
  RawReadResult result;
  std::string label() const;  // "io_uring QD32", "pread"
};

/// The limits of one access pattern: the faster reader sets the limit.
struct PatternLimit {
  std::string pattern;   // "sequential", "random", or a strategy's name
  std::string strategy;  // the order read
  std::vector<ReaderResult> readers;
  double limit_mib_per_s = 0;
  std::string limit_reader;  // label() of the faster reader
};

/// A whole calibration file.
struct Calibration {
  std::string file;  // where it was read from or written to
  std::vector<std::string> paths;
  std::string field;
  DatasetIdentity dataset;
  uint64_t dataset_bytes = 0;  // the field's extent bytes over every sample
  uint32_t queue_depth = 32;
  uint64_t max_bytes = 0;
  double max_seconds = 0;
  uint64_t seed = 0;
  uint64_t evicted_files = 0;
  uint64_t resident_bytes_after_evict = 0;  // most seen right after an eviction
  std::vector<PatternLimit> patterns;

  std::string to_json() const;
  const PatternLimit* find(const std::string& pattern) const;
};

/// Reads and checks a calibration file (errors: PATH: at offset N: expected ...).
absl::StatusOr<Calibration> load_calibration(const std::string& path);

/// The strategy a calibration pattern reads: sequential -> sequential,
/// random -> global_shuffle, any other name -> itself.
std::string pattern_strategy(const std::string& pattern);
/// The pattern class of a run's strategy when no pattern was measured for the
/// strategy itself: "sequential" for sequential, file_shuffle,
/// buffered_shuffle and block_shuffle (each file or block read front to back),
/// "random" for every other strategy.
std::string pattern_class(const std::string& strategy);
/// The limit a run with `strategy` is compared with: the pattern measured for
/// the strategy itself, else its class's; nullptr when neither was measured.
const PatternLimit* limit_for(const Calibration& c, const std::string& strategy);

/// Where calibrate writes and run looks by default: DIR/dlfeed-calibration.json
/// for a dataset that is one folder, else data/calibration/dataset-FINGERPRINT.json.
std::string default_calibration_path(const std::vector<std::string>& paths, const DatasetIdentity& id);

}  // namespace dlfeed::cli
