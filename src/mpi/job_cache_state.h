// SPDX-License-Identifier: Apache-2.0
// Private: the job cache's shared state (src/mpi/job_cache.cc makes the plan,
// src/mpi/job_cache_windows.cc the windows; src/mpi/job_cache_backend.cc
// reads through them).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/io/io_backend.h"
#include "dlfeed/mpi/job_cache.h"
#include "dlfeed/order/order.h"

namespace dlfeed::inline DLFEED_ABI::mpi {

/// A run of bytes the job holds: `length` bytes at `offset` of one file (a
/// sample's extent, or overlapping extents merged), kept by rank `holder` at
/// `slot` of its window (an 8-byte stamp, then the bytes).
struct HeldExtent {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t slot = 0;
  int holder = 0;
  uint32_t index = 0;  // into JobCache::State::filled
  /// Merged from overlapping extents: no one read need cover it, so its
  /// holder reads it whole from the files when it first touches it.
  bool merged = false;
};

/// 64 bits of x, mixed (splitmix64's finalizer).
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Bytes an extent takes in a window: the stamp and the bytes, 8-aligned.
inline uint64_t slot_bytes(uint64_t length) { return 8 + ((length + 7) & ~uint64_t{7}); }

/// What the index opener saw of one field: its files and each sample's extents.
struct FieldExtents {
  std::vector<std::string> files;
  std::vector<uint64_t> file_begin;  // SampleIndex::file_begin
  std::vector<uint64_t> begin;       // sample id -> first of its extents in `extents`; size samples + 1
  std::vector<Extent> extents;
};

struct JobCache::State {
  // The job (set at create).
  MPI_Comm comm = MPI_COMM_NULL;
  /// The ranks of this rank's node that share memory with it (and it).
  MPI_Comm group = MPI_COMM_NULL;
  /// Every rank's part, for MPI_Get; none when the whole job is one group
  /// (every part is read with plain loads).
  MPI_Win win = MPI_WIN_NULL;
  /// The group's parts in MPI shared memory (memory parts of a group of
  /// more than one rank), else none.
  MPI_Win shared_win = MPI_WIN_NULL;
  std::byte* base = nullptr;
  uint64_t mapped = 0;  // bytes of a file mapped at base (JobCacheOptions::folder), else 0
  /// Per rank: where this rank reads that rank's part with plain loads (its
  /// own, and its group's when they share it), else null (MPI_Get).
  std::vector<std::byte*> load_base;
  /// Folder parts of the group's other ranks, mapped here: (address, bytes).
  std::vector<std::pair<std::byte*, uint64_t>> peer_maps;
  /// The ranks of a node read each other's parts with plain loads.
  bool node_loads = false;
  /// Every rank of the job shares memory with every other (one machine).
  bool one_machine = false;
  int rank = 0;
  int size = 1;
  std::vector<int> node_of;           // per rank
  std::vector<uint64_t> capacity_of;  // per rank: its window's bytes
  std::atomic<bool> open{false};
  /// Held shared while a backend touches the window (MPI calls, copies into
  /// or out of it), exclusively by close(): no read uses a freed window.
  std::shared_mutex window_mu;
  std::atomic<bool> attached{false};
  /// Rank 0's at create: stamps of an earlier cache in reused memory never match.
  uint64_t nonce = 0;
  IoBackendFactory source;                          // JobCacheOptions::source
  std::atomic<counters::Counters*> trace{nullptr};  // JobCache::trace_into

  // What the loader's opener recorded.
  std::mutex fields_mu;
  std::vector<FieldExtents> fields;

  // The plan (made once, as the loader's first epoch starts; tried again
  // at the next start when it failed).
  std::mutex plan_mu;
  std::atomic<bool> plan_ready{false};  // made: `held` and the rest below are read only from now on
  absl::flat_hash_map<std::string, std::vector<HeldExtent>> held;  // path -> extents sorted by offset
  std::unique_ptr<std::atomic<uint8_t>[]> filled;                  // per held extent: known to be filled
  std::unique_ptr<std::atomic<uint8_t>[]> fill_started;            // per held merged run of this rank: read whole
  uint64_t held_count = 0;
  uint64_t plan_hash = 0;  // of every held extent and its slot: ranks whose plans differ never match stamps

  /// The stamp a holder writes before an extent's bytes once they are all
  /// there: of this cache, this plan and this extent.
  uint64_t stamp_of(const HeldExtent& x) const {
    return mix64(nonce ^ mix64(plan_hash ^ mix64((uint64_t{x.index} << 20) ^ x.length)));
  }

  // Filling: extents of this rank partly written so far (offsets within the extent).
  std::mutex fill_mu;
  absl::flat_hash_map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> partial;

  // Counters (JobCacheStats).
  std::atomic<uint64_t> bytes_read_source{0}, bytes_read_local{0}, bytes_read_node{0}, bytes_read_peers{0};
  std::atomic<uint64_t> remote_gets{0}, remote_ns{0}, remote_ns_max{0}, bytes_missed{0};
  std::atomic<uint64_t> bytes_kept{0}, extents_kept{0};
  uint64_t bytes_planned = 0, dataset_bytes = 0, held_bytes = 0;

  /// Makes the plan from `fields` and the first epoch's order `spec`, read
  /// from rank position `position` on (every rank the same).
  absl::Status make_plan(const OrderSpec& spec, uint64_t position);
  /// The held extents of `path` (null when none).
  const std::vector<HeldExtent>* extents_of(const std::string& path) const;
};

/// Makes every rank's part of the cache (`capacity` bytes here; memory, or a
/// file in `folder`) and the windows that read them (job_cache_windows.cc):
/// collective. On an error every rank returns it, with nothing left made but
/// `s.comm`.
absl::Status make_windows(JobCache::State& s, uint64_t capacity, const std::string& folder);

/// Collective: frees what make_windows made.
absl::Status free_windows(JobCache::State& s);

/// The backend the loader reads through: held, filled extents from the
/// cache; everything else from `inner` (the files), keeping what this rank holds.
std::unique_ptr<IoBackend> make_cache_backend(std::shared_ptr<JobCache::State> state, std::shared_ptr<FileTable> files,
                                              std::unique_ptr<IoBackend> inner);

}  // namespace dlfeed::mpi
