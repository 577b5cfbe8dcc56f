// SPDX-License-Identifier: Apache-2.0
#include "pipeline/cores.h"

#include <sys/resource.h>

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dlfeed::inline DLFEED_ABI::pipeline {
namespace {

std::optional<int64_t> parse_int(absl::string_view s) {
  s = absl::StripAsciiWhitespace(s);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<uint32_t> cores_of_quota(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  const int64_t cores = (quota + period - 1) / period;  // 1.5 cores of time: 2 threads can use it
  return static_cast<uint32_t>(std::clamp<int64_t>(cores, 1, 1 << 20));
}

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

uint32_t affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<uint32_t>(n);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// Each cgroup from `path` up to the root: "/a/b" -> "/a/b", "/a", "".
std::vector<std::string> self_and_parents(std::string path) {
  std::vector<std::string> out;
  while (!path.empty() && path.back() == '/') path.pop_back();
  for (;;) {
    out.push_back(path);
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos || path.empty()) break;
    path.resize(slash);
  }
  return out;
}

// The least of `value_at` over the cgroup at `path` and each parent (those
// with a value), or none.
template <typename T, typename F>
std::optional<T> least_along(const std::string& path, F value_at) {
  std::optional<T> least;
  for (const std::string& dir : self_and_parents(path)) {
    const std::optional<T> v = value_at(dir);
    if (v && (!least || *v < *least)) least = v;
  }
  return least;
}

}  // namespace

std::optional<uint32_t> cores_of_cpu_max(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(absl::StripAsciiWhitespace(text), ' ', absl::SkipEmpty());
  if (parts.empty() || parts[0] == "max") return std::nullopt;
  const std::optional<int64_t> quota = parse_int(parts[0]);
  const std::optional<int64_t> period = parts.size() > 1 ? parse_int(parts[1]) : std::optional<int64_t>(100000);
  if (!quota || !period) return std::nullopt;
  return cores_of_quota(*quota, *period);
}

std::optional<uint32_t> cores_of_cfs(absl::string_view quota, absl::string_view period) {
  const std::optional<int64_t> q = parse_int(quota), p = parse_int(period);
  if (!q || !p) return std::nullopt;
  return cores_of_quota(*q, *p);
}

CgroupPaths cgroup_paths_of(absl::string_view proc_self_cgroup) {
  CgroupPaths out;
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n', absl::SkipWhitespace())) {
    // "ID:CONTROLLERS:PATH"; the path may hold ':' itself.
    const size_t a = line.find(':');
    const size_t b = a == absl::string_view::npos ? a : line.find(':', a + 1);
    if (b == absl::string_view::npos) continue;
    const absl::string_view controllers = line.substr(a + 1, b - a - 1);
    const std::string path(absl::StripAsciiWhitespace(line.substr(b + 1)));
    if (line.substr(0, a) == "0" && controllers.empty()) {
      if (!out.v2) out.v2 = path;
      continue;
    }
    for (absl::string_view c : absl::StrSplit(controllers, ',')) {
      if (c == "cpu" && !out.v1_cpu) out.v1_cpu = path;
      if (c == "memory" && !out.v1_memory) out.v1_memory = path;
    }
  }
  return out;
}

namespace {
// The smallest quota of the cgroup at `path` and its parents, v2 or v1.
std::optional<uint32_t> quota_along(const CoreSources& from, const std::string& path, bool v1) {
  return least_along<uint32_t>(path, [&](const std::string& dir) {
    std::optional<uint32_t> quota;
    if (!v1) {
      if (const auto t = read_text(from.cgroup_root + dir + "/cpu.max")) quota = cores_of_cpu_max(*t);
    } else {
      for (const char* mount : {"/cpu,cpuacct", "/cpu"}) {
        const std::string base = from.cgroup_root + mount + dir;
        const auto q = read_text(base + "/cpu.cfs_quota_us"), p = read_text(base + "/cpu.cfs_period_us");
        if (q && p) {
          quota = cores_of_cfs(*q, *p);
          break;
        }
      }
    }
    return quota;
  });
}
}  // namespace

uint32_t usable_cores(const CoreSources& from) {
  uint32_t cores = from.affinity ? from.affinity : affinity_cores();
  const std::optional<std::string> self = read_text(from.proc_self_cgroup);
  if (!self) return std::max(1u, cores);
  const CgroupPaths paths = cgroup_paths_of(*self);
  if (paths.v2) {
    if (const auto q = quota_along(from, *paths.v2, false)) cores = std::min(cores, *q);
  }
  if (paths.v1_cpu) {
    if (const auto q = quota_along(from, *paths.v1_cpu, true)) cores = std::min(cores, *q);
  }
  return std::max(1u, cores);
}

uint32_t process_cores() {
  static const uint32_t cores = [] {
    if (const char* env = std::getenv("DLFEED_CORES")) {
      const std::optional<int64_t> v = parse_int(env);
      if (v && *v > 0) return static_cast<uint32_t>(std::min<int64_t>(*v, 1 << 20));
    }
    return usable_cores(CoreSources{});
  }();
  return cores;
}

MachineDefaults machine_defaults(uint32_t cores) {
  cores = std::max(1u, cores);
  MachineDefaults d{};
  // One engine per core: a page-cache hit is copied by the engine that asked
  // for it, so each engine is a core's worth of copying. On a 16-core node
  // with the 512 MiB read-ahead, 16 engines read 1.16x the samples of 8 (the
  // default was cores / 2 while 256 MiB held them back: 8 and 16 gave the
  // same). The autotuner moves them from there.
  d.io_engines = cores == 1 ? 1 : std::clamp(cores, 2u, 16u);
  d.threads = std::max(2u, cores);
  const uint32_t scale = std::min(cores, 32u);
  d.read_depth = std::max(8u, scale);
  // 32 MiB per core (up to 32): on a 16-core node the read-ahead's 256 MiB
  // held six 38.5 MB batches, and 512 MiB gave 1.28x (HDF5) and 1.34x (TFRecord,
  // whose batches hold twice the bytes) the rate (docs/performance.md).
  d.read_budget = std::max<uint64_t>(256ull << 20, uint64_t{scale} * (32ull << 20));
  return d;
}

uint64_t read_budget_within(const MachineDefaults& d, uint64_t memory_budget, uint64_t batch_bytes) {
  const uint64_t want = std::max(d.read_budget, kBatchesAhead * batch_bytes);
  return std::min(want, std::max<uint64_t>(256ull << 20, memory_budget / 2));
}

namespace {
// The field `key` of a /proc file ("MemAvailable:   23456789 kB" of
// /proc/meminfo, "VmSize:   170172 kB" of /proc/self/status) -> bytes.
std::optional<uint64_t> proc_bytes(absl::string_view text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    if (!absl::ConsumePrefix(&line, key)) continue;
    line = absl::StripAsciiWhitespace(line);
    const bool kb = absl::ConsumeSuffix(&line, "kB");
    const std::optional<int64_t> v = parse_int(absl::StripAsciiWhitespace(line));
    if (!v || *v < 0) return std::nullopt;
    return static_cast<uint64_t>(*v) * (kb ? 1024 : 1);
  }
  return std::nullopt;
}

// A limit file's value: "max" (v2) or a v1 "unlimited" of 2^62 or more is none.
std::optional<uint64_t> limit_of(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  const std::optional<int64_t> v = parse_int(*text);
  if (!v || *v <= 0 || *v >= (int64_t{1} << 62)) return std::nullopt;
  return static_cast<uint64_t>(*v);
}

// The least room under a memory limit from `path` up to the root.
std::optional<uint64_t> cgroup_room(const MemorySources& from, const std::string& path, bool v1) {
  return least_along<uint64_t>(path, [&](const std::string& dir) -> std::optional<uint64_t> {
    const std::string base = from.cgroup_root + (v1 ? "/memory" : "") + dir;
    const std::optional<uint64_t> limit = limit_of(read_text(base + (v1 ? "/memory.limit_in_bytes" : "/memory.max")));
    if (!limit) return std::nullopt;
    const std::optional<std::string> used_text = read_text(base + (v1 ? "/memory.usage_in_bytes" : "/memory.current"));
    const std::optional<int64_t> used = used_text ? parse_int(*used_text) : std::nullopt;
    const uint64_t u = used && *used > 0 ? static_cast<uint64_t>(*used) : 0;
    return *limit > u ? *limit - u : 0;
  });
}

std::string gib(uint64_t bytes) { return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1ull << 30)); }
}  // namespace

UsableMemory usable_memory(const MemorySources& from) {
  UsableMemory out;
  if (const auto text = read_text(from.meminfo)) {
    if (const auto avail = proc_bytes(*text, "MemAvailable:")) out = {*avail, "MemAvailable"};
  }
  // Under an address space limit (ulimit -v) what the process maps counts,
  // reserved or not (thread stacks, malloc's arenas): its room is the limit
  // less VmSize.
  if (const std::optional<uint64_t> limit = from.address_space_limit ? from.address_space_limit() : std::nullopt) {
    uint64_t mapped = 0;
    if (const auto status = read_text(from.proc_self_status)) mapped = proc_bytes(*status, "VmSize:").value_or(0);
    const uint64_t room = *limit > mapped ? *limit - mapped : 1;  // none left: the least budget (0 is "not known")
    if (out.bytes == 0 || room < out.bytes) out = {room, "the address space limit (ulimit -v) less VmSize"};
  }
  const std::optional<std::string> self = read_text(from.proc_self_cgroup);
  if (!self) return out;
  const CgroupPaths paths = cgroup_paths_of(*self);
  auto cap = [&](const std::optional<std::string>& path, bool v1, const char* what) {
    if (!path) return;
    const std::optional<uint64_t> room = cgroup_room(from, *path, v1);
    if (room && (out.bytes == 0 || *room < out.bytes)) out = {*room, what};
  };
  cap(paths.v2, false, "cgroup memory.max less memory.current");
  cap(paths.v1_memory, true, "cgroup memory.limit_in_bytes less memory.usage_in_bytes");
  return out;
}

std::optional<uint64_t> MemorySources::rlimit_address_space() {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<uint64_t>(rl.rlim_cur);
}

uint32_t ranks_on_node(const std::function<const char*(const char*)>& getenv) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE",
                           "SLURM_NTASKS_PER_NODE", "LOCAL_WORLD_SIZE"}) {
    const char* v = getenv(name);
    if (v == nullptr) continue;
    const std::optional<int64_t> n = parse_int(v);
    if (n && *n > 0) return static_cast<uint32_t>(std::min<int64_t>(*n, 1 << 16));
  }
  return 1;
}

MemoryBudget machine_memory_budget(const UsableMemory& memory, uint32_t ranks, uint32_t workers) {
  constexpr uint64_t kFloor = 256ull << 20;
  ranks = std::max(1u, ranks);
  workers = std::max(1u, workers);
  const std::string by_workers = workers == 1 ? "" : absl::StrCat(", shared by ", workers, " worker processes");
  if (memory.bytes == 0) {
    return {std::max<uint64_t>(kFloor, (1ull << 30) / workers),
            absl::StrCat("1 GiB: the memory this process may use is not known here", by_workers)};
  }
  const uint64_t share = memory.bytes / 4 / ranks / workers;
  const std::string whose = (ranks == 1 ? "" : absl::StrCat(", shared by ", ranks, " ranks on this node")) + by_workers;
  if (share < kFloor) {
    return {kFloor, absl::StrCat("256 MiB, the least (a quarter of ", gib(memory.bytes), " the process may use (",
                                 memory.source, ")", whose, " is less)")};
  }
  return {share, absl::StrCat(gib(share), ": a quarter of ", gib(memory.bytes), " the process may use (", memory.source,
                              ")", whose)};
}

MemoryBudget process_memory_budget(uint32_t workers) {
  return machine_memory_budget(usable_memory(MemorySources{}),
                               ranks_on_node([](const char* n) { return std::getenv(n); }), workers);
}

}  // namespace dlfeed::pipeline
