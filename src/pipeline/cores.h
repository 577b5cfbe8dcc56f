// SPDX-License-Identifier: Apache-2.0
// Private: how many cores this process may use, and the defaults that follow
// from them (LoaderOptions io_engines, threads (which the held gather's
// copies use too) and the read prefetch when left at 0 / "auto").
//
// The count is the CPUs in the process's affinity mask (sched_getaffinity),
// capped by its cgroup's CPU quota: cgroup v2 cpu.max ("QUOTA PERIOD" or
// "max PERIOD"), or v1 cpu.cfs_quota_us / cpu.cfs_period_us (-1: none), each
// rounded up to whole cores, at least 1. Not the host's core count: a
// container limited to 4 of a 64-core host's CPUs gets 4.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include "dlfeed/detail/export.h"

namespace dlfeed::inline DLFEED_ABI::pipeline {

/// Cores a cgroup v2 cpu.max text allows ("200000 100000" -> 2, "150000
/// 100000" -> 2 rounded up, "max 100000" -> none); nullopt when unlimited or
/// not understood (then the quota limits nothing).
std::optional<uint32_t> cores_of_cpu_max(absl::string_view text);
/// The same for cgroup v1: cpu.cfs_quota_us and cpu.cfs_period_us texts.
std::optional<uint32_t> cores_of_cfs(absl::string_view quota, absl::string_view period);
/// This process's cgroups from /proc/self/cgroup text: the v2 line's path
/// ("0::/a/b") and the v1 line's whose controllers include "cpu" (a hybrid
/// system has both; the quota is wherever a cpu controller is mounted).
struct CgroupPaths {
  std::optional<std::string> v2, v1_cpu, v1_memory;
};
CgroupPaths cgroup_paths_of(absl::string_view proc_self_cgroup);

/// Where the cores are read from (tests give a folder of their own).
struct CoreSources {
  std::string proc_self_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";  // v2 unified; v1 controllers under it ("cpu,cpuacct", "cpu")
  uint32_t affinity = 0;                       // 0: sched_getaffinity of this process
};
/// Cores the process may use: the affinity count capped by the quota of its
/// cgroup (and of each parent cgroup up to the root), at least 1.
uint32_t usable_cores(const CoreSources& from);
/// usable_cores() of this process, read once and kept (DLFEED_CORES, a
/// positive integer in the environment, overrides it: to measure a smaller
/// machine's defaults on a larger one).
uint32_t process_cores();

/// LoaderOptions defaults for a process with `cores` cores.
struct MachineDefaults {
  uint32_t io_engines;   // the cores (1 on 1, at least 2 otherwise), up to 16
  uint32_t threads;      // decode threads: the cores, at least 2
  uint32_t read_depth;   // read prefetch "auto": depth (8, or 1 per core up to 32)
  uint64_t read_budget;  // and its budget (256 MiB, or 32 MiB per core up to 32; the loader takes at
                         // most half of its memory budget, and never less than 256 MiB)
};
MachineDefaults machine_defaults(uint32_t cores);

/// Batches of the mean size the read-ahead holds at least, where half the
/// memory budget allows: large samples (a 256 MiB batch of four 64 MiB
/// samples) would else have one batch in flight, and the cores would wait
/// for the consumer between batches.
inline constexpr uint64_t kBatchesAhead = 4;

/// The read-ahead's budget a loader with `memory_budget` and batches of
/// `batch_bytes` (on average) uses: the machine's, or kBatchesAhead batches
/// if more, but no more than half the memory budget (the rest is for
/// batches the consumer holds), and never less than the 256 MiB of a small
/// machine.
uint64_t read_budget_within(const MachineDefaults& d, uint64_t memory_budget, uint64_t batch_bytes = 0);

/// Where the memory this process may use is read from (tests give their own).
struct MemorySources {
  std::string meminfo = "/proc/meminfo";
  std::string proc_self_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";          // v2 unified; v1's "memory" controller under it
  std::string proc_self_status = "/proc/self/status";  // VmSize: the address space the process maps
  /// The process's address space limit (`ulimit -v`, RLIMIT_AS); none: no limit.
  std::function<std::optional<uint64_t>()> address_space_limit = rlimit_address_space;
  static std::optional<uint64_t> rlimit_address_space();
};
/// Memory the process may still take, and where that number came from.
struct UsableMemory {
  uint64_t bytes = 0;  // 0: not known
  std::string source;  // e.g. "MemAvailable", "cgroup memory.max less memory.current"
};
/// MemAvailable of /proc/meminfo, capped by the room left under the memory
/// limit of the process's cgroup and of each parent: v2 memory.max less
/// memory.current, v1 memory.limit_in_bytes less memory.usage_in_bytes; and
/// by the room under its address space limit (RLIMIT_AS less VmSize).
UsableMemory usable_memory(const MemorySources& from);
/// Processes of this job on this node, from what launchers set
/// (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, MV2_COMM_WORLD_LOCAL_SIZE,
/// SLURM_NTASKS_PER_NODE, LOCAL_WORLD_SIZE of torchrun), else 1. `getenv`
/// is the lookup (tests give their own).
uint32_t ranks_on_node(const std::function<const char*(const char*)>& getenv);

/// LoaderOptions::memory_budget when left at 0: a quarter of the memory the
/// process may use, shared by the ranks on this node and by `workers`
/// processes of each (DataLoader workers each making a loader), at least
/// 256 MiB (and 1 GiB, shared by the workers, when nothing says how much
/// there is); `why` says so in words.
struct MemoryBudget {
  uint64_t bytes = 0;
  std::string why;
};
MemoryBudget machine_memory_budget(const UsableMemory& memory, uint32_t ranks, uint32_t workers = 1);
/// machine_memory_budget() of this process now (its memory, its launcher's ranks).
MemoryBudget process_memory_budget(uint32_t workers = 1);

}  // namespace dlfeed::pipeline
