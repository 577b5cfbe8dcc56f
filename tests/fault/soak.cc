// SPDX-License-Identifier: Apache-2.0
// dlfeed_soak: many epochs of many loaders, over every format, backend and
// order strategy, with random faults, checking what docs/reliability.md
// promises as it goes:
// - every epoch delivers each of this rank's samples exactly once, in the
//   order stage's order, with the generator's bytes, or ends with an error
//   naming a file and an offset (and then only because a fault was injected);
// - a loader destroyed (at the end, or at a random point mid-epoch) leaves
//   no dlfeed thread and no file descriptor behind;
// - resident memory stops growing once warm (checked without sanitizers,
//   which keep freed memory on purpose);
// - nothing hangs (a watchdog per loader aborts with a message).
//
//   dlfeed_soak --seconds=30                  # the CI form (ctest: soak_short)
//   dlfeed_soak --seconds=3600 --files=64 --samples-per-file=256   # by hand
//
// Flags: --seconds (time budget, default 30), --iterations (cap, default
// unlimited), --seed, --files, --samples-per-file, --dir (scratch folder,
// default a fresh one under $TMPDIR), --rss-growth-mb (allowed growth after
// warm-up, default 64), --hang-seconds (the watchdog's limit per loader,
// default 300; when it fires it prints every thread's stack where gdb is
// installed), --verbose.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "faults.h"
#include "harness.h"

namespace dlfeed::fault {
namespace {

struct Flags {
  double seconds = 30;
  uint64_t iterations = UINT64_MAX;
  uint64_t seed = 1;
  uint64_t files = 6;
  uint64_t per_file = 24;
  std::string dir;
  uint64_t rss_growth_mb = 64;
  uint64_t hang_seconds = 300;
  bool verbose = false;
};

bool parse(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq), value = eq == std::string::npos ? "" : a.substr(eq + 1);
    bool ok = true;
    if (key == "--seconds")
      ok = absl::SimpleAtod(value, &f.seconds);
    else if (key == "--iterations")
      ok = absl::SimpleAtoi(value, &f.iterations);
    else if (key == "--seed")
      ok = absl::SimpleAtoi(value, &f.seed);
    else if (key == "--files")
      ok = absl::SimpleAtoi(value, &f.files);
    else if (key == "--samples-per-file")
      ok = absl::SimpleAtoi(value, &f.per_file);
    else if (key == "--dir")
      f.dir = value;
    else if (key == "--rss-growth-mb")
      ok = absl::SimpleAtoi(value, &f.rss_growth_mb);
    else if (key == "--hang-seconds")
      ok = absl::SimpleAtoi(value, &f.hang_seconds);
    else if (key == "--verbose")
      f.verbose = true;
    else
      ok = false;
    if (!ok) {
      std::fprintf(stderr, "dlfeed_soak: bad flag '%s' (see the comment at the top of tests/fault/soak.cc)\n",
                   a.c_str());
      return false;
    }
  }
  return true;
}

// Fault profiles a loader is given at random.
struct Profile {
  const char* name;
  FaultSpec spec;
  bool may_fail;  // fatal faults: an epoch may end in an error
};
const Profile kProfiles[] = {
    {"none", {}, false},
    {"retryable", {.short_read = 0.3, .eintr = 0.05, .eagain = 0.01, .storm_length = 40}, false},
    {"latency", {.latency = 0.2, .latency_spike = std::chrono::milliseconds(4)}, false},
    {"mixed",
     {.short_read = 0.2,
      .eintr = 0.02,
      .eagain = 0.005,
      .read_eio = 0.002,
      .eio = 0.002,
      .wrong_length = 0.002,
      .latency = 0.05,
      .latency_spike = std::chrono::milliseconds(2)},
     true},
};
const char* const kStrategies[] = {"sequential",    "file_shuffle",   "local_shuffle", "buffered_shuffle",
                                   "block_shuffle", "global_shuffle", "global_feistel"};
const char* const kPrefetch[] = {"off", "depth:1", "depth:8", "budget:64K"};

int run(const Flags& flags) {
  std::string root = flags.dir;
  if (root.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    root = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/dlfeed-soak-", ::getpid());
  }
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  std::vector<Dataset> sets;
  for (const DatasetCase& c : standard_cases()) sets.push_back(make_dataset(c, root, flags.files, flags.per_file));
  const std::vector<IoKind> ios = backends();

  std::mt19937_64 rng(flags.seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  Faults faults({});
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };

  // Lazily created process-wide state first (oneTBB, the io_uring probe, libhdf5).
  {
    auto warm = Loader::create(options_for(sets[3])).value();
    run_epoch(*warm, sets[3], 0);
  }
  const int fds0 = count_fds();
  uint64_t iterations = 0, epochs = 0, complete = 0, failed = 0, abandoned = 0, resumed = 0;
  std::vector<uint64_t> rss;
  std::map<std::string, uint64_t> errors_by_kind;
  int problems = 0;
  auto problem = [&](const std::string& what) {
    ++problems;
    std::fprintf(stderr, "dlfeed_soak: FAIL: %s\n", what.c_str());
  };

  while (iterations < flags.iterations && elapsed() < flags.seconds && problems == 0) {
    ++iterations;
    const Dataset& d = sets[pick(sets.size())];
    const Profile& prof = kProfiles[pick(std::size(kProfiles))];
    FaultSpec spec = prof.spec;
    spec.seed = rng();
    faults.set_spec(spec);
    LoaderOptions o = options_for(d);
    o.io.kind = ios[pick(ios.size())];
    o.advanced.io_factory = faults.factory();
    o.order.strategy = kStrategies[pick(std::size(kStrategies))];
    o.order.seed = rng() % 1000;
    o.order.world_size = 1 + static_cast<uint32_t>(pick(3));
    o.order.rank = static_cast<uint32_t>(pick(o.order.world_size));
    o.batch_size = 1 + static_cast<uint32_t>(pick(16));
    o.advanced.prefetch = kPrefetch[pick(std::size(kPrefetch))];
    o.advanced.max_open_files = pick(2) ? 0 : 1 + pick(3);
    o.memory_budget = pick(2) ? (1u << 30) : 4096 + pick(64 << 10);
    const std::string what = absl::StrCat("iteration ", iterations, ": ", d.c.name, " ", io_kind_name(o.io.kind), " ",
                                          o.order.strategy, " rank ", o.order.rank, "/", o.order.world_size, " batch ",
                                          o.batch_size, " ", o.advanced.prefetch.str(), " faults ", prof.name);
    if (flags.verbose) std::fprintf(stderr, "%s\n", what.c_str());
    Watchdog dog(std::chrono::seconds(flags.hang_seconds), what);
    {
      auto loader = Loader::create(o);
      if (!loader.ok()) {
        problem(absl::StrCat(what, ": create failed: ", loader.status().ToString()));
        break;
      }
      const uint64_t n_epochs = 1 + pick(3);
      for (uint64_t e = 0; e < n_epochs; ++e) {
        const uint64_t epoch = rng() % 100;
        const int mode = static_cast<int>(pick(8));
        const char* mode_name = mode == 0 ? "abandoned mid-epoch" : mode == 1 ? "saved and resumed" : "whole";
        dog.set_phase(absl::StrCat("epoch ", e + 1, " of ", n_epochs, " (epoch ", epoch, ", ", mode_name, ")"));
        if (flags.verbose) std::fprintf(stderr, "  epoch %llu: %s\n", (unsigned long long)epoch, mode_name);
        if (mode == 0) {  // abandon mid-epoch: destroyed or restarted with batches in flight
          ++abandoned;
          (void)(*loader)->start_epoch(epoch);
          for (size_t k = pick(4); k > 0; --k) {
            auto b = (*loader)->next();
            if (!b.ok() || !*b) break;
          }
          if (pick(2)) break;  // destroyed now
          continue;
        }
        EpochResult r;
        if (mode == 1) {  // save after a few batches, resume in a new loader
          ++resumed;
          auto first = Loader::create(o);
          if (!first.ok()) break;
          (void)(*first)->start_epoch(epoch);
          std::vector<uint64_t> ids;
          absl::Status err;
          for (size_t k = pick(5); k > 0; --k) {
            auto b = (*first)->next();
            if (!b.ok()) {
              err = b.status();
              break;
            }
            if (!*b) break;
            ids.insert(ids.end(), (*b)->sample_ids.begin(), (*b)->sample_ids.end());
          }
          if (!err.ok()) continue;  // an injected failure before the save point
          const std::string state = (*first)->state();
          first->reset();
          if (absl::Status st = (*loader)->restore(state); !st.ok()) {
            problem(absl::StrCat(what, ": restore: ", st.ToString()));
            break;
          }
          r = run_epoch(**loader, d, epoch);
          r.ids.insert(r.ids.begin(), ids.begin(), ids.end());
        } else {
          r = run_epoch(**loader, d, epoch);
        }
        ++epochs;
        const std::string v = verdict(r, **loader, d, epoch);
        if (!v.empty()) problem(absl::StrCat(what, " epoch ", epoch, ": ", v));
        if (r.error.ok()) {
          ++complete;
        } else {
          ++failed;
          const std::string msg(r.error.message());
          errors_by_kind[msg.find("a completion reporting") != std::string::npos ? "wrong length"
                         : msg.find("Input/output error") != std::string::npos   ? "EIO"
                                                                                 : "other"]++;
          if (!prof.may_fail) problem(absl::StrCat(what, " epoch ", epoch, ": an error without a fatal fault: ", msg));
        }
      }
    }
    // The loader is gone: nothing of it may be left.
    if (const int t = settled_dlfeed_threads(); t != 0) problem(absl::StrCat(what, ": ", t, " dlfeed threads left"));
    if (const int fds = count_fds(); fds != fds0) {
      problem(absl::StrCat(what, ": ", fds, " file descriptors open, ", fds0, " before"));
    }
    rss.push_back(resident_bytes());
  }

  // Resident memory: the peak after warm-up (the first third) against the
  // peak during it.
  uint64_t warm_peak = 0, late_peak = 0;
  for (size_t i = 0; i < rss.size(); ++i) {
    uint64_t& peak = i < rss.size() / 3 ? warm_peak : late_peak;
    peak = std::max(peak, rss[i]);
  }
  const FaultCounts n = faults.counts();
  std::printf(
      "dlfeed_soak: %llu loaders, %llu epochs checked (%llu complete, %llu ended by an injected fault: %llu EIO, "
      "%llu wrong length), %llu abandoned mid-epoch, %llu resumed, in %.1f s\n"
      "  faults injected: %llu short reads, %llu EINTR, %llu EAGAIN, %llu read EIO, %llu EIO completions, "
      "%llu wrong lengths, %llu delayed completions, over %llu reads\n"
      "  resident memory: %.1f MiB peak while warming up, %.1f MiB after; descriptors %d\n",
      (unsigned long long)iterations, (unsigned long long)epochs, (unsigned long long)complete,
      (unsigned long long)failed, (unsigned long long)errors_by_kind["EIO"],
      (unsigned long long)errors_by_kind["wrong length"], (unsigned long long)abandoned, (unsigned long long)resumed,
      elapsed(), (unsigned long long)n.short_reads, (unsigned long long)n.eintr, (unsigned long long)n.eagain,
      (unsigned long long)n.read_eio, (unsigned long long)n.eio, (unsigned long long)n.wrong_length,
      (unsigned long long)n.delayed, (unsigned long long)n.reads, warm_peak / 1048576.0, late_peak / 1048576.0,
      count_fds());
  if (errors_by_kind["other"] > 0) {
    problem(absl::StrCat(errors_by_kind["other"], " epochs ended by an error that no injected fault explains"));
  }
  if (rss.size() >= 9 && !sanitized() && late_peak > warm_peak + (flags.rss_growth_mb << 20)) {
    problem(absl::StrCat("resident memory grew from ", warm_peak >> 20, " MiB to ", late_peak >> 20,
                         " MiB after warm-up (allowed: ", flags.rss_growth_mb, " MiB)"));
  }
  if (epochs == 0) problem("no epoch ran");
  std::filesystem::remove_all(root);
  return problems == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dlfeed::fault

int main(int argc, char** argv) {
  dlfeed::fault::Flags flags;
  if (!dlfeed::fault::parse(argc, argv, flags)) return 2;
  return dlfeed::fault::run(flags);
}
