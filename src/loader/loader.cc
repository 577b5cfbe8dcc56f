// SPDX-License-Identifier: Apache-2.0
// The loader's wiring: it indexes the files, builds the stages of
// src/pipeline/ and the I/O engines of src/read/engine.h, and per epoch runs
// the pipeline on a thread of its own; the consumer takes batches from the
// collator's queue (docs/architecture.md).
#include "dlfeed/loader.h"

#include "loader/loader_impl.h"

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
namespace {

using counters::Component;
using counters::Counters;
using CId = counters::Id;
using detail::name_thread_once;
using detail::now_of;

}  // namespace

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() {
  // In a child of fork(), this loader's threads (I/O engines, pipeline,
  // oneTBB's) are the parent's: joining them would wait forever. Let go of
  // it whole (a leak, in the child only).
  if (impl_ && impl_->made_in != ::getpid()) (void)impl_.release();
}

namespace {
// Sets options.memory_budget to the process's share of the machine when it
// is 0 ("auto"); returns why it is what it is.
std::string fill_memory_budget(LoaderOptions& options) {
  if (options.memory_budget != 0) return "given (memory_budget)";
  const pipeline::MemoryBudget b = pipeline::process_memory_budget();
  options.memory_budget = b.bytes;
  return b.why;
}
}  // namespace

absl::StatusOr<std::unique_ptr<Loader>> Loader::create(LoaderOptions options) {
  try {
    return create_or_throw(std::move(options));
  } catch (const std::bad_alloc& e) {
    return base::exception_status("loader: create", e);
  } catch (const std::system_error& e) {
    return base::exception_status("loader: create", e);
  }
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::create_or_throw(LoaderOptions options) {
  if (options.paths.empty()) return absl::InvalidArgumentError("loader: no paths given");
  if (options.batch_size == 0) return absl::InvalidArgumentError("loader: batch_size must be at least 1");
  DLFEED_RETURN_IF_ERROR(detail::check_limits(options));
  if (!options.stage.dir.empty())
    DLFEED_RETURN_IF_ERROR(staging::stage_dir_outside_data(options.stage.dir, options.paths));
  auto impl = std::make_unique<Impl>();
  impl->memory_budget_reason = fill_memory_budget(options);
  impl->counters = std::make_shared<Counters>(options.trace);
  Counters& cnt = *impl->counters;
  if (options.buffer_allocator) impl->pool->set_allocator(options.buffer_allocator);
  // "auto" is resolved once the loader knows whether the files are held.
  if (options.advanced.prefetch_policy) {
    impl->policy = options.advanced.prefetch_policy;
  } else if (!options.advanced.prefetch.is_auto()) {
    DLFEED_ASSIGN_OR_RETURN(impl->policy, options.advanced.prefetch.policy());
  }
  DLFEED_ASSIGN_OR_RETURN(impl->cache_stores, detail::use_object_cache(options));
  DLFEED_RETURN_IF_ERROR(
      detail::open_fields(options, cnt, impl->field_names, impl->field_specs, impl->indices, impl->field_formats));
  impl->layout = FileLayout::of(impl->indices[0]);
  // Validate the order options now rather than at the first epoch; the
  // cursor's length is the rank's samples per epoch (a global shuffle builds
  // its whole permutation here, so it is kept rather than rebuilt on demand).
  if (options.order.global_start != 0) {
    return absl::InvalidArgumentError(
        "loader: order.global_start is set per epoch by restore() (elastic restarts); leave it 0");
  }
  DLFEED_ASSIGN_OR_RETURN(OrderCursor checked, OrderCursor::create(impl->layout, options.order));
  DLFEED_ASSIGN_OR_RETURN(const bool objects, detail::use_object_store(options, impl->indices));
  impl->files = detail::make_file_table(options, impl->indices, impl->field_formats, impl->file_ids, impl->file_names);
  cnt.set_file_names(impl->file_names);
  DLFEED_ASSIGN_OR_RETURN(detail::ResidentChoice held, detail::choose_resident(options, impl->files, objects, [&] {
                            return detail::first_use_order(checked, impl->layout, impl->file_ids);
                          }));
  impl->resident = std::move(held.files);
  impl->hold = std::move(held.hold);
  impl->resident_reason = std::move(held.reason);
  // Files read by descriptor every epoch: the process's descriptor table
  // grown now, once, not in the first epoch's opens.
  if (!impl->resident && !objects) impl->files->reserve_descriptors();
  pipeline::MachineDefaults machine = pipeline::machine_defaults(pipeline::process_cores());
  machine.read_budget = pipeline::read_budget_within(machine, options.memory_budget,
                                                     detail::mean_batch_bytes(impl->indices, options.batch_size));
  // Autotuning: what is left to the machine, when the files are read.
  const bool tune = !impl->resident && (options.autotune == Mode::kOn ||
                                        (options.autotune == Mode::kAuto && pipeline::process_cores() >= 4));
  const bool tune_engines = tune && options.advanced.io_engines == 0 && !options.advanced.io_factory;
  const bool tune_threads = tune && options.threads == 0;
  if (impl->policy == nullptr && tune) {
    impl->tuned_depth = std::make_shared<pipeline::TunedDepthPolicy>(machine.read_depth, machine.read_budget);
    impl->policy = impl->tuned_depth;
  }
  if (impl->policy == nullptr) {
    DLFEED_ASSIGN_OR_RETURN(impl->policy,
                            prefetch::parse_policy(impl->resident && !detail::any_split_sources(impl->indices)
                                                       ? detail::kHeldPrefetch
                                                       : detail::read_prefetch(machine)));
  }
  DLFEED_ASSIGN_OR_RETURN(detail::UnpackChoice unpack,
                          detail::choose_unpacked(options, impl->indices, impl->file_ids, *impl->files, impl->resident,
                                                  objects, impl->counters.get()));
  impl->unpacked = std::move(unpack.files);
  impl->unpacked_reason = std::move(unpack.reason);
  DLFEED_RETURN_IF_ERROR(impl->add_engines(options, machine, tune_engines));
  // The look-ahead may block; decode needs a thread too.
  const uint32_t threads = std::max(2u, options.threads ? options.threads : machine.threads);
  impl->samples_per_epoch = checked.size();
  if (!options.stage.dir.empty()) DLFEED_RETURN_IF_ERROR(impl->setup_staging(options, checked));
  impl->options = std::move(options);
  // Epoch options.order.epoch's order, from its start: kept for that epoch
  // when small (as prepare_order), else made again then.
  if (impl->small_order()) impl->prepared = std::move(checked);
  impl->build_stages(threads);
  impl->setup_autotune(machine, tune_engines, tune_threads);
  // The first epoch's batch buffers, backed now rather than during its reads
  // (not a caller's allocator's: page-locking is theirs to schedule).
  if (!impl->options.buffer_allocator) {
    detail::prefill_batch_buffers(*impl->pool, impl->field_specs, impl->options.batch_size, impl->samples_per_epoch,
                                  *impl->policy, impl->source.rule.memory_budget);
  }
  // Last, so that the hold's reads do not slow create's own work. Without
  // a thread for it, the files are read (resident_reason says why).
  if (impl->hold) (void)impl->hold->begin(impl->counters);
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

// start_epoch(e) of the epoch the pipeline already reads (overlap_epochs),
// from its start with no restore pending: it goes on, as if started now.
bool Loader::Impl::adopt(uint64_t e) {
  if (!ahead_epoch || *ahead_epoch != e || resume) return false;
  ahead_epoch.reset();
  {
    std::lock_guard<std::mutex> lock(order_mu);
    base_cursor = *std::move(chained_base);
    chained_base.reset();
    prepare_order(e + 1);
  }
  epoch = e;
  start_position = 0;
  delivered_samples = 0;
  finished = false;
  running = true;
  DLFEED_REC(counters->begin_epoch(e, counters->now()));
  chain_to = e + 1;
  return true;
}

void Loader::set_overlap_epochs(bool on) {
  impl_->overlap = on;
  if (!on) impl_->chain_to = 0;
}

absl::Status Loader::start_epoch(uint64_t epoch) {
  Impl& m = *impl_;
  DLFEED_RETURN_IF_ERROR(detail::made_here(m.made_in));
  if (m.adopt(epoch)) return absl::OkStatus();
  m.cancel_epoch();
  DLFEED_RETURN_IF_ERROR(base::fork_check());
  // Staged copies first: a file now read from its copy is reopened there, so
  // its source may change (or be scrambled) without harm.
  m.apply_staging();
  // A file rewritten in place under a descriptor held since the last epoch
  // (reopens are checked as they open): an error naming it, not new bytes
  // decoded with the old index.
  // A file whose change time alone is new (chmod, or bytes rewritten with
  // the mtime set back) is indexed again: it reads on only if its samples
  // are where they were.
  // A held file's copy is then old: it is read from the file from now on.
  std::function<absl::Status(uint32_t)> still;
  if (m.options.advanced.reindex_changed_files)
    still = detail::still_indexed_by_id(m.indices, m.file_ids, m.field_formats);
  if (still && m.resident) {
    still = [still, held = m.resident.get()](uint32_t id) {
      absl::Status s = still(id);
      if (s.ok()) held->drop(id);
      return s;
    };
  }
  DLFEED_RETURN_IF_ERROR(m.files->check_open_files(still));
  if (m.resident && m.resident->files_dropped() != m.planned_drops) m.plan_for_held();  // no strided batch of it
  OrderSpec spec = m.options.order;
  spec.epoch = epoch;
  const bool resuming = m.resume && m.resume->epoch == epoch;
  if (resuming) spec.global_start = m.resume->global_start;
  // Another epoch started after a restore(): the restored one is given up, so
  // a later start of its epoch reads it whole (not from the state's position).
  if (m.resume && !resuming) m.resume.reset();
  std::unique_lock<std::mutex> order_lock(m.order_mu);  // no pipeline thread runs: for form
  DLFEED_ASSIGN_OR_RETURN(OrderCursor cursor, m.take_order(spec));
  order_lock.unlock();
  const uint64_t start = resuming ? m.resume->position : 0;
  m.base_cursor = cursor;
  if (resuming) DLFEED_RETURN_IF_ERROR(cursor.seek(start));
  // Once the start is known good: nothing after it fails.
  if (!m.first_epoch_called && m.options.advanced.before_first_epoch) {
    DLFEED_RETURN_IF_ERROR(m.options.advanced.before_first_epoch(spec, start));
  }
  m.first_epoch_called = true;
  if (m.unpacked) m.unpacked->reset();  // each epoch reads every unpacked array once (no decode runs now)
  if (m.resident && !m.planned_held && m.resident->complete()) m.plan_for_held();
  m.epoch = epoch;
  m.start_position = start;
  m.delivered_samples = 0;
  m.stop = false;
  m.failed = false;
  m.finished = false;
  if (m.tuner) m.tuner->restart();
  const uint64_t first_batch = start / m.options.batch_size;
  // The pipeline's thread last: a start that finds no memory or thread for
  // it is an error that leaves the loader not running, its restore pending
  // (not running with nothing to feed next()). An epoch begun in the
  // counters is closed, incomplete, by the next start.
  try {
    DLFEED_REC(m.counters->begin_epoch(epoch, m.counters->now()));
    m.prepare_order(epoch + 1);  // before the pipeline thread may take it (chain_order)
    m.chain_to = epoch + 1;
    m.pipeline_thread = std::thread(
        [&m, cursor, epoch, first_batch]() mutable { m.run_epochs(std::move(cursor), epoch, first_batch); });
  } catch (const std::exception& e) {
    m.chain_to = 0;
    return base::exception_status(absl::StrCat("loader: start_epoch(", epoch, "): the pipeline's thread"), e);
  }
  if (resuming) m.resume.reset();
  m.running = true;
  detail::name_thread(m.pipeline_thread, "dlfeed-pipeline");
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Batch>> Loader::next() {
  Impl& m = *impl_;
  DLFEED_RETURN_IF_ERROR(detail::made_here(m.made_in));
  if (!m.running) {
    if (m.finished) return std::shared_ptr<const Batch>();
    return absl::FailedPreconditionError("loader: call start_epoch() before next()");
  }
  Counters& c = *m.counters;
  [[maybe_unused]] const uint64_t t0 = now_of(c);
  DLFEED_REC({
    name_thread_once(c, "consumer");
    c.step_boundary(t0);
  });
  // The consumer waits: stall time, and the I/O busy meanwhile is exposed.
  counters::Span stall(&c, counters::kStallSpan, t0);
  const uint64_t w0 = m.tuner ? c.now() : 0;
  batch::Delivery d = m.queue.pop(*m.budget);
  if (m.tuner && d.batch) {
    const uint64_t w1 = c.now();
    m.tuner->on_batch(w1, d.batch->size(), w1 - w0, d.ticket ? d.ticket->bytes : 0);
  }
  if (d.ticket) {
    d.ticket->handed_over();
    d.ticket.reset();
  }
  stall.args(m.epoch, m.batches.load());
  [[maybe_unused]] const uint64_t t1 = stall.end();
  if (d.end) {
    if (d.chained) {
      m.ahead_epoch = m.epoch + 1;  // the pipeline thread goes on with it
    } else if (m.pipeline_thread.joinable()) {
      m.pipeline_thread.join();
    }
    m.running = false;
    m.finished = true;
    DLFEED_REC(c.end_epoch(t1, /*complete=*/true));
    return std::shared_ptr<const Batch>();
  }
  if (!d.error.ok()) {
    m.cancel_epoch();
    m.finished = true;
    return d.error;
  }
  m.delivered_samples += d.batch->size();
  m.batches += 1;
  m.samples += d.batch->size();
  m.bytes_delivered += d.batch->nbytes();
  DLFEED_REC({
    c.add(CId::kBatches, 1);
    c.add(CId::kSamples, d.batch->size());
    c.add(CId::kBytesDelivered, d.batch->nbytes());
    c.on_batch_delivered();
  });
  return d.batch;
}

EpochRange Loader::epoch(uint64_t e) {
  throw_if_error(start_epoch(e));
  return EpochRange(this);
}

EpochRange::iterator::iterator(Loader* loader) : loader_(loader) { ++*this; }

EpochRange::iterator& EpochRange::iterator::operator++() {
  current_ = value_or_throw(loader_->next());
  return *this;
}

absl::Status Loader::start_epoch_at(uint64_t epoch, uint64_t position) {
  Impl& m = *impl_;
  m.cancel_epoch();
  m.resume = detail::ResumePoint{epoch, 0, position};
  return start_epoch(epoch);
}

std::string Loader::state() const {
  const Impl& m = *impl_;
  if (m.resume) {
    // Restored, its epoch not started yet: where it resumes, not where the
    // loader was before (a checkpoint taken now must resume there too).
    OrderSpec spec = m.options.order;
    spec.epoch = m.resume->epoch;
    spec.global_start = m.resume->global_start;
    if (absl::StatusOr<OrderCursor> c = OrderCursor::create(m.layout, spec); c.ok()) {
      return detail::loader_state_at(m.layout, spec, &*c, m.resume->position);
    }
  }
  return detail::loader_state_at(m.layout, m.options.order, m.base_cursor ? &*m.base_cursor : nullptr,
                                 m.start_position + m.delivered_samples);
}

absl::Status Loader::restore(absl::string_view state) {
  Impl& m = *impl_;
  DLFEED_ASSIGN_OR_RETURN(detail::ResumePoint r, detail::resume_point(state, m.layout, m.options.order));
  m.cancel_epoch();
  m.resume = r;
  return absl::OkStatus();
}

uint64_t Loader::num_samples() const { return impl_->indices[0].size(); }

uint64_t Loader::samples_per_epoch() const { return impl_->samples_per_epoch; }

uint64_t Loader::batches_per_epoch() const {
  const uint64_t n = samples_per_epoch(), b = impl_->options.batch_size;
  return impl_->options.drop_last_batch ? n / b : (n + b - 1) / b;
}

uint64_t Loader::batches_left() const {
  const Impl& m = *impl_;
  if (!m.base_cursor) return 0;
  const uint64_t n = m.base_cursor->size(), done = m.start_position + m.delivered_samples;
  const uint64_t left = n > done ? n - done : 0, b = m.options.batch_size;
  return m.options.drop_last_batch ? left / b : (left + b - 1) / b;
}

const SampleIndex& Loader::index(size_t field) const { return impl_->indices.at(field); }
const std::vector<std::string>& Loader::field_names() const { return impl_->field_names; }
const std::vector<FieldSpec>& Loader::field_specs() const { return impl_->field_specs; }
const LoaderOptions& Loader::options() const { return impl_->options; }

counters::Counters& Loader::counters() { return *impl_->counters; }
const counters::Counters& Loader::counters() const { return *impl_->counters; }
std::shared_ptr<counters::Counters> Loader::counters_ptr() const { return impl_->counters; }
counters::Snapshot Loader::counters_snapshot() const { return impl_->counters->snapshot(); }
std::string Loader::counters_json() const { return impl_->counters->snapshot().to_json(); }
absl::Status Loader::write_trace(const std::string& path, counters::TraceFormat format) const {
  return impl_->counters->write_trace(path, format);
}

LoaderStats Loader::stats() const {
  const Impl& m = *impl_;
  LoaderStats s;
  s.batches = m.batches;
  s.samples = m.samples;
  s.bytes_delivered = m.bytes_delivered;
  const IoStats io = m.engines.stats();
  s.bytes_read = (io.device_bytes ? io.device_bytes : io.bytes) + m.resident_copied.load(std::memory_order_relaxed) +
                 (m.unpacked ? m.unpacked->bytes_read() : 0);
  s.planned_reads = m.planner->planned_reads();
  s.io_operations = io.completions + m.resident_copies.load(std::memory_order_relaxed);
  s.extents = m.planner->extents();
  s.peak_in_flight_bytes = m.budget->peak();
  s.pool_allocations = m.pool->allocations();
  s.pool_reuses = m.pool->reuses();
  {
    std::lock_guard<std::mutex> lock(m.budget->mu);
    s.lookahead_batches = m.budget->pipeline;
    s.held_batches = m.budget->batches - m.budget->pipeline;
  }
  s.io_backend = m.engines.backend().name();
  s.io_fallback_reason = m.engines.backend().fallback_reason();
  s.io_engines = m.engines.active();
  s.io_engines_made = static_cast<uint32_t>(m.engines.size());
  s.autotune = m.tuner != nullptr;
  s.autotune_changes = m.tuner ? m.tuner->changes() : 0;
  s.threads = m.runner->width();
  s.decode_peak = m.runner->peak_decoding();
  s.cores = pipeline::process_cores();
  s.batches_spread = m.engines.batches_spread();
  s.split_records = m.decoder ? m.decoder->split_records() : 0;
  s.split_records_whole = m.decoder ? m.decoder->split_records_whole() : 0;
  if (m.stager) s.stage = m.stager->stats();
  s.files_read_staged = m.files_staged_now;
  s.files = m.file_names.size();
  s.resident_bytes = m.resident ? m.resident->bytes() : 0;
  s.resident_reason = detail::resident_reason_now(m.resident_reason, m.resident.get());
  s.memory_budget = m.options.memory_budget;
  s.memory_budget_reason = m.memory_budget_reason;
  s.prefetch = m.policy->name();
  s.route = m.planner != nullptr && m.planner->copies_only() ? "gather" : "pipeline";
  s.unpacked_bytes = m.unpacked ? m.unpacked->reserved_bytes() : 0;
  s.unpacked_reason = m.unpacked_reason;
  return s;
}

}  // namespace dlfeed
