// SPDX-License-Identifier: Apache-2.0
// dlfeed run's scale-out flags and hooks (run_scale.h): MPI when built with
// dlfeed::mpi and launched by an MPI launcher, and node-local staging.
#include "run_scale.h"

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "command.h"
#include "dlfeed/error.h"
#include "dlfeed/staging/staging.h"
#if DLFEED_WITH_MPI
#include "dlfeed/mpi/job_cache.h"
#include "dlfeed/mpi/mpi.h"
#endif
#include "run_util.h"
#include "source_throttle.h"

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
ABSL_FLAG(bool, stage_sync, dlfeed::staging::StageOptions{}.sync,
          "fsync each staged copy before renaming it into place");
ABSL_FLAG(std::string, cache_dir, "",
          "s3:// datasets: a node-local folder keeping the bytes fetched, so later epochs and runs read them from it "
          "(docs/object-storage.md)");
ABSL_FLAG(std::string, cache_limit, "",
          "Most bytes kept in --cache-dir, e.g. 64G (default: no limit); once full, what it holds stays (by next use "
          "in the known order when the order uses samples again)");
ABSL_FLAG(std::string, cache, "",
          "Under MPI: the job cache, this many bytes per node (e.g. 64G): the first epoch keeps what it reads, "
          "spread over the ranks' memory, and later epochs read it from there, not the files (docs/distributed.md)");
ABSL_FLAG(int, cache_ranks_per_node, 0,
          "With --cache: K ranks per node (0: the ranks that share memory, as MPI finds them); 1 makes every rank "
          "a node of its own, so one machine exercises the transfers between nodes");
ABSL_FLAG(std::string, cache_folder, "",
          "With --cache: keep each rank's share in a file in this node-local folder (an NVMe disk) instead of "
          "memory, so the cache may outgrow memory (the file is removed at once; its space is freed at exit)");
ABSL_FLAG(std::string, source_throttle, "",
          "BANDWIDTH[:LATENCY], e.g. 200M:1ms: read the files as from a file system the job shares, at this "
          "bandwidth for all ranks together and this latency per read (a stand-in for tests and benches)");
ABSL_FLAG(bool, stage_wait, false,
          "After the first epoch, wait until every rank's copies are done (staging first, then training); the wait "
          "is outside the epochs' times and printed");

namespace dlfeed::cli {

FlagGroup scale_out_flags() {
  return flag_group("MPI, staging and object cache flags", FLAGS_mpi, FLAGS_barrier_per_step, FLAGS_all_ranks_print,
                    FLAGS_stage_to, FLAGS_stage_limit, FLAGS_stage_sync, FLAGS_stage_wait, FLAGS_cache_dir,
                    FLAGS_cache_limit, FLAGS_cache, FLAGS_cache_ranks_per_node, FLAGS_cache_folder,
                    FLAGS_source_throttle);
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
  std::shared_ptr<mpi::JobCache> cache;   // freed before the job (collective)
  mpi::JobCacheStats last;                // at the previous epoch's end
  std::vector<std::string> cache_epochs;  // the job's per-epoch JSON (rank 0)
  std::string throttle_path;              // /dev/shm word the ranks' throttles share
  uint64_t cache_bytes = 0;               // --cache, per node
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
        "--mpi=on: this dlfeed was built without MPI (configure with an MPI implementation installed; from Python's "
        "source: pip install . -C cmake.define.DLFEED_MPI=ON)"));
  }
  if (mode == "auto" && (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK"))) {
    std::fprintf(stderr,
                 "dlfeed run: started by an MPI launcher, but this dlfeed was built without MPI: "
                 "every process runs as --rank/--world-size say\n");
  }
#endif
  return s;
}

ScaleOut::~ScaleOut() {
#if DLFEED_WITH_MPI
  if (job_ && job_->cache && std::uncaught_exceptions() == 0) job_->cache->close().IgnoreError();
  if (job_ && is_root() && !job_->throttle_path.empty()) std::remove(job_->throttle_path.c_str());
#endif
}

void ScaleOut::agree([[maybe_unused]] std::vector<std::pair<std::string, std::string>> settings) const {
#if DLFEED_WITH_MPI
  if (!job_) return;
  // Per-rank paths may differ (a node's own --stage-to or --cache-folder);
  // whether one is given may not (the cache's windows, the stage wait).
  const std::string cache = absl::GetFlag(FLAGS_cache);
  const absl::StatusOr<uint64_t> cache_bytes = parse_bytes(cache);  // 64G and 65536M alike
  settings.emplace_back("--cache", cache_bytes.ok() && !cache.empty() ? absl::StrCat(*cache_bytes, " bytes") : cache);
  settings.emplace_back("--cache-ranks-per-node", absl::StrCat(absl::GetFlag(FLAGS_cache_ranks_per_node)));
  settings.emplace_back("--cache-folder (given)", absl::GetFlag(FLAGS_cache_folder).empty() ? "no" : "yes");
  settings.emplace_back("--source-throttle (given)", absl::GetFlag(FLAGS_source_throttle).empty() ? "no" : "yes");
  settings.emplace_back("--stage-wait", absl::GetFlag(FLAGS_stage_wait) ? "true" : "false");
  if (absl::GetFlag(FLAGS_stage_wait)) {  // its wait is collective; staging alone is a rank's own
    settings.emplace_back("--stage-to (given)", absl::GetFlag(FLAGS_stage_to).empty() ? "no" : "yes");
  }
  settings.emplace_back("--barrier-per-step", absl::GetFlag(FLAGS_barrier_per_step) ? "true" : "false");
  throw_if_error(
      job_->job->agree(settings, "every rank of a job runs with the same settings (give each rank the same flags)"));
#endif
}

void ScaleOut::agree(const LoaderOptions& o, std::vector<std::pair<std::string, std::string>> more) const {
  more.emplace_back("--fields", absl::StrJoin(o.fields, ","));
  more.emplace_back("--batch-size", absl::StrCat(o.batch_size));
  // --strategy, --seed, --drop-last and what the strategy reads (--block-size, ...).
  more.emplace_back("the order", describe_order(o.order, indices_fingerprint(o.order.params.indices.get())));
  more.emplace_back("--drop-last-batch", o.drop_last_batch ? "true" : "false");
  agree(std::move(more));
}

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
  configure_cache(o);
}

void ScaleOut::configure_cache(LoaderOptions& o) const {
  IoBackendFactory source;
  if (const std::string throttle = absl::GetFlag(FLAGS_source_throttle); !throttle.empty()) {
    SourceThrottle t = value_or_throw(parse_source_throttle(throttle));
    if (!o.stage.dir.empty()) t.local_prefix = absl::StrCat(o.stage.dir, "/");
#if DLFEED_WITH_MPI
    if (job_) {
      // One word for the job's ranks: named by rank 0's pid.
      const std::string name = value_or_throw(
          job_->job->broadcast(is_root() ? absl::StrCat("/dev/shm/dlfeed-throttle-", ::getpid()) : std::string()));
      job_->throttle_path = name;
      t.shared_path = name;
    }
#endif
    source = throttled_factory(t, o.advanced.io_factory);
  }
  const std::string cache = absl::GetFlag(FLAGS_cache);
  if (cache.empty()) {
    if (source) o.advanced.io_factory = std::move(source);
    return;
  }
#if DLFEED_WITH_MPI
  // One cache per job: the first loader's (dlio's training loader; its
  // evaluation loader reads the files).
  if (job_ && job_->cache) {
    if (source) o.advanced.io_factory = std::move(source);
    return;
  }
  if (!job_) {
    throw_if_error(absl::FailedPreconditionError(
        "--cache: the job cache spreads over an MPI job's ranks: run under mpirun or srun (or with --mpi=on)"));
  }
  mpi::JobCacheOptions co;
  co.bytes_per_node = job_->cache_bytes = value_or_throw(parse_bytes(cache));
  co.ranks_per_node = absl::GetFlag(FLAGS_cache_ranks_per_node);
  co.folder = absl::GetFlag(FLAGS_cache_folder);
  co.source = std::move(source);
  job_->cache = value_or_throw(mpi::JobCache::create(*job_->job, co));
  throw_if_error(job_->cache->attach(o));
#else
  throw_if_error(absl::FailedPreconditionError(
      "--cache: this dlfeed was built without MPI (the job cache needs it; from Python's source: pip install . -C "
      "cmake.define.DLFEED_MPI=ON)"));
#endif
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
  report_cache(epoch);
  if (epoch != 0 || !absl::GetFlag(FLAGS_stage_wait) || loader.options().stage.dir.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  // One process stops waiting at Ctrl-C (run_util.h); under MPI none is caught.
  while (!loader.stats().stage.done && !interrupt_requested()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
#if DLFEED_WITH_MPI
  if (job_) throw_if_error(job_->job->barrier());
#endif
  stage_wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("stage: waited %.3f s for the copies after epoch 0\n", stage_wait_s_);
}

void ScaleOut::trace_cache([[maybe_unused]] counters::Counters& c) const {
#if DLFEED_WITH_MPI
  if (job_ && job_->cache) job_->cache->trace_into(&c);
#endif
}

void ScaleOut::report_cache([[maybe_unused]] uint64_t epoch) {
#if DLFEED_WITH_MPI
  if (!job_ || !job_->cache) return;
  const mpi::JobCacheStats now = job_->cache->stats();
  mpi::JobCacheStats d = now;  // this epoch's counts
  const mpi::JobCacheStats& l = job_->last;
  d.bytes_read_source -= l.bytes_read_source;
  d.bytes_read_local -= l.bytes_read_local;
  d.bytes_read_node -= l.bytes_read_node;
  d.bytes_read_peers -= l.bytes_read_peers;
  d.bytes_missed -= l.bytes_missed;
  d.remote_gets -= l.remote_gets;
  d.remote_ns -= l.remote_ns;
  d.bytes_kept -= l.bytes_kept;
  d.extents_kept -= l.extents_kept;
  job_->last = now;
  const mpi::Job& j = *job_->job;
  const uint64_t source = j.sum(d.bytes_read_source), peers = j.sum(d.bytes_read_peers),
                 node = j.sum(d.bytes_read_node), own = j.sum(d.bytes_read_local), missed = j.sum(d.bytes_missed),
                 gets = j.sum(d.remote_gets), remote_ns = j.sum(d.remote_ns), kept = j.sum(now.bytes_kept),
                 remote_max = j.max(now.remote_ns_max);
  const std::vector<std::string> ranks = gather(d.to_json());
  if (!is_root()) return;
  constexpr double kMiB = 1048576.0;
  std::printf(
      "job cache: epoch %llu: %.1f MiB from the files, %.1f MiB from other nodes, %.1f MiB from other ranks of the "
      "node, %.1f MiB from the rank's own part; %.1f MiB of held extents still read from the files; %.1f MiB kept so "
      "far "
      "of %.1f MiB that fit (the first epoch's extents: %.1f MiB); %llu remote rounds, mean %.3f ms, max %.3f ms\n",
      static_cast<unsigned long long>(epoch), source / kMiB, peers / kMiB, node / kMiB, own / kMiB, missed / kMiB,
      kept / kMiB, now.held_bytes / kMiB, now.dataset_bytes / kMiB, static_cast<unsigned long long>(gets),
      gets ? remote_ns / 1e6 / static_cast<double>(gets) : 0.0, remote_max / 1e6);
  job_->cache_epochs.push_back(
      absl::StrCat("{\"epoch\":", epoch, ",\"bytes_read_source\":", source, ",\"bytes_read_peers\":", peers,
                   ",\"bytes_read_node\":", node, ",\"bytes_read_local\":", own, ",\"bytes_missed\":", missed,
                   ",\"bytes_kept\":", kept, ",\"remote_gets\":", gets, ",\"remote_s\":", remote_ns / 1e9,
                   ",\"per_rank\":[", absl::StrJoin(ranks, ","), "]}"));
#endif
}

std::string ScaleOut::job_cache_json() const {
#if DLFEED_WITH_MPI
  if (job_ && job_->cache) {
    const mpi::JobCacheStats st = job_->cache->stats();
    return absl::StrCat(",\"job_cache\":{\"bytes_per_node\":", job_->cache_bytes, ",\"nodes\":", st.nodes,
                        ",\"node_loads\":", st.node_loads ? "true" : "false", ",\"dataset_bytes\":", st.dataset_bytes,
                        ",\"held_bytes\":", st.held_bytes, ",\"epochs\":[", absl::StrJoin(job_->cache_epochs, ","),
                        "]}");
  }
#endif
  return {};
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

void ScaleOut::reduce_checksum(uint64_t& checksum, uint64_t& samples) const {
  checksum = sum(checksum);  // wraps mod 2^64 like the per-rank sum: order-independent
  samples = sum(samples);
}

uint64_t ScaleOut::sum(uint64_t v) const {
#if DLFEED_WITH_MPI
  if (job_) return job_->job->sum(v);
#endif
  return v;
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
        loader.options().stage.dir.c_str(),
        static_cast<unsigned long long>(g.staged) + static_cast<unsigned long long>(g.reused),
        static_cast<unsigned long long>(g.files), static_cast<unsigned long long>(g.staged),
        static_cast<unsigned long long>(g.reused), g.bytes_staged / 1048576.0,
        static_cast<unsigned long long>(g.skipped_limit) + static_cast<unsigned long long>(g.skipped_space),
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
