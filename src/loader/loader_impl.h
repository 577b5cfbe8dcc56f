// SPDX-License-Identifier: Apache-2.0
// Private: the loader's state and wiring (Loader::Impl), for loader.cc,
// which makes it (create) and runs its epochs, and loader_stats.cc.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/exception_status.h"
#include "base/tbb.h"
#include "base/thread_name.h"
#include "batch/budget.h"
#include "batch/collator.h"
#include "counters/record.h"
#include "decode/decoder.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/loader.h"
#include "dlfeed/plan/policy.h"
#include "loader/loader_fields.h"
#include "loader/loader_state.h"
#include "loader/prefill.h"
#include "pipeline/cores.h"
#include "pipeline/pipeline.h"
#include "pipeline/tuned.h"
#include "plan/lookahead.h"
#include "plan/planner.h"
#include "read/engine.h"
#include "read/resident.h"
#include "read/split_reads.h"
#include "read/unpacked.h"

namespace dlfeed::inline DLFEED_ABI {

struct Loader::Impl {
  using Counters = counters::Counters;
  using CId = counters::Id;
  // First member: outlives the engines and every pipeline thread.
  std::shared_ptr<Counters> counters;
  LoaderOptions options;
  std::vector<std::string> field_names;
  std::vector<FieldSpec> field_specs;
  std::vector<SampleIndex> indices;             // one per field
  std::vector<FormatOptions> field_formats;     // what each field was indexed with
  std::vector<std::vector<uint32_t>> file_ids;  // [field][file] -> FileTable id
  FileLayout layout;
  uint64_t samples_per_epoch = 0;  // this rank's, from the order checked at create
  std::shared_ptr<FileTable> files;
  std::vector<std::string> file_names;  // per FileTable id: the source path
  std::shared_ptr<const prefetch::PrefetchPolicy> policy;
  std::shared_ptr<BufferPool> pool = std::make_shared<BufferPool>(256);
  std::shared_ptr<batch::Budget> budget = std::make_shared<batch::Budget>();
  // LoaderOptions::resident: the files held in memory (null: read them).
  std::shared_ptr<const detail::ResidentFiles> resident;
  std::unique_ptr<detail::ResidentHold> hold;  // reading `resident` in (stopped and joined first)
  bool planned_held = false;                   // the planner was made with every file held
  size_t planned_drops = 0;                    // ... and with these dropped (ResidentFiles::drop)
  std::string resident_reason;
  std::string memory_budget_reason;          // LoaderStats::memory_budget_reason
  std::atomic<uint64_t> resident_copied{0};  // bytes of held files copied by the look-ahead
  std::atomic<uint64_t> resident_copies{0};  // ... and the copies (each counted as an I/O operation)
  // LoaderOptions::unpack: arrays read once whole (null: none).
  std::shared_ptr<detail::UnpackedFiles> unpacked;
  std::string unpacked_reason;
  // Stores with a bounded cache (LoaderOptions::object_cache): they keep by
  // `uses`, this epoch's uses of the objects' pieces (the pipeline thread's).
  std::vector<std::shared_ptr<ObjectStore>> cache_stores;
  std::shared_ptr<const ObjectUses> uses;

  // The stages, in flow order (built at the end of create()).
  std::unique_ptr<plan::Planner> planner;
  detail::EngineSet engines;
  plan::SourceParts source;  // the look-ahead's parts
  std::unique_ptr<decode::Decoder> decoder;
  batch::DeliveryQueue queue;
  std::unique_ptr<batch::Collator> collator;
  std::unique_ptr<pipeline::Pipeline> runner;
  // LoaderOptions::autotune (null: nothing tuned).
  std::shared_ptr<pipeline::TunedDepthPolicy> tuned_depth;
  std::unique_ptr<pipeline::LiveTuner> tuner;

  // Per-epoch state.
  std::optional<OrderCursor> base_cursor;  // at the epoch's start
  uint64_t epoch = 0;
  uint64_t start_position = 0;
  uint64_t delivered_samples = 0;
  bool running = false;
  bool first_epoch_called = false;  // AdvancedOptions::before_first_epoch
  bool finished = false;
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};
  std::thread pipeline_thread;

  // Pending restore().
  std::optional<detail::ResumePoint> resume;

  // Loader::set_overlap_epochs: the pipeline thread goes on into epoch
  // `chain_to` (the consumer's epoch + 1) once its epoch is all read.
  // `ahead_epoch`: the consumer saw a chained end, and that epoch runs; its
  // cursor at the start is `chained_base` (under order_mu, as the orders
  // made ahead, which the pipeline thread then takes too).
  std::atomic<bool> overlap{false};
  std::atomic<uint64_t> chain_to{0};
  std::optional<uint64_t> ahead_epoch;
  std::optional<OrderCursor> chained_base;
  std::mutex order_mu;

  // Orders made before their epoch starts (take_order): the one create()
  // checked, and the next epoch's, made while this one runs when the order
  // is small (prepare_order). Each is used only for exactly its epoch and
  // start; options.order does not change after create().
  std::optional<OrderCursor> prepared;
  std::future<absl::StatusOr<OrderCursor>> ahead;  // its destructor waits for it
  pid_t ahead_pid = 0;                             // the process whose thread makes it
  pid_t made_in = ::getpid();                      // a child of fork() has none of its threads

  // Staging (options.stage): the stager copies this rank's files; sources[id]
  // is FileTable id's source, stage_index[id] its index in the stager (or -1).
  std::unique_ptr<staging::Stager> stager;
  std::vector<staging::Source> sources;
  std::vector<int64_t> stage_index;
  absl::flat_hash_set<uint32_t> unstageable;       // changed since indexed: read from the source, never a copy
  std::unique_ptr<std::atomic<uint8_t>[]> staged;  // per FileTable id: redirected to a copy
  bool stage_partitioned = false;                  // the rank reads only its own files
  bool stage_direct = true;                        // copies in stage.dir open with O_DIRECT
  std::atomic<uint64_t> files_staged_now{0};       // redirected to a copy so far (stats() may read it anywhere)

  // Totals.
  std::atomic<uint64_t> batches{0}, samples{0}, bytes_delivered{0};

  ~Impl() {
    if (hold) hold->stop();  // a decode waiting for a held file waits for the pieces being read only
    cancel_epoch();          // first: a pipeline thread reading ahead may be taking an order (chain_order)
    hold.reset();
    abandon_if_forked();
    engines.clear();                                // each drains its reads in flight and joins its thread
    stager.reset();                                 // stops copying, joins its thread (its observer uses counters)
    if (files) files->check_reopens_with(nullptr);  // it asks about this loader's indices; no read is left
  }

  // At an epoch's start (no batch planned), once the held files are all
  // held, or one is let go: strided batches are for held files only.
  void plan_for_held() {
    planned_held = resident && resident->complete();
    planned_drops = resident ? resident->files_dropped() : 0;
    planner->set_held(planned_held ? resident.get() : nullptr);
  }

  void build_stages(uint32_t threads) {
    Counters* c = counters.get();
    // From memory, reading across a gap only copies bytes nobody asked for.
    prefetch::CoalesceOptions coalesce = options.advanced.coalesce;
    if (resident) coalesce.enabled = false;
    planner = std::make_unique<plan::Planner>(
        indices, file_ids,
        plan::PlannerOptions{options.batch_size, options.drop_last_batch, coalesce, options.advanced.coalesce.enabled},
        c, unpacked.get());
    plan_for_held();
    source.planner = planner.get();
    source.budget = budget;
    const uint64_t held = (resident ? resident->bytes() : 0) + (unpacked ? unpacked->reserved_bytes() : 0);
    source.rule = {policy.get(), options.memory_budget > held ? options.memory_budget - held : 0, pool.get()};
    source.pool = pool.get();
    source.fadvise = options.advanced.fadvise_willneed && !resident ? files.get() : nullptr;
    source.resident = resident.get();
    source.copied_bytes = &resident_copied;
    source.copied_reads = &resident_copies;
    source.engines = &engines;
    source.counters = c;
    source.stop = &stop;
    source.failed = &failed;
    decoder = std::make_unique<decode::Decoder>(indices, field_names, pool, c, unpacked.get());
    collator = std::make_unique<batch::Collator>(pool, c, queue, failed);
    runner = std::make_unique<pipeline::Pipeline>(threads);
    source.copy_threads = threads > 2 ? threads : 1;  // 2: the consumer needs the other core
    // A backend of the caller's may predate scattered reads (it would write
    // a whole record to the value's slot): it gets plain reads only.
    source.scattered_reads = !options.advanced.io_factory;
    source.spread = [r = runner.get()](size_t n, const std::function<void(size_t)>& body) { r->parallel(n, body); };
    if (!cache_stores.empty()) {
      source.on_epoch = [this](const OrderCursor& cursor, uint64_t epoch, uint64_t first_batch) {
        plan_object_uses(cursor, epoch, first_batch);
      };
    }
  }

  // The caches of the objects keep by this epoch's uses, made on the
  // pipeline thread as the epoch starts, when the order uses samples again;
  // the uses take at most 1/16 of the memory budget (16 bytes each). Held
  // objects are read from memory: none.
  void plan_object_uses(const OrderCursor& cursor, uint64_t epoch, uint64_t first_batch) {
    std::shared_ptr<const ObjectUses> made;
    if (!planned_held) {
      try {
        made = detail::object_uses(cursor, epoch, first_batch, options.batch_size, indices,
                                   static_cast<size_t>(options.memory_budget / 16 / 16));
      } catch (const std::bad_alloc&) {  // no memory for them: the caches keep what they keep first
      }
    }
    for (const auto& store : cache_stores) store->plan_uses(options.object_cache, made);
    uses = std::move(made);
  }

  // One engine per backend (ring, pread pool), all over the same files.
  absl::Status add_engines(const LoaderOptions& o, const pipeline::MachineDefaults& machine, bool tune_engines) {
    uint32_t n_engines = o.advanced.io_engines;
    if (n_engines == 0) n_engines = o.advanced.io_factory ? 1 : machine.io_engines;
    if (tune_engines) n_engines = std::max(n_engines, std::min(16u, pipeline::process_cores()));  // the most it may use
    n_engines = std::max(1u, n_engines);
    const uint64_t max_piece = o.advanced.coalesce.enabled ? o.advanced.coalesce.max_read : 0;
    // O_DIRECT reads have no read-ahead to keep busy: whole (up to max_piece).
    const uint64_t split_above = o.io.direct ? 0 : o.advanced.coalesce.split_above;
    // Held files: every read an engine gets is a copy from memory (TFRecord
    // records, or any read while tracing), which waits on no device, so the
    // batches go round all engines at once; the busy rule (Spreader) is for
    // reads that may wait on one.
    engines.set_spread_always(o.advanced.tuning.io_spread_always || resident != nullptr);
    for (uint32_t k = 0; k < n_engines; ++k) {
      DLFEED_ASSIGN_OR_RETURN(std::unique_ptr<IoBackend> backend, o.advanced.io_factory
                                                                      ? o.advanced.io_factory(files, o.io)
                                                                      : make_io_backend(files, o.io));
      if (!backend) return absl::InvalidArgumentError("loader: AdvancedOptions::io_factory returned no backend");
      if (o.advanced.io_factory) backend = make_checked_backend(std::move(backend), files);
      if (resident) backend = detail::make_resident_backend(std::move(backend), resident);
      try {
        engines.add(std::make_unique<detail::IoEngine>(
            std::move(backend), counters.get(), max_piece, k, split_above, o.advanced.coalesce.split_piece,
            o.advanced.coalesce.split_piece_cold, o.io.direct ? 0 : o.advanced.coalesce.large_above,
            o.advanced.coalesce.large_piece));
      } catch (const std::system_error& e) {
        return absl::ResourceExhaustedError(
            absl::StrCat("loader: the system gave no thread for I/O engine ", k + 1, " of ", n_engines, " (", e.what(),
                         "): fewer io_engines (--io-engines) or io.threads (--io-threads, now ", o.io.threads,
                         "), or a higher process limit (ulimit -u)"));
      }
    }
    return absl::OkStatus();
  }

  // The autotuner over what the options left to the machine (after build_stages).
  void setup_autotune(const pipeline::MachineDefaults& machine, bool tune_engines, bool tune_threads) {
    pipeline::TuneLimits l;
    l.tune_engines = tune_engines && engines.size() > 1;
    l.engines = machine.io_engines;
    l.max_engines = static_cast<uint32_t>(engines.size());
    l.tune_depth = tuned_depth != nullptr;
    l.depth = machine.read_depth;
    l.budget_bytes = std::min(machine.read_budget, source.rule.memory_budget);
    l.threads = l.max_threads = runner->threads();
    l.tune_threads = tune_threads && l.max_threads > l.min_threads;  // 2 made (2 cores): nothing to move
    if (!l.tune_engines && !l.tune_depth && !l.tune_threads) return;
    tuner = std::make_unique<pipeline::LiveTuner>(l, &engines, tuned_depth.get(), runner.get(), counters.get());
  }

  // Epoch `e` from `first_batch`, then (overlap_epochs) the next ones from
  // their starts while the consumer allows (chain_to).
  void run_epochs(OrderCursor cursor, uint64_t e, uint64_t first_batch) {
    detail::name_thread_once(*counters, "dlfeed pipeline");
    for (;;) {
      std::optional<OrderCursor> next;
      auto then = [&]() -> bool {
        next = chain_order(e + 1);
        return next.has_value();
      };
      try {
        plan::Lookahead lookahead(source, std::move(cursor), e, first_batch);
        if (!runner->run(lookahead, *decoder, *collator, stop, planner->copies_only(), then)) return;
      } catch (const std::exception& x) {  // outside the pipeline's own catch: its making, the next order
        collator->fail(base::exception_status("loader pipeline", x));
        collator->end();
        return;
      }
      cursor = *std::move(next);
      ++e;
      first_batch = 0;
    }
  }
  // On the pipeline thread: epoch `e`'s cursor from its start when the
  // pipeline may go on into it; else none.
  std::optional<OrderCursor> chain_order(uint64_t e) {
    if (!overlap || failed || stager || unpacked || chain_to.load() != e) return std::nullopt;
    std::lock_guard<std::mutex> lock(order_mu);
    OrderSpec spec = options.order;
    spec.epoch = e;
    absl::StatusOr<OrderCursor> made = take_order(spec);
    if (!made.ok()) return std::nullopt;  // start_epoch(e) makes it again and reports the error
    chained_base = *made;
    return *std::move(made);
  }

  absl::Status setup_staging(const LoaderOptions& o, const OrderCursor& checked) {
    DLFEED_RETURN_IF_ERROR(detail::staging_sources(file_names, *files, sources, unstageable));
    stage_partitioned = !checked.global_order().rank_bounds().empty();
    stage_index.assign(sources.size(), -1);
    std::vector<staging::Source> mine;
    std::vector<uint32_t> mine_ids;
    for (uint64_t f : staging::owned_files(layout, checked)) {
      for (const auto& ids : file_ids) {
        const uint32_t id = ids[f];
        if (stage_index[id] >= 0 || unstageable.contains(id)) continue;
        stage_index[id] = static_cast<int64_t>(mine.size());
        mine.push_back(sources[id]);
        mine_ids.push_back(id);
      }
    }
    staged.reset(new std::atomic<uint8_t>[sources.size()]);
    for (size_t i = 0; i < sources.size(); ++i) staged[i].store(0, std::memory_order_relaxed);
    staging::Stager::Observer obs;
    Counters* c = counters.get();
    auto t0 = std::make_shared<uint64_t>(0);
    obs.on_bytes = [c](uint64_t n) { DLFEED_REC(c->add(CId::kStageCopied, n)); };
    obs.on_file_begin = [c, t0](size_t) {
      detail::name_thread_once(*c, "dlfeed stage");
      *t0 = detail::now_of(*c);
    };
    obs.on_file_end = [c, t0, mine_ids, this](size_t i, staging::FileStatus st) {
      DLFEED_REC({
        const uint64_t t1 = c->now();
        if (c->tracing() && st == staging::FileStatus::kStaged) {
          c->trace("stage", "stage", *t0, t1 - *t0, mine_ids[i], sources[mine_ids[i]].size);
        }
      });
    };
    DLFEED_ASSIGN_OR_RETURN(stager, staging::Stager::create(o.stage, std::move(mine), std::move(obs)));
    stage_direct = !o.io.direct || staging::Stager::supports_direct(o.stage.dir);
    engines.set_staged_flags(staged.get(), sources.size());
    return absl::OkStatus();
  }

  // Between epochs (no reads in flight): every file whose copy is complete
  // is read from the copy from now on.
  void apply_staging() {
    if (!stager) return;
    for (uint32_t id = 0; id < sources.size(); ++id) {
      if (staged[id].load(std::memory_order_relaxed) || unstageable.contains(id)) continue;
      std::string path;
      if (stage_index[id] >= 0) {
        path = stager->staged_path(static_cast<size_t>(stage_index[id]));
      } else if (!stage_partitioned) {
        path = staging::Stager::find_copy(options.stage.dir, sources[id]);  // another rank's copy
      }
      if (path.empty()) continue;
      if (!files->redirect(id, path, stage_direct ? std::nullopt : std::optional<bool>(false)).ok()) continue;
      staged[id].store(1, std::memory_order_relaxed);
      ++files_staged_now;
    }
    stager->start();  // the first epoch starts the copying (after the look, so it reads no copy of its own)
  }
  // The cursor of `spec` (options.order at another epoch and global_start):
  // one made ahead when it is that one, else made now.
  absl::StatusOr<OrderCursor> take_order(const OrderSpec& spec) {
    abandon_if_forked();
    auto same = [&](const OrderCursor& c) {
      return c.spec().epoch == spec.epoch && c.spec().global_start == spec.global_start;
    };
    std::optional<OrderCursor> found;
    if (ahead.valid()) {
      absl::StatusOr<OrderCursor> made = ahead.get();
      if (made.ok() && same(*made)) found = std::move(*made);
    }
    if (!found && prepared && same(*prepared)) found = std::move(*prepared);
    prepared.reset();
    if (found) return *std::move(found);
    return OrderCursor::create(layout, spec);
  }
  // In a child of fork() the thread making `ahead` does not exist, and
  // waiting for it (get(), or the future's destructor) would never end: the
  // future is let go unwaited (a small leak, in the child only).
  void abandon_if_forked() {
    if (ahead.valid() && ahead_pid != ::getpid()) new std::future<absl::StatusOr<OrderCursor>>(std::move(ahead));
  }
  // Starts making epoch `epoch`'s order on a thread of its own, so that the
  // next start_epoch need not wait for it (a global shuffle of 2 M samples
  // took 6-30 ms here): only when its ids take at most 1/16 of the memory
  // budget, since two orders are then held at once.
  bool small_order() const { return layout.num_samples() * sizeof(uint64_t) <= options.memory_budget / 16; }
  void prepare_order(uint64_t epoch) {
    if (!small_order()) return;
    OrderSpec spec = options.order;
    spec.epoch = epoch;
    try {
      ahead = std::async(std::launch::async, [this, spec] { return OrderCursor::create(layout, spec); });
    } catch (const std::exception&) {  // no memory or thread for it: the later start makes the order itself
      return;
    }
    ahead_pid = ::getpid();
  }

  void cancel_epoch() {
    if (!running && !pipeline_thread.joinable()) return;
    if (running) DLFEED_REC(counters->end_epoch(counters->now(), /*complete=*/false));
    chain_to = 0;
    budget->raise(stop);  // under the budget's mutex: see Budget::raise
    queue.wake();
    engines.cancel_pending();
    if (pipeline_thread.joinable()) pipeline_thread.join();
    engines.resume();  // no batch of the epoch given up is left to arrive
    queue.clear();
    running = false;
    ahead_epoch.reset();
  }
  bool adopt(uint64_t e);
};

}  // namespace dlfeed
