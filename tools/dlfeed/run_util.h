// SPDX-License-Identifier: Apache-2.0
// Helpers of `dlfeed run` (tools/dlfeed/run.cc): the checksum's hash, the
// process's resident memory, and Ctrl-C as a request to stop and report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace dlfeed::cli {

/// A fast 64-bit hash of a byte string (8 bytes at a time), stable across
/// runs and machines of the same endianness.
uint64_t hash_bytes(std::span<const std::byte> b, uint64_t seed);

/// This process's resident bytes now (0 where /proc is not there).
uint64_t resident_bytes();

/// From now on the first SIGINT (Ctrl-C) only sets interrupt_requested();
/// the handler then goes back to the default, so a second one ends the
/// process at once.
void catch_interrupt();
/// Whether a SIGINT came since catch_interrupt().
bool interrupt_requested();

}  // namespace dlfeed::cli
