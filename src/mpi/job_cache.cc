// SPDX-License-Identifier: Apache-2.0
// dlfeed::mpi::JobCache (job_cache.h): the nodes, the windows and the plan.
// The backend that reads through them is job_cache_backend.cc.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dlfeed/error.h"
#include "dlfeed/format/format.h"
#include "dlfeed/io/object_store.h"
#include "dlfeed/sample.h"
#include "job_cache_state.h"
#include "mpi_error.h"

namespace dlfeed::inline DLFEED_ABI::mpi {
namespace {

#define DLFEED_JC_CALL(call) DLFEED_MPI_CALL_AS("MPI job cache", call)

// Each rank's node: consecutive groups of `k` ranks, or the ranks MPI finds
// sharing memory (numbered by their lowest rank's order).
absl::StatusOr<std::vector<int>> find_nodes(MPI_Comm comm, int rank, int size, int k) {
  std::vector<int> node_of(static_cast<size_t>(size));
  if (k > 0) {
    for (int r = 0; r < size; ++r) node_of[static_cast<size_t>(r)] = r / k;
    return node_of;
  }
  MPI_Comm local = MPI_COMM_NULL;
  DLFEED_JC_CALL(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  int lowest = rank;
  const int rc = MPI_Allreduce(&rank, &lowest, 1, MPI_INT, MPI_MIN, local);
  MPI_Comm_free(&local);
  if (rc != MPI_SUCCESS) return mpi_error("MPI job cache", "MPI_Allreduce", rc);
  std::vector<int> lowest_of(static_cast<size_t>(size));
  DLFEED_JC_CALL(MPI_Allgather(&lowest, 1, MPI_INT, lowest_of.data(), 1, MPI_INT, comm));
  std::vector<int> leaders = lowest_of;
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  for (int r = 0; r < size; ++r) {
    const auto it = std::lower_bound(leaders.begin(), leaders.end(), lowest_of[static_cast<size_t>(r)]);
    node_of[static_cast<size_t>(r)] = static_cast<int>(it - leaders.begin());
  }
  return node_of;
}

// One field's files and its samples' extents, as the loader's index has them.
FieldExtents record(const SampleIndex& index) {
  FieldExtents f;
  f.files = index.files;
  f.file_begin = index.file_begin;
  f.begin.reserve(index.size() + 1);
  f.begin.push_back(0);
  SampleRef ref;
  for (uint32_t file = 0; file < index.num_files(); ++file) {
    const bool through_library = index.sources[file]->reads_through_library();
    for (uint64_t id = index.file_begin[file]; id < index.file_begin[file + 1]; ++id) {
      if (!through_library) {
        index.ref_in_file(id, file, ref);
        for (const Extent& e : ref.extents) {
          if (e.length > 0) f.extents.push_back(e);
        }
      }
      f.begin.push_back(f.extents.size());
    }
  }
  return f;
}

// A candidate: an extent of the first epoch, with the rank that reads it
// first and how often the job reads it in one whole epoch.
struct Candidate {
  uint32_t path = 0;
  uint64_t offset = 0, length = 0;
  int reader = 0;
  uint32_t reads = 0;
};

// One epoch's reads of every rank from rank position `position` on (every
// rank at the same position, as after a restore() at a step), as (sample id,
// rank), step by step and rank by rank, appended to `out`, from one global
// order (O(samples), not O(samples x ranks)). The rank's cut of the global
// order is OrderCursor's, written out for every rank (global_position is the
// calling rank's only); checked against this rank's own cursor, and made
// rank by rank with rank_order when they differ (a registered strategy with
// a cut of its own).
absl::Status epoch_reads(const FileLayout& layout, const OrderSpec& spec, uint64_t position, int rank, int size,
                         std::vector<std::pair<uint64_t, int>>& out) {
  OrderSpec mine = spec;
  mine.rank = static_cast<uint32_t>(rank);
  absl::StatusOr<OrderCursor> cursor = OrderCursor::create(layout, mine);
  if (!cursor.ok()) return cursor.status();
  const GlobalOrder& g = cursor->global_order();
  const uint64_t n = cursor->size(), gsize = g.size();
  const std::vector<uint64_t> bounds = g.rank_bounds();
  auto at = [&](int q, uint64_t i) -> std::optional<uint64_t> {
    if (gsize == 0) return std::nullopt;
    if (!bounds.empty()) {
      const uint64_t part = bounds[static_cast<size_t>(q) + 1] - bounds[static_cast<size_t>(q)];
      if (part == 0) return std::nullopt;
      return g.at(bounds[static_cast<size_t>(q)] + i % part);
    }
    const uint64_t p = spec.global_start + static_cast<uint64_t>(q) + i * static_cast<uint64_t>(size);
    return g.at(p < gsize ? p : p % gsize);
  };
  bool same = true;
  for (uint64_t i = 0; i < n && same; ++i) same = at(rank, i) == cursor->at(i);
  if (same) {
    out.reserve(out.size() + (n - std::min(n, position)) * static_cast<uint64_t>(size));
    for (uint64_t i = position; i < n; ++i) {
      for (int q = 0; q < size; ++q) {
        if (const std::optional<uint64_t> id = at(q, i)) out.emplace_back(*id, q);
      }
    }
    return absl::OkStatus();
  }
  std::vector<std::vector<uint64_t>> of_rank(static_cast<size_t>(size));
  for (int q = 0; q < size; ++q) {
    OrderSpec spec_q = spec;
    spec_q.rank = static_cast<uint32_t>(q);
    absl::StatusOr<std::vector<uint64_t>> ids = rank_order(layout, spec_q);
    if (!ids.ok()) return ids.status();
    of_rank[static_cast<size_t>(q)] = *std::move(ids);
  }
  for (uint64_t i = position;; ++i) {
    bool any = false;
    for (int q = 0; q < size; ++q) {
      const std::vector<uint64_t>& ids = of_rank[static_cast<size_t>(q)];
      if (i < ids.size()) {
        out.emplace_back(ids[i], q);
        any = true;
      }
    }
    if (!any) return absl::OkStatus();
  }
}

// Reads of sample ids, each with the rank that reads it.
using Reads = std::vector<std::pair<uint64_t, int>>;

// A run of bytes to hold: one candidate, or overlapping ones merged.
struct Run {
  uint32_t path = 0;
  uint64_t offset = 0, end = 0;
  uint32_t first = 0;  // the earliest candidate (first-read order) in the run
  bool merged = false;
  uint64_t reads = 0, candidates = 0;  // its candidates' reads in one epoch, and how many they are
};

// The candidates' runs, the most read per candidate first (an explicit
// order's repeats), else in first-read order. Overlapping extents of one
// file (the strided samples of one array, as DLIO's last-axis NPZ files hold
// them) merge into one run, held whole.
std::vector<Run> merge_runs(const std::vector<Candidate>& cand) {
  std::vector<uint32_t> by_place(cand.size());
  for (uint32_t i = 0; i < by_place.size(); ++i) by_place[i] = i;
  std::sort(by_place.begin(), by_place.end(), [&](uint32_t a, uint32_t b) {
    return std::tie(cand[a].path, cand[a].offset, cand[a].length) <
           std::tie(cand[b].path, cand[b].offset, cand[b].length);
  });
  std::vector<Run> runs;
  for (const uint32_t i : by_place) {
    const Candidate& c = cand[i];
    if (!runs.empty() && runs.back().path == c.path && c.offset < runs.back().end) {
      Run& r = runs.back();
      r.end = std::max(r.end, c.offset + c.length);
      r.first = std::min(r.first, i);
      r.merged = true;
      r.reads += c.reads;
      r.candidates += 1;
    } else {
      runs.push_back({c.path, c.offset, c.offset + c.length, i, false, c.reads, 1});
    }
  }
  // Bytes held save their reads every epoch: the runs read most per byte
  // first (a fixed set by frequency is the best fixed set; every candidate
  // read once an epoch, as in every built-in strategy, leaves first-read order).
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
    const uint64_t x = a.reads * b.candidates, y = b.reads * a.candidates;
    return x != y ? x > y : a.first < b.first;
  });
  return runs;
}

// The job's reads from where it starts (rank position `position` of `spec`'s
// epoch) to that epoch's end, step by step and rank by rank, and when that is
// not the epoch's start (a restore()), the next epoch's too, for the samples
// the job had read before it stopped. `whole_from`: where the last whole
// epoch in them begins.
absl::StatusOr<Reads> job_reads(const FileLayout& layout, const OrderSpec& spec, uint64_t position, int rank, int size,
                                size_t& whole_from) {
  Reads reads;
  DLFEED_RETURN_IF_ERROR(epoch_reads(layout, spec, position, rank, size, reads));
  whole_from = 0;
  if (position > 0 || spec.global_start > 0) {
    whole_from = reads.size();
    OrderSpec next = spec;
    next.epoch += 1;
    next.global_start = 0;
    DLFEED_RETURN_IF_ERROR(epoch_reads(layout, next, 0, rank, size, reads));
  }
  return reads;
}

}  // namespace

std::string JobCacheStats::to_json() const {
  return absl::StrFormat(
      "{\"node\": %d, \"nodes\": %d, \"bytes_read_source\": %u, \"bytes_read_local\": %u, \"bytes_read_node\": %u, "
      "\"bytes_read_peers\": %u, \"bytes_missed\": %u, \"remote_gets\": %u, \"remote_s\": %.6f, "
      "\"remote_max_s\": %.6f, \"bytes_kept\": %u, \"extents_kept\": %u, \"bytes_planned\": %u, \"capacity\": %u, "
      "\"dataset_bytes\": %u, \"held_bytes\": %u, \"node_loads\": %s}",
      node, nodes, bytes_read_source, bytes_read_local, bytes_read_node, bytes_read_peers, bytes_missed, remote_gets,
      remote_ns / 1e9, remote_ns_max / 1e9, bytes_kept, extents_kept, bytes_planned, capacity, dataset_bytes,
      held_bytes, node_loads ? "true" : "false");
}

absl::StatusOr<std::shared_ptr<JobCache>> JobCache::create(const Job& job, JobCacheOptions options) {
  int level = 0;
  DLFEED_JC_CALL(MPI_Query_thread(&level));
  if (level < MPI_THREAD_MULTIPLE) {
    return absl::FailedPreconditionError(
        "MPI job cache: MPI was initialized without MPI_THREAD_MULTIPLE (the loader's I/O threads read other "
        "ranks' windows): initialize it with MPI_Init_thread(MPI_THREAD_MULTIPLE), as Job::init does");
  }
  if (options.ranks_per_node < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MPI job cache: ranks_per_node is ", options.ranks_per_node, ", must be 0 or more"));
  }
  std::shared_ptr<JobCache> cache(new JobCache());
  auto s = std::make_shared<State>();
  s->rank = job.rank();
  s->source = std::move(options.source);
  s->size = job.size();
  DLFEED_JC_CALL(MPI_Comm_dup(job.comm(), &s->comm));
  absl::StatusOr<std::vector<int>> nodes = find_nodes(s->comm, s->rank, s->size, options.ranks_per_node);
  if (!nodes.ok()) return nodes.status();
  s->node_of = *std::move(nodes);
  const int mine = s->node_of[static_cast<size_t>(s->rank)];
  const auto on_node = static_cast<uint64_t>(std::count(s->node_of.begin(), s->node_of.end(), mine));
  uint64_t capacity = options.bytes_per_node / on_node & ~uint64_t{7};
  s->capacity_of.resize(static_cast<size_t>(s->size));
  DLFEED_JC_CALL(MPI_Allgather(&capacity, 1, MPI_UINT64_T, s->capacity_of.data(), 1, MPI_UINT64_T, s->comm));
  // A nonce of rank 0's: memory that held an earlier cache's stamps never passes for this one's.
  uint64_t nonce = mix64(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                         (static_cast<uint64_t>(::getpid()) << 32));
  DLFEED_JC_CALL(MPI_Bcast(&nonce, 1, MPI_UINT64_T, 0, s->comm));
  s->nonce = nonce;
  if (absl::Status st = make_windows(*s, capacity, options.folder); !st.ok()) {
    MPI_Comm_free(&s->comm);
    return st;
  }
  s->open.store(true, std::memory_order_release);
  cache->state_ = std::move(s);
  return cache;
}

JobCache::~JobCache() {
  // While an exception unwinds, another rank may never reach MPI_Win_free:
  // leave the window to Job's destructor, which aborts the job then.
  if (std::uncaught_exceptions() > 0) return;
  close().IgnoreError();
}

absl::Status JobCache::close() {
  if (state_ == nullptr) return absl::OkStatus();  // create() failed before the windows
  State& s = *state_;
  // Waits for every backend's window work in progress; later ones see it closed.
  std::unique_lock<std::shared_mutex> lock(s.window_mu);
  if (!s.open.exchange(false)) return absl::OkStatus();
  DLFEED_RETURN_IF_ERROR(free_windows(s));
  DLFEED_JC_CALL(MPI_Comm_free(&s.comm));
  return absl::OkStatus();
}

absl::Status JobCache::attach(LoaderOptions& options) {
  State& s = *state_;
  if (!s.open.load()) return absl::FailedPreconditionError("MPI job cache: attach after close()");
  if (s.attached.exchange(true)) {
    return absl::FailedPreconditionError("MPI job cache: already attached to a loader (one loader per cache)");
  }
  if (options.order.world_size != static_cast<uint32_t>(s.size) ||
      options.order.rank != static_cast<uint32_t>(s.rank)) {
    return absl::InvalidArgumentError(absl::StrCat("MPI job cache: the loader is rank ", options.order.rank, " of ",
                                                   options.order.world_size, ", the job's rank ", s.rank, " of ",
                                                   s.size, ": call Job::configure before attach"));
  }
  const char* refused = options.io.direct             ? "io.direct"
                        : !options.stage.dir.empty()  ? "stage.dir (staging)"
                        : options.advanced.io_factory ? "an io_factory of the caller's"
                                                      : nullptr;
  for (const std::string& p : options.paths) {
    if (refused == nullptr && is_object_url(p)) refused = "object URLs";
  }
  if (refused != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("MPI job cache: not with ", refused, " (it reads local or shared files)"));
  }
  {
    std::lock_guard<std::mutex> lock(s.fields_mu);
    s.fields.clear();
  }
  // Bytes kept from a file are served unchanged: a file rewritten in place
  // with its mtime put back is an error, not indexed again and read on
  // (new bytes from the file beside old ones from the cache).
  options.advanced.reindex_changed_files = false;
  auto inner = std::move(options.advanced.index_opener);
  options.advanced.index_opener = [state = state_, inner](const std::vector<std::string>& paths,
                                                          const FormatOptions& format) -> absl::StatusOr<SampleIndex> {
    absl::StatusOr<SampleIndex> index = inner ? inner(paths, format) : open_dataset(paths, format);
    if (index.ok()) {
      FieldExtents f = record(*index);
      std::lock_guard<std::mutex> lock(state->fields_mu);
      state->fields.push_back(std::move(f));
    }
    return index;
  };
  // The plan, from the epoch the loader starts in and where (a job resumed
  // at epoch 3, step k, fills the cache from there): every rank the same.
  auto before = std::move(options.advanced.before_first_epoch);
  options.advanced.before_first_epoch = [state = state_, before](const OrderSpec& order,
                                                                 uint64_t position) -> absl::Status {
    if (before) {
      DLFEED_RETURN_IF_ERROR(before(order, position));
    }
    std::lock_guard<std::mutex> lock(state->plan_mu);
    if (state->plan_ready.load(std::memory_order_acquire)) return absl::OkStatus();
    return state->make_plan(order, position);
  };
  options.advanced.io_factory = [state = state_](std::shared_ptr<FileTable> files,
                                                 IoOptions io) -> absl::StatusOr<std::unique_ptr<IoBackend>> {
    absl::StatusOr<std::unique_ptr<IoBackend>> inner =
        state->source ? state->source(files, io) : make_io_backend(files, io);
    if (!inner.ok()) return inner.status();
    return make_cache_backend(state, std::move(files), *std::move(inner));
  };
  // Only touching extents merge: a gap's bytes are no extent's, and a read
  // holding them would go to the files.
  options.advanced.coalesce.max_gap = 0;
  options.advanced.fadvise_willneed = false;
  return absl::OkStatus();
}

absl::Status JobCache::State::make_plan(const OrderSpec& spec, uint64_t position) {
  // Every error returns before a member changes: the next start tries again.
  std::lock_guard<std::mutex> lock(fields_mu);
  if (fields.empty())
    return absl::FailedPreconditionError("MPI job cache: no field was opened through attach()'s opener");
  FileLayout layout;
  layout.file_begin = fields[0].file_begin;
  absl::flat_hash_map<std::string, uint32_t> path_id;
  std::vector<std::string> paths;
  std::vector<std::vector<uint32_t>> field_path(fields.size());
  for (size_t k = 0; k < fields.size(); ++k) {
    if (fields[k].begin.size() != layout.num_samples() + 1) {
      return absl::InvalidArgumentError(absl::StrCat("MPI job cache: field ", k, " has ", fields[k].begin.size() - 1,
                                                     " samples, the first ", layout.num_samples()));
    }
    for (const std::string& p : fields[k].files) {
      auto [it, added] = path_id.try_emplace(p, static_cast<uint32_t>(paths.size()));
      if (added) paths.push_back(p);
      field_path[k].push_back(it->second);
    }
  }
  // Every extent the job reads, with the first rank reading it and its reads in a whole epoch.
  size_t whole_from = 0;
  DLFEED_ASSIGN_OR_RETURN(const Reads reads, job_reads(layout, spec, position, rank, size, whole_from));
  std::vector<Candidate> cand;
  absl::flat_hash_map<std::tuple<uint32_t, uint64_t, uint64_t>, uint32_t> seen;
  for (size_t i = 0; i < reads.size(); ++i) {
    const auto [id, q] = reads[i];
    const auto file = static_cast<uint32_t>(layout.file_of(id));
    for (size_t k = 0; k < fields.size(); ++k) {
      const FieldExtents& f = fields[k];
      for (uint64_t e = f.begin[id]; e < f.begin[id + 1]; ++e) {
        const Extent& x = f.extents[e];
        const uint32_t p = field_path[k][file];
        const auto [it, added] = seen.try_emplace({p, x.offset, x.length}, static_cast<uint32_t>(cand.size()));
        if (added) cand.push_back({p, x.offset, x.length, q, 0});
        if (i >= whole_from) cand[it->second].reads += 1;
      }
    }
  }
  // Slots, the runs read most per byte first, while the first reader's window has room.
  const std::vector<Run> runs = merge_runs(cand);
  std::vector<uint64_t> used(static_cast<size_t>(size), 0);
  std::vector<std::vector<HeldExtent>> per_path(paths.size());
  for (const Run& r : runs) {
    const uint64_t length = r.end - r.offset;
    dataset_bytes += length;
    const int reader = cand[r.first].reader;
    const auto q = static_cast<size_t>(reader);
    if (used[q] + slot_bytes(length) > capacity_of[q] || held_count == UINT32_MAX) continue;
    per_path[r.path].push_back({r.offset, length, used[q], reader, static_cast<uint32_t>(held_count++), r.merged});
    used[q] += slot_bytes(length);
    held_bytes += length;
    if (reader == rank) bytes_planned += length;
  }
  for (size_t p = 0; p < paths.size(); ++p) {
    std::sort(per_path[p].begin(), per_path[p].end(),
              [](const HeldExtent& a, const HeldExtent& b) { return a.offset < b.offset; });
    // In path order (the fields' files as listed: the same on every rank), not the map's.
    plan_hash = mix64(plan_hash ^ std::hash<std::string>()(paths[p]));
    for (const HeldExtent& x : per_path[p]) {
      plan_hash = mix64(plan_hash ^ x.offset);
      plan_hash = mix64(plan_hash ^ x.length ^ (x.slot << 16) ^ static_cast<uint64_t>(x.holder));
    }
    if (!per_path[p].empty()) held.emplace(paths[p], std::move(per_path[p]));
  }
  filled = std::make_unique<std::atomic<uint8_t>[]>(held_count);
  fill_started = std::make_unique<std::atomic<uint8_t>[]>(held_count);
  for (uint64_t i = 0; i < held_count; ++i) {
    filled[i].store(0, std::memory_order_relaxed);
    fill_started[i].store(0, std::memory_order_relaxed);
  }
  plan_ready.store(true, std::memory_order_release);
  return absl::OkStatus();
}

const std::vector<HeldExtent>* JobCache::State::extents_of(const std::string& path) const {
  const auto it = held.find(path);
  return it == held.end() ? nullptr : &it->second;
}

void JobCache::trace_into(counters::Counters* c) { state_->trace.store(c, std::memory_order_release); }

JobCacheStats JobCache::stats() const {
  const State& s = *state_;
  JobCacheStats out;
  out.bytes_read_source = s.bytes_read_source.load();
  out.bytes_read_local = s.bytes_read_local.load();
  out.bytes_read_node = s.bytes_read_node.load();
  out.bytes_read_peers = s.bytes_read_peers.load();
  out.remote_gets = s.remote_gets.load();
  out.remote_ns = s.remote_ns.load();
  out.remote_ns_max = s.remote_ns_max.load();
  out.bytes_missed = s.bytes_missed.load();
  out.bytes_kept = s.bytes_kept.load();
  out.extents_kept = s.extents_kept.load();
  if (s.plan_ready.load(std::memory_order_acquire)) {
    out.bytes_planned = s.bytes_planned;
    out.dataset_bytes = s.dataset_bytes;
    out.held_bytes = s.held_bytes;
  }
  out.capacity = s.capacity_of.empty() ? 0 : s.capacity_of[static_cast<size_t>(s.rank)];
  out.node = s.node_of.empty() ? 0 : s.node_of[static_cast<size_t>(s.rank)];
  out.node_loads = s.node_loads;
  out.nodes = s.node_of.empty() ? 1 : *std::max_element(s.node_of.begin(), s.node_of.end()) + 1;
  return out;
}

}  // namespace dlfeed::mpi
