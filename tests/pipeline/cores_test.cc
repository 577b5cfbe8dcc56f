// SPDX-License-Identifier: Apache-2.0
// The cores a process may use (affinity and cgroup quota) and the loader
// defaults that follow from them: deterministic inputs, cgroup files written
// to a folder of the test's own.
#include "pipeline/cores.h"

#include <filesystem>
#include <fstream>
#include <map>

#include "format/test_util.h"
#include "gtest/gtest.h"

namespace dlfeed::pipeline {
namespace {

void write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(Cores, CpuMaxIsTheQuotaInWholeCoresRoundedUp) {
  EXPECT_EQ(cores_of_cpu_max("200000 100000\n"), 2u);
  EXPECT_EQ(cores_of_cpu_max("150000 100000"), 2u);  // 1.5 cores of time: 2 threads can use it
  EXPECT_EQ(cores_of_cpu_max("50000 100000"), 1u);
  EXPECT_EQ(cores_of_cpu_max("1600000 100000"), 16u);
  EXPECT_EQ(cores_of_cpu_max("400000"), 4u);  // period left out: the kernel's default, 100 ms
  EXPECT_EQ(cores_of_cpu_max("max 100000\n"), std::nullopt);
  EXPECT_EQ(cores_of_cpu_max(""), std::nullopt);
  EXPECT_EQ(cores_of_cpu_max("lots 100000"), std::nullopt);
  EXPECT_EQ(cores_of_cpu_max("0 100000"), std::nullopt);
}

TEST(Cores, CfsQuotaOfMinusOneLimitsNothing) {
  EXPECT_EQ(cores_of_cfs("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(cores_of_cfs("300000\n", "100000\n"), 3u);
  EXPECT_EQ(cores_of_cfs("250000", "100000"), 3u);
  EXPECT_EQ(cores_of_cfs("x", "100000"), std::nullopt);
}

TEST(Cores, CgroupPathsAreTheV2LineAndTheV1CpuLine) {
  const CgroupPaths v2 = cgroup_paths_of("0::/user.slice/job-7\n");
  EXPECT_EQ(v2.v2, "/user.slice/job-7");
  EXPECT_EQ(v2.v1_cpu, std::nullopt);
  // Hybrid (v1 controllers and the unified hierarchy), as this VM has.
  const CgroupPaths hybrid = cgroup_paths_of("12:memory:/m\n4:cpu,cpuacct:/docker/abc\n0::/other\n");
  EXPECT_EQ(hybrid.v2, "/other");
  EXPECT_EQ(hybrid.v1_cpu, "/docker/abc");
  EXPECT_EQ(cgroup_paths_of("12:memory:/m\n4:cpuacct,cpu:/d:x\n").v1_cpu, "/d:x");  // ':' in a path
  const CgroupPaths none = cgroup_paths_of("12:memory:/m\n3:cpuset:/s\n");          // cpuset is not cpu
  EXPECT_EQ(none.v2, std::nullopt);
  EXPECT_EQ(none.v1_cpu, std::nullopt);
}

TEST(Cores, QuotaOfTheCgroupOrAParentCapsTheAffinity) {
  const std::string root = testing::scratch_dir() + "/cores";
  std::filesystem::remove_all(root);
  CoreSources s;
  s.proc_self_cgroup = root + "/proc_self_cgroup";
  s.cgroup_root = root + "/sys";
  s.affinity = 16;
  write(s.proc_self_cgroup, "0::/kubepods/pod1/c\n");
  write(s.cgroup_root + "/kubepods/pod1/c/cpu.max", "max 100000\n");
  EXPECT_EQ(usable_cores(s), 16u);  // no quota anywhere: the affinity
  write(s.cgroup_root + "/kubepods/pod1/cpu.max", "400000 100000\n");
  EXPECT_EQ(usable_cores(s), 4u);  // the parent's quota
  write(s.cgroup_root + "/kubepods/pod1/c/cpu.max", "250000 100000\n");
  EXPECT_EQ(usable_cores(s), 3u);  // the smallest along the way
  s.affinity = 2;
  EXPECT_EQ(usable_cores(s), 2u);  // 2 CPUs in the mask, whatever the quota

  // cgroup v1: cpu,cpuacct controller.
  write(s.proc_self_cgroup, "5:cpu,cpuacct:/docker/abc\n");
  s.affinity = 8;
  EXPECT_EQ(usable_cores(s), 8u);  // no files: no quota
  write(s.cgroup_root + "/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "600000\n");
  write(s.cgroup_root + "/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(usable_cores(s), 6u);
  write(s.cgroup_root + "/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(usable_cores(s), 8u);

  // Hybrid: the v2 line's cgroup has no cpu.max (no cpu controller there);
  // the v1 cpu controller's quota counts.
  write(s.proc_self_cgroup, "5:cpu,cpuacct:/docker/abc\n0::/\n");
  write(s.cgroup_root + "/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "500000\n");
  std::filesystem::remove(s.cgroup_root + "/cpu.max");
  EXPECT_EQ(usable_cores(s), 5u);

  s.proc_self_cgroup = root + "/missing";
  EXPECT_EQ(usable_cores(s), 8u);  // no cgroup file: the affinity
}

TEST(Cores, ThisProcessHasAtLeastOneAndNoMoreThanItsAffinity) {
  const uint32_t n = usable_cores(CoreSources{});
  EXPECT_GE(n, 1u);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_LE(n, static_cast<uint32_t>(CPU_COUNT(&set)));
}

TEST(Cores, DefaultsKeepTwoCoresAsTheyWereAndGrowWithMore) {
  const MachineDefaults one = machine_defaults(1), two = machine_defaults(2);
  EXPECT_EQ(one.io_engines, 1u);
  EXPECT_EQ(one.threads, 2u);
  EXPECT_EQ(two.io_engines, 2u);  // the defaults before they followed the cores
  EXPECT_EQ(two.threads, 2u);
  EXPECT_EQ(two.read_depth, 8u);
  EXPECT_EQ(two.read_budget, 256ull << 20);
  EXPECT_EQ(machine_defaults(3).io_engines, 3u);  // one per core
  EXPECT_EQ(machine_defaults(3).read_depth, 8u);
  EXPECT_EQ(machine_defaults(4).io_engines, 4u);
  const MachineDefaults sixteen = machine_defaults(16);
  EXPECT_EQ(sixteen.io_engines, 16u);
  EXPECT_EQ(sixteen.threads, 16u);
  EXPECT_EQ(sixteen.read_depth, 16u);
  EXPECT_EQ(sixteen.read_budget, 512ull << 20);  // 32 MiB per core
  EXPECT_EQ(machine_defaults(8).read_budget, 256ull << 20);
  EXPECT_EQ(machine_defaults(128).io_engines, 16u);
  EXPECT_EQ(machine_defaults(128).read_depth, 32u);
  EXPECT_EQ(machine_defaults(128).read_budget, 1024ull << 20);
  EXPECT_EQ(read_budget_within(machine_defaults(128), 1ull << 30), 512ull << 20);  // half the memory budget
  EXPECT_EQ(read_budget_within(machine_defaults(128), 4ull << 30), 1024ull << 20);
  EXPECT_EQ(read_budget_within(machine_defaults(16), 128ull << 20), 256ull << 20);  // never below 256 MiB
  EXPECT_EQ(read_budget_within(two, 1ull << 30), 256ull << 20);
  // Large batches: kBatchesAhead of them where half the memory budget allows.
  EXPECT_EQ(read_budget_within(two, 8ull << 30, 256ull << 20), 1024ull << 20);
  EXPECT_EQ(read_budget_within(two, 1ull << 30, 256ull << 20), 512ull << 20);
  EXPECT_EQ(read_budget_within(sixteen, 8ull << 30, 16ull << 20), 512ull << 20);  // small batches: the machine's
}

constexpr uint64_t kGiB = 1ull << 30;

// Every source under `root` (empty), and no address space limit.
MemorySources sources_in(const std::string& root) {
  std::filesystem::remove_all(root);
  MemorySources s;
  s.meminfo = root + "/meminfo";
  s.proc_self_cgroup = root + "/proc_self_cgroup";
  s.cgroup_root = root + "/sys";
  s.proc_self_status = root + "/status";
  s.address_space_limit = [] { return std::nullopt; };
  return s;
}

TEST(Memory, MemAvailableCappedByTheRoomUnderTheCgroupsLimits) {
  const std::string root = testing::scratch_dir() + "/memory";
  MemorySources s = sources_in(root);
  EXPECT_EQ(usable_memory(s).bytes, 0u);  // nothing to read: not known
  write(s.meminfo, "MemTotal:       24683656 kB\nMemFree:        1000 kB\nMemAvailable:   20971520 kB\n");
  UsableMemory m = usable_memory(s);
  EXPECT_EQ(m.bytes, 20 * kGiB);
  EXPECT_EQ(m.source, "MemAvailable");
  write(s.proc_self_cgroup, "0::/slurm/job7\n");
  write(s.cgroup_root + "/slurm/job7/memory.max", "max\n");
  EXPECT_EQ(usable_memory(s).bytes, 20 * kGiB);  // no limit
  write(s.cgroup_root + "/slurm/memory.max", std::to_string(8 * kGiB) + "\n");
  write(s.cgroup_root + "/slurm/memory.current", std::to_string(2 * kGiB) + "\n");
  m = usable_memory(s);
  EXPECT_EQ(m.bytes, 6 * kGiB);  // the parent's limit less what it uses
  EXPECT_EQ(m.source, "cgroup memory.max less memory.current");
  // cgroup v1: the memory controller's line, and its "unlimited" of 2^63 rounded to pages.
  write(s.proc_self_cgroup, "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n");
  write(s.cgroup_root + "/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(usable_memory(s).bytes, 20 * kGiB);
  write(s.cgroup_root + "/memory/docker/abc/memory.limit_in_bytes", std::to_string(4 * kGiB));
  write(s.cgroup_root + "/memory/docker/abc/memory.usage_in_bytes", std::to_string(1 * kGiB));
  EXPECT_EQ(usable_memory(s).bytes, 3 * kGiB);
}

// Under an address space limit (ulimit -v), what the process maps counts:
// its room is the limit less VmSize, where that is the least.
TEST(Memory, TheRoomUnderTheAddressSpaceLimitCaps) {
  MemorySources s = sources_in(testing::scratch_dir() + "/memory");
  write(s.meminfo, "MemAvailable:   20971520 kB\n");
  write(s.proc_self_status, "Name:\tpython\nVmPeak:\t 3000000 kB\nVmSize:\t 1048576 kB\nVmRSS:\t 1000 kB\n");
  s.address_space_limit = [] { return std::optional<uint64_t>(5 * kGiB); };
  UsableMemory m = usable_memory(s);
  EXPECT_EQ(m.bytes, 4 * kGiB);
  EXPECT_EQ(m.source, "the address space limit (ulimit -v) less VmSize");
  s.address_space_limit = [] { return std::optional<uint64_t>(64 * kGiB); };
  EXPECT_EQ(usable_memory(s).bytes, 20 * kGiB);  // MemAvailable is less
  s.address_space_limit = [] { return std::optional<uint64_t>(kGiB / 2); };
  EXPECT_EQ(usable_memory(s).bytes, 1u) << "mapped past the limit: no room (the least budget follows)";
  EXPECT_EQ(usable_memory(s).source, "the address space limit (ulimit -v) less VmSize");
}

TEST(Memory, RanksOnTheNodeFromTheLaunchersEnvironment) {
  std::map<std::string, std::string> env;
  auto get = [&](const char* n) { return env.count(n) ? env[n].c_str() : nullptr; };
  EXPECT_EQ(ranks_on_node(get), 1u);
  env["LOCAL_WORLD_SIZE"] = "8";  // torchrun
  EXPECT_EQ(ranks_on_node(get), 8u);
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "4";  // mpirun: Open MPI's is read first
  EXPECT_EQ(ranks_on_node(get), 4u);
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "lots";
  EXPECT_EQ(ranks_on_node(get), 8u);  // not a number: the next that is
}

TEST(Memory, TheBudgetIsAQuarterSharedByTheRanksAtLeast256MiB) {
  MemoryBudget b = machine_memory_budget({24 * kGiB, "MemAvailable"}, 1);
  EXPECT_EQ(b.bytes, 6 * kGiB);
  EXPECT_EQ(b.why, "6.0 GiB: a quarter of 24.0 GiB the process may use (MemAvailable)");
  b = machine_memory_budget({120 * kGiB, "MemAvailable"}, 4);
  EXPECT_EQ(b.bytes, 120 * kGiB / 16);
  EXPECT_NE(b.why.find("shared by 4 ranks on this node"), std::string::npos) << b.why;
  EXPECT_EQ(machine_memory_budget({512ull << 20, "MemAvailable"}, 1).bytes, 256ull << 20);  // the floor
  b = machine_memory_budget({24 * kGiB, "MemAvailable"}, 1, 3);  // 3 worker processes each making a loader
  EXPECT_EQ(b.bytes, 2 * kGiB);
  EXPECT_NE(b.why.find("shared by 3 worker processes"), std::string::npos) << b.why;
  EXPECT_EQ(machine_memory_budget({}, 1, 2).bytes, 512ull << 20);
  b = machine_memory_budget({}, 1);  // nothing known: as before
  EXPECT_EQ(b.bytes, kGiB);
  EXPECT_NE(b.why.find("not known"), std::string::npos);
}

}  // namespace
}  // namespace dlfeed::pipeline
