// SPDX-License-Identifier: Apache-2.0
// Test-only fault injection for the reliability tests and the soak run.
//
// Two places, because retries happen inside a backend:
// - ReadFaults (a detail::ReadFaultInjector) rewrites the result of each read
//   where every backend turns it into done / again / failed: short reads,
//   EINTR and EAGAIN storms (all retryable: the backend must read again) and
//   EIO (a failure). Bytes the "kernel" did not deliver are scribbled over,
//   so a backend that kept them would hand out wrong data.
// - FaultyBackend wraps a real IoBackend and changes what reaches the loader:
//   EIO completions, completions that report the wrong length, and latency
//   spikes (completions held back, so they arrive late and out of order).
//   Its failed and wrong-length completions scribble over the request's
//   destination too.
//
//   Faults faults({.short_read = 0.2, .eio = 0.01, .latency = 0.05});
//   LoaderOptions o = ...;
//   o.advanced.io_factory = faults.factory();
//   ... // faults.counts() says what was injected
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "dlfeed/io/io_backend.h"
#include "io/read_op.h"

namespace dlfeed::fault {

/// Rates (0..1) of each fault, per read or per completion.
struct FaultSpec {
  // Per read, in the backend's retry step (detail::ReadFaultInjector).
  double short_read = 0;  // the read returns a random part of what it read
  double eintr = 0;       // the read returns -EINTR
  double eagain = 0;      // a storm: this and the next storm_length reads return -EAGAIN
  uint32_t storm_length = 20;
  double read_eio = 0;  // the read returns -EIO
  // Per completion, in FaultyBackend.
  double eio = 0;           // an OK completion becomes an EIO error
  double wrong_length = 0;  // an OK completion reports fewer or more bytes
  double latency = 0;       // the completion is held back for latency_spike
  std::chrono::microseconds latency_spike{20000};
  uint64_t seed = 1;
};

/// What was injected so far (monotonic).
struct FaultCounts {
  uint64_t reads = 0, short_reads = 0, eintr = 0, eagain = 0, read_eio = 0;
  uint64_t completions = 0, eio = 0, wrong_length = 0, delayed = 0;
  uint64_t faults() const { return short_reads + eintr + eagain + read_eio + eio + wrong_length + delayed; }
  uint64_t fatal() const { return read_eio + eio + wrong_length; }
};

/// Owns the fault state; installs the read-level injector for its lifetime
/// (one Faults at a time in a process).
class Faults {
 public:
  explicit Faults(FaultSpec spec);
  ~Faults();
  Faults(const Faults&) = delete;
  Faults& operator=(const Faults&) = delete;

  /// For AdvancedOptions::io_factory: make_io_backend's backend wrapped in a
  /// FaultyBackend drawing on this object (which must outlive it).
  IoBackendFactory factory();
  /// Wraps any backend.
  std::unique_ptr<IoBackend> wrap(std::unique_ptr<IoBackend> inner, std::shared_ptr<FileTable> files);

  FaultCounts counts() const;
  const FaultSpec& spec() const { return spec_; }
  /// Changes the rates (no reads may be in flight).
  void set_spec(const FaultSpec& spec) { spec_ = spec; }

  /// A uniform draw in [0, 1) and a uniform integer in [0, n); thread-safe.
  double uniform();
  uint64_t below(uint64_t n);

  struct Counters {
    std::atomic<uint64_t> reads{0}, short_reads{0}, eintr{0}, eagain{0}, read_eio{0}, completions{0}, eio{0},
        wrong_length{0}, delayed{0};
  };
  Counters& counters() { return counters_; }

 private:
  class ReadInjector;
  FaultSpec spec_;
  std::atomic<uint64_t> draws_{0};
  std::atomic<int64_t> storm_left_{0};
  Counters counters_;
  std::unique_ptr<ReadInjector> injector_;
};

/// Fills `n` bytes at `p` with a pattern no generated sample contains by
/// accident (what a failed or partial read leaves behind).
void scribble(std::byte* p, uint64_t n);

}  // namespace dlfeed::fault
