// SPDX-License-Identifier: Apache-2.0
// dlfeed run's scale-out flags and hooks (run_scale.h): MPI when built with
// dlfeed::mpi and launched by an MPI launcher, and node-local staging.
#include "run_scale.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "command.h"
#include "dlfeed/error.h"
#if DLFEED_WITH_MPI
#include "dlfeed/mpi/mpi.h"
#endif

ABSL_FLAG(std::string, mpi, "auto",
          "auto: take rank and world size from MPI when an MPI launcher (mpirun, srun) started this process; "
          "on: always initialize MPI; off: never (then --rank/--world-size)");
ABSL_FLAG(bool, barrier_per_step, true,
          "Under MPI: a barrier at the end of every step, as DLIO emulates the gradient all-reduce (barrier_ns)");
ABSL_FLAG(bool, all_ranks_print, false, "Under MPI: every rank prints its lines (default: rank 0 only)");
ABSL_FLAG(std::string, stage_to, "",
          "Stage this rank's files to this node-local folder (a local disk, /dev/shm) during the first epoch and "
          "read the copies from the next epoch on; files without a complete copy are read from the source");
ABSL_FLAG(std::string, stage_limit, "",
          "Most bytes of copies per rank, e.g. 512M, 4G (default: no limit); files that do not fit are skipped");
ABSL_FLAG(bool, stage_sync, true, "fsync each staged copy before renaming it into place");
ABSL_FLAG(std::string, cache_dir, "",
          "s3:// datasets: a node-local folder keeping the bytes fetched, so later epochs and runs read them from it "
          "(docs/object-storage.md)");
ABSL_FLAG(std::string, cache_limit, "",
          "Most bytes kept in --cache-dir, e.g. 64G (default: no limit); once full, what it holds stays");
ABSL_FLAG(bool, stage_wait, false,
          "After the first epoch, wait until every rank's copies are done (staging first, then training); the wait "
          "is outside the epochs' times and printed");

namespace dlfeed::cli {

FlagGroup scale_out_flags() {
  return flag_group("MPI, staging and object cache flags", FLAGS_mpi, FLAGS_barrier_per_step, FLAGS_all_ranks_print,
                    FLAGS_stage_to, FLAGS_stage_limit, FLAGS_stage_sync, FLAGS_stage_wait, FLAGS_cache_dir,
                    FLAGS_cache_limit);
}

namespace {

// "4096", "64K", "512M", "4G", "1T" (powers of 1024).
absl::StatusOr<uint64_t> parse_bytes(const std::string& text) {
  std::string t = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  if (!t.empty() && t.back() == 'B') t.pop_back();
  uint64_t mult = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'K': mult = 1ull << 10; break;
      case 'M': mult = 1ull << 20; break;
      case 'G': mult = 1ull << 30; break;
      case 'T': mult = 1ull << 40; break;
      default: break;
    }
    if (mult != 1) t.pop_back();
  }
  uint64_t v = 0;
  if (t.empty() || !absl::SimpleAtoi(t, &v) || (v > 0 && mult > UINT64_MAX / v)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a byte count (e.g. 4096, 512M, 4G)"));
  }
  return v * mult;
}

}  // namespace

struct ScaleOut::MpiState {
#if DLFEED_WITH_MPI
  std::unique_ptr<mpi::Job> job;
#endif
};

std::unique_ptr<ScaleOut> ScaleOut::begin() {
  std::unique_ptr<ScaleOut> s(new ScaleOut());
  const std::string mode = absl::GetFlag(FLAGS_mpi);
  if (mode != "auto" && mode != "on" && mode != "off") {
    throw_if_error(absl::InvalidArgumentError(absl::StrCat("--mpi must be auto, on or off, not '", mode, "'")));
  }
#if DLFEED_WITH_MPI
  if (mode == "on" || (mode == "auto" && mpi::launched_by_mpi())) {
    s->job_ = std::make_unique<MpiState>();
    s->job_->job = value_or_throw(mpi::Job::init());
    s->rank_ = s->job_->job->rank();
    s->size_ = s->job_->job->size();
    if (s->rank_ != 0 && !absl::GetFlag(FLAGS_all_ranks_print)) {
      // Rank 0 speaks for the job; errors still reach stderr.
      // (If /dev/null cannot be opened, stdout is closed: prints then fail quietly.)
      [[maybe_unused]] FILE* quiet = std::freopen("/dev/null", "w", stdout);
    }
  }
#else
  if (mode == "on") {
    throw_if_error(absl::FailedPreconditionError(
        "--mpi=on: this dlfeed was built without MPI (configure with an MPI implementation installed)"));
  }
  if (mode == "auto" && (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK"))) {
    std::fprintf(stderr,
                 "dlfeed run: started by an MPI launcher, but this dlfeed was built without MPI: "
                 "every process runs as --rank/--world-size say\n");
  }
#endif
  return s;
}

ScaleOut::~ScaleOut() = default;

void ScaleOut::configure(LoaderOptions& o) const {
#if DLFEED_WITH_MPI
  if (job_) {
    job_->job->configure(o);
    job_->job->share_index(o);  // one rank reads the headers; create is collective here
  }
#endif
  o.stage.dir = absl::GetFlag(FLAGS_stage_to);
  const std::string limit = absl::GetFlag(FLAGS_stage_limit);
  if (!limit.empty()) o.stage.limit_bytes = value_or_throw(parse_bytes(limit));
  o.stage.sync = absl::GetFlag(FLAGS_stage_sync);
  o.object_cache.dir = absl::GetFlag(FLAGS_cache_dir);
  const std::string cache_limit = absl::GetFlag(FLAGS_cache_limit);
  if (!cache_limit.empty()) o.object_cache.max_bytes = value_or_throw(parse_bytes(cache_limit));
}

void ScaleOut::barrier() const {
#if DLFEED_WITH_MPI
  if (job_) throw_if_error(job_->job->barrier());
#endif
}

void ScaleOut::end_step([[maybe_unused]] counters::Counters& c) const {
#if DLFEED_WITH_MPI
  if (job_ && absl::GetFlag(FLAGS_barrier_per_step)) throw_if_error(job_->job->step_barrier(c));
#endif
}

void ScaleOut::end_epoch(const Loader& loader, uint64_t epoch) {
  if (epoch != 0 || !absl::GetFlag(FLAGS_stage_wait) || loader.options().stage.dir.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  while (!loader.stats().stage.done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
#if DLFEED_WITH_MPI
  if (job_) throw_if_error(job_->job->barrier());
#endif
  stage_wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("stage: waited %.3f s for the copies after epoch 0\n", stage_wait_s_);
}

std::string ScaleOut::rank_path(const std::string& path) const {
  if (!job_ || path.empty()) return path;
  const std::filesystem::path p(path);
  return (p.parent_path() / absl::StrCat(p.stem().string(), ".rank", rank_, p.extension().string())).string();
}

std::vector<std::string> ScaleOut::gather(const std::string& mine) const {
#if DLFEED_WITH_MPI
  if (job_) {
    std::vector<std::string> all = value_or_throw(job_->job->gather(mine));
    if (is_root()) return all;
  }
#endif
  return {mine};
}

void ScaleOut::reduce_checksum([[maybe_unused]] uint64_t& sum, [[maybe_unused]] uint64_t& samples) const {
#if DLFEED_WITH_MPI
  if (job_) {
    sum = job_->job->sum(sum);  // wraps mod 2^64 like the per-rank sum: order-independent
    samples = job_->job->sum(samples);
  }
#endif
}

counters::Snapshot ScaleOut::summary(const Loader& loader, const std::string& json_path) const {
  counters::Snapshot snap = loader.counters_snapshot();
  const LoaderStats st = loader.stats();
  if (!loader.options().stage.dir.empty()) {
    const staging::StageStats& g = st.stage;
    std::printf(
        "stage: %s: %llu of %llu owned files staged (%llu copied, %llu reused), %.1f MiB; %llu skipped "
        "(%llu over the %s limit, %llu no space), %llu failed%s%s; %llu of %llu files read from copies at "
        "the last epoch start\n",
        loader.options().stage.dir.c_str(), static_cast<unsigned long long>(g.staged + g.reused),
        static_cast<unsigned long long>(g.files), static_cast<unsigned long long>(g.staged),
        static_cast<unsigned long long>(g.reused), g.bytes_staged / 1048576.0,
        static_cast<unsigned long long>(g.skipped_limit + g.skipped_space),
        static_cast<unsigned long long>(g.skipped_limit),
        absl::GetFlag(FLAGS_stage_limit).empty() ? "(no)" : absl::GetFlag(FLAGS_stage_limit).c_str(),
        static_cast<unsigned long long>(g.skipped_space), static_cast<unsigned long long>(g.failed),
        g.first_error.empty() ? "" : ": ", g.first_error.c_str(), static_cast<unsigned long long>(st.files_read_staged),
        static_cast<unsigned long long>(st.files));
  }
#if DLFEED_WITH_MPI
  if (job_) {
    if (!json_path.empty()) {
      const std::string mine = rank_path(json_path);
      FILE* f = std::fopen(mine.c_str(), "wb");
      if (!f) throw_if_error(absl::NotFoundError(absl::StrCat(mine, ": cannot open for writing")));
      const std::string js = snap.to_json() + "\n";
      const bool ok = std::fwrite(js.data(), 1, js.size(), f) == js.size();
      if (std::fclose(f) != 0 || !ok) throw_if_error(absl::DataLossError(absl::StrCat(mine, ": write failed")));
    }
    snap = value_or_throw(job_->job->reduce(snap));
  }
#else
  (void)json_path;
#endif
  return snap;
}

}  // namespace dlfeed::cli
