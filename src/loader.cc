#include "dlfeed/loader.h"

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_pipeline.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <optional>
#include <sys/stat.h>
#include <thread>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/error.h"
#include "dlfeed/io/file_table.h"
#include "dlfeed/prefetch/policy.h"
#include "thread_name.h"

namespace dlfeed {
namespace {

// oneTBB's own synchronization is inside libtbb, which ThreadSanitizer does
// not see; in TSan builds every task body passes through this mutex at its
// start and end (and the threads that spawn and join the tasks do too), so the
// happens-before edges TBB provides are visible to the checker. Elsewhere it
// compiles to nothing.
#if defined(__SANITIZE_THREAD__)
std::mutex& tsan_handshake_mutex() {
  static std::mutex mu;
  return mu;
}
inline void tsan_handshake() { std::lock_guard<std::mutex> lock(tsan_handshake_mutex()); }
#else
inline void tsan_handshake() {}
#endif

// Counters (docs/counters.md): with -DDLFEED_COUNTERS=OFF every recording
// statement, clock reads included, compiles to nothing.
using counters::Component;
using counters::Counters;
using CId = counters::Id;
#if DLFEED_COUNTERS_ENABLED
#define DLFEED_REC(...) \
  do {                  \
    __VA_ARGS__;        \
  } while (0)
inline uint64_t now_of(const Counters& c) { return c.now(); }
#else
#define DLFEED_REC(...) \
  do {                  \
  } while (0)
inline uint64_t now_of(const Counters&) { return 0; }
#endif

// Names the calling thread in traces, once per thread.
inline void name_thread_once(const Counters& c, const char* name) {
  if constexpr (counters::kEnabled) {
    thread_local bool named = false;
    if (!named && c.tracing()) {
      named = true;
      Counters::set_thread_name(name);
    }
  }
}

constexpr char kStateMagic[] = "dlfL";
// Raw samples at least this big are read straight into the batch buffer.
constexpr uint64_t kDirectMinBytes = 64 * 1024;
constexpr uint8_t kStateVersion = 1;

// Memory admission shared by the planner and every batch handed out (a batch
// may outlive its loader, so this lives in a shared_ptr).
struct Budget {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t batches = 0;   // admitted and not yet dropped by the consumer
  uint64_t bytes = 0;     // ... and their bytes: what the memory budget bounds
  uint64_t pipeline = 0;  // admitted and not yet handed to the consumer: the look-ahead
  bool consumer_waiting = false;
  uint64_t peak_bytes = 0;

  void release(uint64_t n, bool in_pipeline) {
    {
      std::lock_guard<std::mutex> lock(mu);
      batches -= 1;
      bytes -= n;
      if (in_pipeline) pipeline -= 1;
    }
    cv.notify_all();
  }
  void set_consumer_waiting(bool waiting) {
    {
      std::lock_guard<std::mutex> lock(mu);
      consumer_waiting = waiting;
    }
    if (waiting) cv.notify_all();
  }
};

// One batch's admission: released when the last holder (the work in the
// pipeline, then the Batch handed to the consumer) lets go.
struct Ticket {
  std::shared_ptr<Budget> budget;
  uint64_t bytes = 0;
  bool in_pipeline = false;  // admitted and not yet handed to the consumer
  // The consumer took the batch: it no longer counts as look-ahead (its bytes
  // still count against the memory budget until it is dropped).
  void handed_over() {
    if (!budget || !in_pipeline) return;
    {
      std::lock_guard<std::mutex> lock(budget->mu);
      budget->pipeline -= 1;
      in_pipeline = false;
    }
    budget->cv.notify_all();
  }
  ~Ticket() {
    if (budget) budget->release(bytes, in_pipeline);
  }
};

// One batch in flight through the pipeline.
struct Work {
  uint64_t epoch = 0;
  uint64_t index = 0;
  uint64_t position = 0;
  std::vector<uint64_t> ids;
  prefetch::ReadPlan plan;
  // piece_begin[i * fields + f] is the first plan piece of sample i, field f.
  std::vector<uint32_t> piece_begin;
  ByteBuffer raw;
  // Fields whose sample sizes are known before decode get their batch buffer
  // at admission; samples whose decode is the identity (raw contiguous bytes)
  // are read straight into it (direct[i * fields + f]) and skip decode.
  struct DirectRead {
    uint32_t file;
    uint64_t offset, length;
    uint32_t field;
    uint64_t dest;  // offset in out[field]
  };
  std::vector<uint8_t> known;                    // per field
  std::vector<std::vector<uint64_t>> out_offsets;  // per known field: n + 1
  std::vector<uint64_t> unknown_bytes;             // per other field: the bytes read for it (a size hint)
  std::vector<uint8_t> direct;                   // per (sample, field)
  std::vector<DirectRead> direct_reads;
  std::vector<ByteBuffer> out;                   // per field (known ones allocated)
  std::shared_ptr<Ticket> ticket;
  uint64_t submit_ns = 0;  // when the engine handed the reads to the backend

  // Read completion (set by the I/O engine).
  std::mutex mu;
  std::condition_variable cv;
  size_t reads_left = 0;
  bool reads_done = false;
  absl::Status read_status;

  // Output.
  std::shared_ptr<Batch> batch;
  absl::Status error;

  // The pipeline passes plain Work* tokens (stored in place by oneTBB); this
  // keeps the work alive from planning until the sink lets go.
  std::shared_ptr<Work> self;

  void finish_read(const absl::Status& s) {
    bool done = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!s.ok() && read_status.ok()) read_status = s;
      if (reads_left > 0) --reads_left;
      if (reads_left == 0 && !reads_done) reads_done = done = true;
    }
    if (done) cv.notify_all();
  }
  void fail_all(const absl::Status& s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (read_status.ok()) read_status = s;
      reads_left = 0;
      reads_done = true;
    }
    cv.notify_all();
  }
  absl::Status wait_reads() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reads_done; });
    return read_status;
  }
};

// Owns the I/O backend; one thread submits planned reads and reaps
// completions, so the ring is long-lived and submission is batched.
class IoEngine {
 public:
  // Reads longer than `max_piece` are issued as pieces of that size (in file
  // order), so the backend can keep several in flight (0: never split).
  IoEngine(std::unique_ptr<IoBackend> backend, Counters* counters, uint64_t max_piece, uint32_t number)
      : backend_(std::move(backend)), counters_(counters), max_piece_(max_piece), number_(number) {
    thread_ = std::thread([this] { loop(); });
    detail::name_thread(thread_, number_ == 0 ? "dlfeed-io" : absl::StrCat("dlfeed-io", number_).c_str());
  }
  ~IoEngine() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void submit(std::shared_ptr<Work> w) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(std::move(w));
    }
    cv_.notify_all();
  }
  // Works not yet handed to the backend complete at once as cancelled;
  // reads already in the backend finish normally.
  void cancel_pending() {
    std::deque<std::shared_ptr<Work>> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      drop.swap(pending_);
    }
    for (auto& w : drop) w->fail_all(absl::CancelledError("epoch cancelled"));
  }
  const IoBackend& backend() const { return *backend_; }
  // Per FileTable id: reads of that file go to a staged copy (counted as
  // bytes_read_staged). Set before the first submit().
  void set_staged_flags(const std::atomic<uint8_t>* flags, size_t n) {
    staged_ = flags;
    staged_n_ = n;
  }
  IoStats stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }
  // The share of its last measuring window (at least kBusyWindowNs) the
  // engine's thread spent on a CPU, in permille. Near 1000 when its reads hit
  // the page cache (the kernel copies on the thread that submits, io_uring
  // included) and the engine is the pipeline's bottleneck; low when its reads
  // wait on the device or it waits for work.
  uint32_t busy_permille() const { return busy_.load(std::memory_order_relaxed); }
  // Of the reads the backend issued in that window, the share (permille)
  // complete when their submit call returned: page-cache hits (IoStats::
  // completed_at_submit). 0 for a window without reads.
  uint32_t hits_permille() const { return hits_.load(std::memory_order_relaxed); }

 private:
  static constexpr uint64_t kBusyWindowNs = 5'000'000;

  static uint64_t thread_cpu_ns() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
  }
  static uint64_t wall_ns() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }
  void measure_busy() {
    const uint64_t wall = wall_ns();
    if (wall - window_wall_ < kBusyWindowNs) return;
    const uint64_t cpu = thread_cpu_ns();
    const uint64_t permille = (cpu - window_cpu_) * 1000 / (wall - window_wall_);
    busy_.store(static_cast<uint32_t>(std::min<uint64_t>(permille, 1000)), std::memory_order_relaxed);
    const IoStats& now = stats_;  // written by this thread only
    const uint64_t reads = now.reads - window_reads_;
    const uint64_t hits = now.completed_at_submit - window_hits_;
    hits_.store(reads ? static_cast<uint32_t>(std::min<uint64_t>(hits * 1000 / reads, 1000)) : 0,
                std::memory_order_relaxed);
    window_wall_ = wall;
    window_cpu_ = cpu;
    window_reads_ = now.reads;
    window_hits_ = now.completed_at_submit;
  }

  // user_data: the Work pointer, with the read's index in the top 16 bits
  // (x86-64 and AArch64 user pointers fit in 48 bits) so a completion names
  // its read for the trace (planned reads, then direct reads); 0xFFFF: not traced.
  static constexpr unsigned kIndexShift = 48;
  static constexpr uint64_t kPtrMask = (uint64_t{1} << kIndexShift) - 1;
  static Work* work_of(uint64_t user_data) { return reinterpret_cast<Work*>(user_data & kPtrMask); }

  // One read as requests of at most max_piece_ bytes; the first carries
  // `user_data` (it stands for the read in the counters' trace), the rest `rest`.
  void add_pieces(std::vector<ReadRequest>& reqs, uint32_t file, uint64_t offset, uint64_t length, std::byte* dest,
                  uint64_t user_data, uint64_t rest) const {
    const uint64_t piece = max_piece_ ? max_piece_ : length;
    uint64_t at = 0;
    do {
      const uint64_t n = std::min(piece, length - at);
      reqs.push_back({file, offset + at, n, dest + at, at == 0 ? user_data : rest});
      at += n;
    } while (at < length);
  }

  void loop() {
    name_thread_once(*counters_, number_ == 0 ? "dlfeed io engine" : "dlfeed io engine (more)");
    window_wall_ = wall_ns();
    window_cpu_ = thread_cpu_ns();
    std::vector<ReadRequest> reqs;
    std::vector<ReadCompletion> done;
    [[maybe_unused]] uint64_t sampled = 0;
    while (true) {
      std::deque<std::shared_ptr<Work>> take;
      bool stopping = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (active_.empty()) {
          cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        }
        stopping = stop_;
        take.swap(pending_);
      }
      measure_busy();
      if (stopping && active_.empty()) {
        for (auto& w : take) w->fail_all(absl::CancelledError("loader destroyed"));
        break;
      }
      if (stopping) {
        for (auto& w : take) w->fail_all(absl::CancelledError("loader destroyed"));
        take.clear();
      }
      for (auto& w : take) {
        if (w->plan.reads.empty() && w->direct_reads.empty()) {
          w->fail_all(absl::OkStatus());
          continue;
        }
        reqs.clear();
        uint64_t k = 0;
        const uint64_t untagged = reinterpret_cast<uint64_t>(w.get()) | (uint64_t{0xFFFF} << kIndexShift);
        for (const prefetch::PlannedRead& r : w->plan.reads) {
          const uint64_t tag = std::min<uint64_t>(k++, 0xFFFF) << kIndexShift;
          add_pieces(reqs, r.file, r.offset, r.length, w->raw.data() + r.buffer_offset,
                     reinterpret_cast<uint64_t>(w.get()) | tag, untagged);
        }
        for (const Work::DirectRead& d : w->direct_reads) {
          const uint64_t tag = std::min<uint64_t>(k++, 0xFFFF) << kIndexShift;
          add_pieces(reqs, d.file, d.offset, d.length, w->out[d.field].data() + d.dest,
                     reinterpret_cast<uint64_t>(w.get()) | tag, untagged);
        }
        {
          std::lock_guard<std::mutex> lock(w->mu);
          w->reads_left = reqs.size();
        }
        DLFEED_REC(w->submit_ns = now_of(*counters_));
        absl::Status st = backend_->submit(reqs);
        if (!st.ok()) {
          w->fail_all(st);
          continue;
        }
        DLFEED_REC({
          counters_->interval_begin(Component::kIo, w->submit_ns);
          if (staged_ != nullptr) {
            uint64_t staged_bytes = 0;
            for (const ReadRequest& q : reqs) {
              if (q.file < staged_n_ && staged_[q.file].load(std::memory_order_relaxed)) staged_bytes += q.length;
            }
            if (staged_bytes) counters_->add(CId::kBytesReadStaged, staged_bytes);
          }
        });
        active_[w.get()] = {w, reqs.size()};
      }
      if (backend_->in_flight() > 0) {
        done.clear();
        backend_->reap(done, 1, std::chrono::milliseconds(1));
        [[maybe_unused]] const uint64_t t_reap = now_of(*counters_);
        [[maybe_unused]] const bool tracing = counters_->tracing();
        for (const ReadCompletion& c : done) {
          Work* w = work_of(c.user_data);
          auto it = active_.find(w);
          if (it == active_.end()) continue;
          DLFEED_REC({
            const uint64_t lat = t_reap > w->submit_ns ? t_reap - w->submit_ns : 0;
            counters_->sample(CId::kIoLatency, lat);
            counters_->add(CId::kReadRequests, 1);
            if (c.status.ok()) {
              counters_->add(CId::kBytesRead, c.bytes);
            } else {
              counters_->add(CId::kReadErrors, 1);
            }
            const uint64_t k = c.user_data >> kIndexShift;
            const size_t planned = w->plan.reads.size();
            if (tracing && k < 0xFFFF && k < planned + w->direct_reads.size() &&
                sampled++ % counters_->io_sample_every() == 0) {
              if (k < planned) {
                const prefetch::PlannedRead& r = w->plan.reads[k];
                counters_->trace("read", "io", w->submit_ns, lat, r.file, r.offset, r.length);
              } else {
                const Work::DirectRead& d = w->direct_reads[k - planned];
                counters_->trace("read", "io", w->submit_ns, lat, d.file, d.offset, d.length);
              }
            }
          });
          w->finish_read(c.status);
          if (--it->second.left == 0) {
            active_.erase(it);
            DLFEED_REC(counters_->interval_end(Component::kIo, t_reap));
          }
        }
        std::lock_guard<std::mutex> lock(stats_mu_);
        stats_ = backend_->stats();
      }
    }
    // Stopping: every read handed to the backend has completed (active_ is empty).
  }

  struct Active {
    std::shared_ptr<Work> work;
    size_t left = 0;
  };
  std::unique_ptr<IoBackend> backend_;
  Counters* counters_;  // outlives the engine (Loader::Impl)
  uint64_t max_piece_;
  uint32_t number_;  // 0: the first engine, which is always used
  const std::atomic<uint8_t>* staged_ = nullptr;
  size_t staged_n_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Work>> pending_;
  bool stop_ = false;
  std::unordered_map<Work*, Active> active_;  // engine thread only
  mutable std::mutex stats_mu_;
  IoStats stats_;
  std::atomic<uint32_t> busy_{0}, hits_{0};
  uint64_t window_wall_ = 0, window_cpu_ = 0, window_reads_ = 0, window_hits_ = 0;  // engine thread only
  std::thread thread_;
};

IoStats& operator+=(IoStats& a, const IoStats& b) {
  a.requests += b.requests;
  a.completions += b.completions;
  a.errors += b.errors;
  a.bytes += b.bytes;
  a.device_bytes += b.device_bytes;
  a.reads += b.reads;
  a.retries += b.retries;
  a.short_reads += b.short_reads;
  a.eagain += b.eagain;
  a.eintr += b.eintr;
  a.submit_calls += b.submit_calls;
  a.peak_bytes_in_kernel = std::max(a.peak_bytes_in_kernel, b.peak_bytes_in_kernel);  // per ring
  a.completed_at_submit += b.completed_at_submit;
  return a;
}

// What the pipeline hands the consumer, in order.
struct Delivery {
  std::shared_ptr<const Batch> batch;
  absl::Status error;
  bool end = false;
  std::shared_ptr<Ticket> ticket;  // the batch's admission (to mark it handed over)
};

}  // namespace

struct Loader::Impl {
  // First member: outlives the engine and every pipeline thread.
  std::shared_ptr<Counters> counters;
  LoaderOptions options;
  std::vector<std::string> field_names;
  std::vector<FieldSpec> field_specs;
  std::vector<SampleIndex> indices;              // one per field
  std::vector<std::vector<uint32_t>> file_ids;   // [field][file] -> FileTable id
  FileLayout layout;
  uint64_t samples_per_epoch = 0;  // this rank's, from the order checked at create
  std::shared_ptr<FileTable> files;
  std::vector<std::string> file_names;  // per FileTable id: the source path
  // engines[0] takes every batch until it is busy on the CPU most of the time
  // with reads that are page-cache hits; then batches go round all engines
  // (engine_for; LoaderOptions::io_engines).
  std::vector<std::unique_ptr<IoEngine>> engines;
  bool spreading = false;  // planner thread only
  std::atomic<uint64_t> batches_spread{0};
  std::shared_ptr<const prefetch::PrefetchPolicy> policy;  // planner thread only
  std::shared_ptr<BufferPool> pool = std::make_shared<BufferPool>(256);
  std::shared_ptr<Budget> budget = std::make_shared<Budget>();
  uint32_t threads = 2;
  std::unique_ptr<tbb::task_arena> arena;

  // Per-epoch state.
  std::optional<OrderCursor> base_cursor;  // at the epoch's start
  uint64_t epoch = 0;
  uint64_t start_position = 0;
  uint64_t delivered_samples = 0;
  bool running = false;
  bool finished = false;
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};
  std::thread pipeline_thread;
  std::mutex q_mu;
  std::condition_variable q_cv;
  std::deque<Delivery> ready;

  // Pending restore(): the epoch, where its cut starts, the rank position.
  struct Resume {
    uint64_t epoch = 0, global_start = 0, position = 0;
  };
  std::optional<Resume> resume;

  // Staging (options.stage): the stager copies this rank's files; sources[id]
  // is FileTable id's source, stage_index[id] its index in the stager (or -1).
  std::unique_ptr<stage::Stager> stager;
  std::vector<stage::Source> sources;
  std::vector<int64_t> stage_index;
  std::unique_ptr<std::atomic<uint8_t>[]> staged;  // per FileTable id: redirected to a copy
  bool stage_partitioned = false;  // the rank reads only its own files
  bool stage_direct = true;        // copies in stage.dir open with O_DIRECT
  std::atomic<uint64_t> files_staged_now{0};  // redirected to a copy so far (stats() may read it anywhere)

  // plan_batch's scratch (the planner is one thread).
  std::vector<uint8_t> direct_scratch_;
  std::vector<std::pair<uint64_t, uint64_t>> small_scratch_;

  // Totals.
  std::atomic<uint64_t> batches{0}, samples{0}, bytes_delivered{0}, extents{0}, planned_reads{0};

  ~Impl() {
    cancel_epoch();
    engines.clear();  // each drains its reads in flight and joins its thread
    stager.reset();  // stops copying, joins its thread (its observer uses counters)
  }

  absl::Status setup_staging(const LoaderOptions& o, const OrderCursor& checked) {
    sources.resize(file_names.size());
    for (uint32_t id = 0; id < file_names.size(); ++id) {
      struct stat st {};
      if (::stat(file_names[id].c_str(), &st) != 0) return io_error(file_names[id], "stat for staging", errno);
      sources[id] = {file_names[id], static_cast<uint64_t>(st.st_size)};
    }
    stage_partitioned = !checked.global_order().rank_bounds().empty();
    stage_index.assign(sources.size(), -1);
    std::vector<stage::Source> mine;
    std::vector<uint32_t> mine_ids;
    for (uint64_t f : stage::owned_files(layout, checked)) {
      for (const auto& ids : file_ids) {
        const uint32_t id = ids[f];
        if (stage_index[id] >= 0) continue;
        stage_index[id] = static_cast<int64_t>(mine.size());
        mine.push_back(sources[id]);
        mine_ids.push_back(id);
      }
    }
    staged.reset(new std::atomic<uint8_t>[sources.size()]);
    for (size_t i = 0; i < sources.size(); ++i) staged[i].store(0, std::memory_order_relaxed);
    stage::Stager::Observer obs;
    Counters* c = counters.get();
    auto t0 = std::make_shared<uint64_t>(0);
    obs.on_bytes = [c](uint64_t n) { DLFEED_REC(c->add(CId::kStageCopied, n)); };
    obs.on_file_begin = [c, t0](size_t) {
      name_thread_once(*c, "dlfeed stage");
      *t0 = now_of(*c);
    };
    obs.on_file_end = [c, t0, mine_ids, this](size_t i, stage::FileStatus st) {
      DLFEED_REC({
        const uint64_t t1 = c->now();
        if (c->tracing() && st == stage::FileStatus::kStaged) {
          c->trace("stage", "stage", *t0, t1 - *t0, mine_ids[i], sources[mine_ids[i]].size);
        }
      });
    };
    DLFEED_ASSIGN_OR_RETURN(stager, stage::Stager::create(o.stage, std::move(mine), std::move(obs)));
    stage_direct = !o.io.direct || stage::Stager::supports_direct(o.stage.dir);
    for (auto& e : engines) e->set_staged_flags(staged.get(), sources.size());
    return absl::OkStatus();
  }

  // Between epochs (no reads in flight): every file whose copy is complete
  // is read from the copy from now on.
  void apply_staging() {
    if (!stager) return;
    for (uint32_t id = 0; id < sources.size(); ++id) {
      if (staged[id].load(std::memory_order_relaxed)) continue;
      std::string path;
      if (stage_index[id] >= 0) {
        path = stager->staged_path(static_cast<size_t>(stage_index[id]));
      } else if (!stage_partitioned) {
        path = stage::Stager::find_copy(options.stage.dir, sources[id]);  // another rank's copy
      }
      if (path.empty()) continue;
      if (!files->redirect(id, path, stage_direct ? std::nullopt : std::optional<bool>(false)).ok()) continue;
      staged[id].store(1, std::memory_order_relaxed);
      ++files_staged_now;
    }
    stager->start();  // the first epoch starts the copying (after the look, so it reads no copy of its own)
  }

  void cancel_epoch() {
    if (!running) return;
    DLFEED_REC(counters->end_epoch(counters->now(), /*complete=*/false));
    {
      // Under the budget's mutex: the planner tests `stop` under it before it
      // waits, so the stop cannot fall between its test and its wait (where
      // the notification would be lost and the join below wait for ever).
      std::lock_guard<std::mutex> lock(budget->mu);
      stop = true;
    }
    budget->cv.notify_all();
    q_cv.notify_all();
    for (auto& e : engines) e->cancel_pending();
    if (pipeline_thread.joinable()) pipeline_thread.join();
    std::lock_guard<std::mutex> lock(q_mu);
    ready.clear();
    running = false;
  }

  void push(Delivery d) {
    {
      std::lock_guard<std::mutex> lock(q_mu);
      ready.push_back(std::move(d));
    }
    q_cv.notify_all();
  }

  // Plan the next batch: its ids and coalesced reads (nothing read yet).
  std::shared_ptr<Work> plan_batch(OrderCursor& cursor, uint64_t& batch_index) {
    if (stop || failed || cursor.done()) return nullptr;
    [[maybe_unused]] const uint64_t t0 = now_of(*counters);
    const uint32_t B = options.batch_size;
    auto w = std::make_shared<Work>();
    w->epoch = epoch;
    w->index = batch_index;
    w->position = cursor.position();
    w->ids.resize(B);
    const size_t n = cursor.next(std::span<uint64_t>(w->ids));
    w->ids.resize(n);
    if (n == 0 || (n < B && options.drop_last_batch)) return nullptr;
    ++batch_index;
    const size_t F = indices.size();
    std::vector<prefetch::ExtentRef> ext;
    uint64_t direct_extents = 0;
    w->piece_begin.resize(n * F + 1);
    w->known.assign(F, 1);
    w->out_offsets.assign(F, {});
    w->unknown_bytes.assign(F, 0);
    w->direct.assign(n * F, 0);
    w->out.resize(F);
    uint64_t out_bytes = 0;
    for (size_t f = 0; f < F; ++f) {
      for (size_t i = 0; i < n && w->known[f]; ++i) {
        for (int64_t d : indices[f].samples[w->ids[i]].shape) w->known[f] = w->known[f] && d >= 0;
      }
      if (!w->known[f]) continue;
      auto& off = w->out_offsets[f];
      off.resize(n + 1);
      off[0] = 0;
      for (size_t i = 0; i < n; ++i) off[i + 1] = off[i] + indices[f].samples[w->ids[i]].nbytes();
    }
    // Raw samples (one extent, decode is the identity) can be read straight
    // into the batch buffer, skipping the read buffer, decode and a copy.
    // Large ones always are; small ones only when no other extent of the
    // batch lies within max_gap of them in their file (coalescing would read
    // them together, which saves more than a copy), or coalescing is off.
    std::vector<uint8_t>& raw_ok = direct_scratch_;
    raw_ok.assign(n * F, 0);
    std::vector<std::pair<uint64_t, uint64_t>>& small = small_scratch_;  // (file << 32 | slot, offset)
    small.clear();
    for (size_t i = 0; i < n; ++i) {
      for (size_t f = 0; f < F; ++f) {
        const SampleRef& ref = indices[f].samples[w->ids[i]];
        if (!w->known[f] || ref.extents.size() != 1 || !indices[f].sources[ref.source]->is_identity(ref)) continue;
        raw_ok[i * F + f] = 1;
      }
    }
    if (options.coalesce.enabled) {
      // Every extent of the batch, sorted per file: a small raw sample with a
      // neighbour within max_gap stays with the planner.
      for (size_t i = 0; i < n; ++i) {
        for (size_t f = 0; f < F; ++f) {
          const SampleRef& ref = indices[f].samples[w->ids[i]];
          const uint64_t key = (uint64_t{file_ids[f][ref.file]} << 32) | (i * F + f);
          for (const Extent& e : ref.extents) small.push_back({key, e.offset});
        }
      }
      std::sort(small.begin(), small.end(), [](const auto& a, const auto& b) {
        return (a.first >> 32) != (b.first >> 32) ? a.first < b.first : a.second < b.second;
      });
      auto end_of = [&](size_t k) {
        const uint64_t slot = small[k].first & 0xFFFFFFFFu;
        const SampleRef& ref = indices[slot % F].samples[w->ids[slot / F]];
        for (const Extent& e : ref.extents) {
          if (e.offset == small[k].second) return e.offset + e.length;
        }
        return small[k].second;
      };
      for (size_t k = 0; k + 1 < small.size(); ++k) {
        if ((small[k].first >> 32) != (small[k + 1].first >> 32)) continue;
        if (small[k + 1].second > end_of(k) + options.coalesce.max_gap) continue;
        // Neighbours: neither goes direct unless it is large.
        for (size_t j : {k, k + 1}) {
          const uint64_t slot = small[j].first & 0xFFFFFFFFu;
          const SampleRef& ref = indices[slot % F].samples[w->ids[slot / F]];
          if (ref.extents[0].length < kDirectMinBytes) raw_ok[slot] = 0;
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      for (size_t f = 0; f < F; ++f) {
        w->piece_begin[i * F + f] = static_cast<uint32_t>(ext.size());
        const SampleRef& ref = indices[f].samples[w->ids[i]];
        const uint32_t file = file_ids[f][ref.file];
        if (raw_ok[i * F + f]) {
          w->direct[i * F + f] = 1;
          const Extent& e = ref.extents[0];
          const uint64_t dest = w->out_offsets[f][i];
          auto& dr = w->direct_reads;
          // Neighbours in the file that are neighbours in the batch (sequential
          // orders) become one run (the engine issues it in max_read pieces).
          if (options.coalesce.enabled && !dr.empty() && dr.back().field == f && dr.back().file == file &&
              dr.back().offset + dr.back().length == e.offset && dr.back().dest + dr.back().length == dest) {
            dr.back().length += e.length;
          } else {
            dr.push_back({file, e.offset, e.length, static_cast<uint32_t>(f), dest});
          }
          ++direct_extents;
          continue;
        }
        for (const Extent& e : ref.extents) ext.push_back({file, e.offset, e.length});
        if (!w->known[f]) w->unknown_bytes[f] += ref.read_bytes();
      }
    }
    for (size_t f = 0; f < F; ++f) out_bytes += w->known[f] ? w->out_offsets[f][n] : w->unknown_bytes[f];
    w->piece_begin[n * F] = static_cast<uint32_t>(ext.size());
    w->plan = prefetch::plan_reads(ext, options.coalesce);
    extents += ext.size() + direct_extents;
    planned_reads += w->plan.reads.size() + w->direct_reads.size();
    DLFEED_REC({
      const uint64_t t1 = counters->now();
      counters->add(CId::kExtents, ext.size() + direct_extents);
      counters->sample(CId::kPlan, t1 - t0);
      counters->interval_begin(Component::kPlan, t0);
      counters->interval_end(Component::kPlan, t1);
      if (counters->tracing()) counters->trace("plan", "plan", t0, t1 - t0, epoch, w->index, w->plan.reads.size());
    });
    w->ticket = std::make_shared<Ticket>();
    w->ticket->bytes = w->plan.buffer_bytes + out_bytes;
    return w;
  }

  // Admits a planned batch under the prefetch policy and the memory budget
  // (waiting when `wait`, else returning false at once), then issues its reads.
  bool admit_and_read(Work& w, bool wait) {
    const uint64_t bytes = w.ticket->bytes;
    {
      std::unique_lock<std::mutex> lock(budget->mu);
      auto fits = [&] {
        const Budget& b = *budget;
        // A consumer waiting with nothing on the way always gets a batch, even
        // over the budget (it may be holding earlier batches): never a hang.
        if (b.pipeline == 0 && b.consumer_waiting) return true;
        if (!policy->admit({b.pipeline, b.bytes, b.consumer_waiting}, bytes)) return false;
        if (b.batches == 0) return true;
        if (b.bytes + bytes > options.memory_budget) return false;
        // Free buffers cached for reuse count too: drop what no longer fits.
        pool->trim_to(options.memory_budget - b.bytes - bytes);
        return true;
      };
      if (wait) {
        [[maybe_unused]] const uint64_t tw = now_of(*counters);
        budget->cv.wait(lock, [&] { return stop || fits(); });
        DLFEED_REC({
          const uint64_t t1 = counters->now();
          counters->sample(CId::kAdmitWait, t1 - tw);
          if (counters->tracing() && t1 - tw >= 1000) {
            counters->trace("admit_wait", "plan", tw, t1 - tw, w.epoch, w.index);
          }
        });
      }
      if (stop || !fits()) return false;
      budget->batches += 1;
      budget->bytes += bytes;
      budget->pipeline += 1;
      budget->peak_bytes = std::max(budget->peak_bytes, budget->bytes);
    }
    w.ticket->budget = budget;  // from now on the ticket releases the bytes
    w.ticket->in_pipeline = true;
    w.raw = pool->take(w.plan.buffer_bytes);
    for (size_t f = 0; f < w.known.size(); ++f) {
      if (w.known[f]) w.out[f] = pool->take(w.out_offsets[f].back());
    }
    if (options.fadvise_willneed) {
      std::vector<ReadRequest> hint;
      for (const auto& r : w.plan.reads) hint.push_back({r.file, r.offset, r.length, nullptr, 0});
      for (const auto& d : w.direct_reads) hint.push_back({d.file, d.offset, d.length, nullptr, 0});
      advise_willneed(*files, hint);
    }
    engine_for(w).submit(w.self);
    return true;
  }

  // Spread on: the first engine spent at least 75% of its last window on a
  // CPU, and at least 90% of its reads were page-cache hits. Spread off: the
  // engines together busy less than 50% of one thread, or fewer than half of
  // their reads hits. Reads that wait on the device stay on one engine: more
  // rings, each with its own queue and its own thread taking completions,
  // made a cold global shuffle slower (docs/performance.md).
  static constexpr uint32_t kSpreadOnBusy = 750, kSpreadOnHits = 900;
  static constexpr uint32_t kSpreadOffBusy = 500, kSpreadOffHits = 500;

  IoEngine& engine_for(const Work& w) {
    if (engines.size() == 1) return *engines[0];
    if (!spreading) {
      spreading = engines[0]->busy_permille() >= kSpreadOnBusy && engines[0]->hits_permille() >= kSpreadOnHits;
    } else {
      uint32_t busy = 0, hits = 0;
      for (const auto& e : engines) {
        busy += e->busy_permille();
        hits = std::max(hits, e->hits_permille());
      }
      spreading = busy >= kSpreadOffBusy && hits >= kSpreadOffHits;
    }
    if (options.io_spread_always) spreading = true;
    if (!spreading) return *engines[0];
    const size_t k = w.index % engines.size();
    if (k != 0) batches_spread.fetch_add(1, std::memory_order_relaxed);
    return *engines[k];
  }

  // The pipeline's source: keeps the reads of every batch the policy and the
  // budget admit in flight (the look-ahead), and hands out the oldest. It
  // waits only when nothing at all is in flight for the pipeline.
  struct Lookahead {
    std::deque<Work*> ahead;  // admitted, reads issued, in order
    Work* staged = nullptr;   // planned, waiting for admission
    bool exhausted = false;
  };
  Work* next_for_pipeline(OrderCursor& cursor, uint64_t& batch_index, Lookahead& la) {
    while (!stop) {
      if (la.staged == nullptr && !la.exhausted) {
        std::shared_ptr<Work> w = plan_batch(cursor, batch_index);
        if (!w) {
          la.exhausted = true;
        } else {
          la.staged = w.get();
          la.staged->self = std::move(w);  // the pipeline's reference, dropped at the sink
        }
      }
      if (la.staged == nullptr) break;
      if (!admit_and_read(*la.staged, /*wait=*/la.ahead.empty())) break;
      la.ahead.push_back(la.staged);
      la.staged = nullptr;
    }
    if (la.ahead.empty() || stop) return nullptr;
    Work* w = la.ahead.front();
    la.ahead.pop_front();
    return w;
  }

  // Drops batches planned but never handed to the pipeline (on stop).
  static void drop_lookahead(Lookahead& la) {
    for (Work* w : la.ahead) w->self.reset();
    la.ahead.clear();
    if (la.staged) la.staged->self.reset();
    la.staged = nullptr;
  }

  // The bytes of sample i, field f: a view into the read buffer (one extent)
  // or gathered into `tmp` (several extents).
  std::span<std::byte> raw_of(Work& w, size_t i, size_t f, ByteBuffer& tmp) {
    const size_t F = indices.size();
    const uint32_t b = w.piece_begin[i * F + f], e = w.piece_begin[i * F + f + 1];
    if (e == b) return {};
    if (e == b + 1) {
      const auto& p = w.plan.pieces[b];
      return {w.raw.data() + p.buffer_offset, p.length};
    }
    uint64_t total = 0;
    for (uint32_t k = b; k < e; ++k) total += w.plan.pieces[k].length;
    tmp.resize(total);
    uint64_t pos = 0;
    for (uint32_t k = b; k < e; ++k) {
      const auto& p = w.plan.pieces[k];
      std::memcpy(tmp.data() + pos, w.raw.data() + p.buffer_offset, p.length);
      pos += p.length;
    }
    return {tmp.data(), tmp.size()};
  }

  // Decode every sample of every field straight into the batch's buffers.
  void decode(Work& w) {
    absl::Status st = w.wait_reads();
    if (!st.ok()) {
      w.error = st;
      return;
    }
    name_thread_once(*counters, "dlfeed worker");
    [[maybe_unused]] const uint64_t t0 = now_of(*counters);
    DLFEED_REC(counters->interval_begin(Component::kDecode, t0));
    decode_reads(w);
    DLFEED_REC({
      const uint64_t t1 = counters->now();
      counters->interval_end(Component::kDecode, t1);
      counters->sample(CId::kDecode, t1 - t0);
      if (counters->tracing()) counters->trace("decode", "decode", t0, t1 - t0, w.epoch, w.index, w.ids.size());
    });
  }

  void decode_reads(Work& w) {
    const size_t n = w.ids.size(), F = indices.size();
    auto batch = std::make_shared<Batch>();
    batch->epoch = w.epoch;
    batch->index = w.index;
    batch->position = w.position;
    batch->sample_ids = w.ids;
    batch->fields.resize(F);
    batch->storage.resize(F);
    for (size_t f = 0; f < F && w.error.ok(); ++f) {
      BatchField& out = batch->fields[f];
      out.name = field_names[f];
      const SampleIndex& idx = indices[f];
      // Sizes known before decode (every dimension of every sample): decode
      // in parallel straight into place (samples read there directly need
      // nothing). Otherwise in order, appending.
      const bool known = w.known[f];
      out.offsets.resize(n + 1);
      out.sample_shapes.resize(n);
      ByteBuffer& store = batch->storage[f];
      if (known) {
        out.offsets = std::move(w.out_offsets[f]);
        store = std::move(w.out[f]);
        std::vector<absl::Status> errs(n);
        auto one = [&](size_t i) {
          tsan_handshake();
          struct End {
            ~End() { tsan_handshake(); }
          } end;
          const SampleRef& ref = idx.samples[w.ids[i]];
          counters::CurrentScope timed(counters.get());  // format code times CRC/inflate/parse
          if (w.direct[i * F + f]) {
            out.sample_shapes[i] = ref.shape;
            return;
          }
          thread_local ByteBuffer tmp;
          thread_local std::vector<std::byte> scratch;
          auto d = idx.sources[ref.source]->decode(ref, raw_of(w, i, f, tmp), scratch);
          if (!d.ok()) {
            errs[i] = d.status();
            return;
          }
          const uint64_t want = out.offsets[i + 1] - out.offsets[i];
          if (d->bytes.size() != want) {
            errs[i] = format_error(idx.files[ref.file], ref.extents.empty() ? 0 : ref.extents[0].offset,
                                   absl::StrCat(want, " decoded bytes for sample ", ref.item),
                                   absl::StrCat(d->bytes.size()));
            return;
          }
          if (want) std::memcpy(store.data() + out.offsets[i], d->bytes.data(), want);
          out.sample_shapes[i] = d->shape;
        };
        size_t to_decode = 0;
        for (size_t i = 0; i < n; ++i) to_decode += w.direct[i * F + f] == 0;
        if (to_decode >= 8) {
          tsan_handshake();
          // Isolated: while this thread waits for the loop's last samples it
          // runs only the loop's own tasks. Otherwise it could pick up the
          // planner's task, which may block until the consumer takes the
          // batch being decoded below it on this very stack: a deadlock.
          tbb::this_task_arena::isolate([&] { tbb::parallel_for(size_t(0), n, one); });
          tsan_handshake();
        } else {
          for (size_t i = 0; i < n; ++i) one(i);
        }
        for (size_t i = 0; i < n; ++i) {
          if (!errs[i].ok()) {
            w.error = errs[i];
            break;
          }
        }
        out.dtype = n ? idx.samples[w.ids[0]].dtype : DType{};
      } else {
        // Sizes known only after decode (e.g. TFRecord features): in order.
        counters::CurrentScope timed(counters.get());
        ByteBuffer tmp;
        std::vector<std::byte> scratch;
        // Decoded sizes are close to the bytes read (TFRecord features): a
        // buffer of that capacity usually takes every sample without growing.
        store = pool->take(w.unknown_bytes[f]);
        store.clear();
        out.offsets[0] = 0;
        for (size_t i = 0; i < n; ++i) {
          const SampleRef& ref = idx.samples[w.ids[i]];
          auto d = idx.sources[ref.source]->decode(ref, raw_of(w, i, f, tmp), scratch);
          if (!d.ok()) {
            w.error = d.status();
            break;
          }
          const uint64_t at = store.size();
          store.resize(at + d->bytes.size());
          if (!d->bytes.empty()) std::memcpy(store.data() + at, d->bytes.data(), d->bytes.size());
          out.offsets[i + 1] = store.size();
          out.sample_shapes[i] = d->shape;
          if (i == 0) out.dtype = d->dtype;
        }
      }
      if (!w.error.ok()) break;
      out.bytes = std::span<const std::byte>(store.data(), out.offsets[n]);
      bool uniform = n > 0;
      for (size_t i = 1; i < n && uniform; ++i) uniform = out.sample_shapes[i] == out.sample_shapes[0];
      if (uniform) {
        out.shape.push_back(static_cast<int64_t>(n));
        for (int64_t d : out.sample_shapes[0]) out.shape.push_back(d);
      }
    }
    pool->give(std::move(w.raw));
    if (!w.error.ok()) {
      for (auto& s : batch->storage) pool->give(std::move(s));
      return;
    }
    w.batch = std::move(batch);
  }

  void deliver(Work& w) {
    [[maybe_unused]] const uint64_t t0 = now_of(*counters);
    DLFEED_REC(counters->interval_begin(Component::kCollate, t0));
    deliver_batch(w);
    DLFEED_REC({
      const uint64_t t1 = counters->now();
      counters->interval_end(Component::kCollate, t1);
      counters->sample(CId::kCollate, t1 - t0);
      if (counters->tracing()) counters->trace("collate", "collate", t0, t1 - t0, w.epoch, w.index);
    });
  }

  void deliver_batch(Work& w) {
    if (!w.error.ok()) {
      failed = true;
      push({nullptr, w.error, false, nullptr});
      return;
    }
    // The consumer's handle returns the buffers and the admission when dropped.
    Batch* raw = w.batch.get();
    auto holder = std::make_shared<std::shared_ptr<Batch>>(std::move(w.batch));
    std::shared_ptr<BufferPool> p = pool;
    std::shared_ptr<Ticket> ticket = w.ticket;
    std::shared_ptr<Ticket> t = std::move(w.ticket);
    std::shared_ptr<const Batch> handed(raw, [holder, p, t](const Batch*) mutable {
      for (auto& s : (*holder)->storage) p->give(std::move(s));
      holder.reset();
      t.reset();
    });
    push({std::move(handed), absl::OkStatus(), false, std::move(ticket)});
  }

  void run_pipeline(OrderCursor cursor, uint64_t first_batch) {
    name_thread_once(*counters, "dlfeed pipeline");
    uint64_t batch_index = first_batch;
    Lookahead lookahead;
    const size_t tokens = std::clamp<size_t>(threads * 2 + 8, 4, 64);
    try {
      tsan_handshake();
      arena->execute([&] {
        tbb::parallel_pipeline(
            tokens,
            tbb::make_filter<void, Work*>(tbb::filter_mode::serial_in_order,
                                          [&](tbb::flow_control& fc) -> Work* {
                                            tsan_handshake();
                                            Work* token = next_for_pipeline(cursor, batch_index, lookahead);
                                            if (token == nullptr) fc.stop();
                                            tsan_handshake();
                                            return token;
                                          }) &
                tbb::make_filter<Work*, Work*>(tbb::filter_mode::parallel,
                                               [&](Work* w) {
                                                 tsan_handshake();
                                                 if (w) decode(*w);
                                                 tsan_handshake();
                                                 return w;
                                               }) &
                tbb::make_filter<Work*, void>(tbb::filter_mode::serial_in_order, [&](Work* w) {
                  tsan_handshake();
                  if (w) {
                    std::shared_ptr<Work> keep = std::move(w->self);
                    if (!stop) deliver(*w);
                  }
                  tsan_handshake();
                }));
      });
      tsan_handshake();
    } catch (const std::exception& e) {
      drop_lookahead(lookahead);
      push({nullptr, absl::InternalError(absl::StrCat("loader pipeline: ", e.what())), false, nullptr});
    }
    drop_lookahead(lookahead);
    push({nullptr, absl::OkStatus(), true, nullptr});
  }
};

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;

absl::StatusOr<std::unique_ptr<Loader>> Loader::create(LoaderOptions options) {
  if (options.paths.empty()) return absl::InvalidArgumentError("loader: no paths given");
  if (options.batch_size == 0) return absl::InvalidArgumentError("loader: batch_size must be at least 1");
  auto impl = std::make_unique<Impl>();
  impl->counters = std::make_shared<Counters>(options.trace);
  Counters& cnt = *impl->counters;
  if (options.prefetch_policy) {
    impl->policy = options.prefetch_policy;
  } else {
    DLFEED_ASSIGN_OR_RETURN(impl->policy, prefetch::parse_policy(options.prefetch));
  }
  std::vector<std::string> names = options.fields;
  if (names.empty()) {
    const FileFormat f = options.format.format;
    names.push_back(f == FileFormat::kTfRecord ? options.format.feature : options.format.name);
  }
  for (const std::string& name : names) {
    FormatOptions fo = options.format;
    fo.name = name;
    if (!name.empty()) fo.feature = name;
    [[maybe_unused]] const uint64_t t_open = now_of(cnt);
    DLFEED_ASSIGN_OR_RETURN(SampleIndex idx, open_dataset(options.paths, fo));
    DLFEED_REC({
      const uint64_t t1 = cnt.now();
      cnt.sample(CId::kOpen, t1 - t_open);
      if (cnt.tracing()) cnt.trace("open", "index", t_open, t1 - t_open, impl->indices.size(), idx.num_files());
    });
    if (!impl->indices.empty()) {
      const SampleIndex& first = impl->indices[0];
      if (idx.file_begin != first.file_begin) {
        return absl::InvalidArgumentError(absl::StrCat(
            "loader: field '", name, "' has ", idx.size(), " samples in ", idx.num_files(), " files but field '",
            impl->field_names[0], "' has ", first.size(), " in ", first.num_files(),
            "; every field needs the same samples per file"));
      }
    }
    impl->field_names.push_back(name.empty() ? (names.size() == 1 ? "data" : name) : name);
    DLFEED_ASSIGN_OR_RETURN(FieldSpec spec, uniform_spec(idx, impl->field_names.back(), options.ragged));
    impl->field_specs.push_back(std::move(spec));
    impl->indices.push_back(std::move(idx));
  }
  impl->layout = FileLayout::of(impl->indices[0]);
  FileTableOptions fto;
  fto.max_open = options.max_open_files;
  fto.direct = options.io.direct;
  impl->files = std::make_shared<FileTable>(fto);
  std::vector<std::string> file_names;
  for (const SampleIndex& idx : impl->indices) {
    std::vector<uint32_t> ids;
    for (const std::string& path : idx.files) {
      ids.push_back(impl->files->add(path));
      if (file_names.size() <= ids.back()) file_names.resize(ids.back() + 1);
      file_names[ids.back()] = path;
    }
    impl->file_ids.push_back(std::move(ids));
  }
  cnt.set_file_names(file_names);
  impl->file_names = std::move(file_names);
  // One engine per backend (ring, pread pool), all over the same files.
  uint32_t n_engines = options.io_engines;
  if (n_engines == 0) n_engines = options.io_factory ? 1 : std::min(2u, std::thread::hardware_concurrency());
  n_engines = std::max(1u, n_engines);
  const uint64_t max_piece = options.coalesce.enabled ? options.coalesce.max_read : 0;
  for (uint32_t k = 0; k < n_engines; ++k) {
    DLFEED_ASSIGN_OR_RETURN(std::unique_ptr<IoBackend> backend,
                            options.io_factory ? options.io_factory(impl->files, options.io)
                                               : make_io_backend(impl->files, options.io));
    if (!backend) return absl::InvalidArgumentError("loader: LoaderOptions::io_factory returned no backend");
    if (options.io_factory) backend = make_checked_backend(std::move(backend), impl->files);
    impl->engines.push_back(std::make_unique<IoEngine>(std::move(backend), impl->counters.get(), max_piece, k));
  }
  impl->threads = options.threads ? options.threads
                                  : std::max(2u, std::thread::hardware_concurrency());
  impl->threads = std::max(2u, impl->threads);  // the planner may block; decode needs a thread too
  impl->arena = std::make_unique<tbb::task_arena>(static_cast<int>(impl->threads));
  // Validate the order options now rather than at the first epoch; the
  // cursor's length is the rank's samples per epoch (a global shuffle builds
  // its whole permutation here, so it is kept rather than rebuilt on demand).
  if (options.order.global_start != 0) {
    return absl::InvalidArgumentError(
        "loader: order.global_start is set per epoch by restore() (elastic restarts); leave it 0");
  }
  DLFEED_ASSIGN_OR_RETURN(OrderCursor checked, OrderCursor::create(impl->layout, options.order));
  impl->samples_per_epoch = checked.size();
  if (!options.stage.dir.empty()) DLFEED_RETURN_IF_ERROR(impl->setup_staging(options, checked));
  impl->options = std::move(options);
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

absl::Status Loader::start_epoch(uint64_t epoch) {
  Impl& m = *impl_;
  m.cancel_epoch();
  OrderSpec spec = m.options.order;
  spec.epoch = epoch;
  const bool resuming = m.resume && m.resume->epoch == epoch;
  if (resuming) spec.global_start = m.resume->global_start;
  DLFEED_ASSIGN_OR_RETURN(OrderCursor cursor, OrderCursor::create(m.layout, spec));
  m.base_cursor = cursor;
  uint64_t start = 0;
  if (resuming) {
    start = m.resume->position;
    DLFEED_RETURN_IF_ERROR(cursor.seek(start));
    m.resume.reset();
  }
  m.apply_staging();
  m.epoch = epoch;
  m.start_position = start;
  m.delivered_samples = 0;
  m.stop = false;
  m.failed = false;
  m.finished = false;
  m.running = true;
  DLFEED_REC(m.counters->begin_epoch(epoch, m.counters->now()));
  const uint64_t first_batch = start / m.options.batch_size;
  m.pipeline_thread = std::thread([&m, cursor, first_batch]() mutable { m.run_pipeline(cursor, first_batch); });
  detail::name_thread(m.pipeline_thread, "dlfeed-pipeline");
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Batch>> Loader::next() {
  Impl& m = *impl_;
  if (!m.running) {
    if (m.finished) return std::shared_ptr<const Batch>();
    return absl::FailedPreconditionError("loader: call start_epoch() before next()");
  }
  Counters& c = *m.counters;
  [[maybe_unused]] const uint64_t t0 = now_of(c);
  [[maybe_unused]] uint64_t io0 = 0;
  DLFEED_REC({
    name_thread_once(c, "consumer");
    c.step_boundary(t0);
    io0 = c.busy_until(Component::kIo, t0);
    c.interval_begin(Component::kStall, t0);
  });
  Delivery d;
  {
    std::unique_lock<std::mutex> lock(m.q_mu);
    if (m.ready.empty()) {
      // Let the planner know: with nothing on the way it must admit a batch.
      lock.unlock();
      m.budget->set_consumer_waiting(true);
      lock.lock();
      m.q_cv.wait(lock, [&] { return !m.ready.empty(); });
      lock.unlock();
      m.budget->set_consumer_waiting(false);
      lock.lock();
    }
    d = std::move(m.ready.front());
    m.ready.pop_front();
  }
  if (d.ticket) {
    d.ticket->handed_over();
    d.ticket.reset();
  }
  [[maybe_unused]] const uint64_t t1 = now_of(c);
  DLFEED_REC({
    c.interval_end(Component::kStall, t1);
    c.sample(CId::kStall, t1 - t0);
    const uint64_t io1 = c.busy_until(Component::kIo, t1);
    c.add(CId::kIoExposed, std::min(io1 > io0 ? io1 - io0 : 0, t1 - t0));
    if (c.tracing()) c.trace("stall", "consumer", t0, t1 - t0, m.epoch, m.batches.load());
  });
  if (d.end) {
    if (m.pipeline_thread.joinable()) m.pipeline_thread.join();
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

std::string Loader::state() const {
  const Impl& m = *impl_;
  std::string out(kStateMagic, 4);
  out.push_back(static_cast<char>(kStateVersion));
  if (!m.base_cursor) {
    // Nothing started: resume at the beginning of epoch 0.
    OrderSpec spec = m.options.order;
    spec.epoch = 0;
    auto c = OrderCursor::create(m.layout, spec);
    return out + (c.ok() ? c->state() : "");
  }
  OrderCursor c = *m.base_cursor;
  const uint64_t pos = std::min(m.start_position + m.delivered_samples, c.size());
  (void)c.seek(pos);
  return out + c.state();
}

absl::Status Loader::restore(absl::string_view state) {
  Impl& m = *impl_;
  if (state.size() < 5 || state.substr(0, 4) != absl::string_view(kStateMagic, 4)) {
    return absl::InvalidArgumentError("loader state: not a dlfeed loader state (bad magic)");
  }
  if (static_cast<uint8_t>(state[4]) != kStateVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("loader state: version ", static_cast<int>(state[4]), ", expected ", int(kStateVersion)));
  }
  const std::string order_state(state.substr(5));
  DLFEED_ASSIGN_OR_RETURN(OrderState os, decode_state(order_state));
  const OrderSpec& want = m.options.order;
  if (os.spec.strategy != want.strategy || os.spec.seed != want.seed || os.spec.drop_last != want.drop_last ||
      os.spec.params.buffer_size != want.params.buffer_size || os.spec.params.block_size != want.params.block_size ||
      os.spec.params.window != want.params.window) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loader state: saved with strategy ", os.spec.strategy, " seed ", os.spec.seed, " drop_last ",
        os.spec.drop_last, ", but this loader has ", want.strategy, " seed ", want.seed, " drop_last ",
        want.drop_last, " (or other strategy parameters differ)"));
  }
  Impl::Resume r{os.spec.epoch, os.spec.global_start, os.position};
  if (os.spec.rank == want.rank && os.spec.world_size == want.world_size) {
    // Checks the dataset's file layout against the state's fingerprint.
    DLFEED_RETURN_IF_ERROR(OrderCursor::from_state(m.layout, order_state, want.params.indices).status());
  } else {
    // Elastic: the job consumed global positions [0, G + k*W); this rank reads
    // its share of the rest.
    if (os.layout_fingerprint != m.layout.fingerprint()) {
      return absl::FailedPreconditionError(
          "loader state: saved for a different file layout (dataset changed since the state was saved)");
    }
    if (os.indices_fingerprint != indices_fingerprint(want.params.indices.get())) {
      return absl::FailedPreconditionError(
          "loader state: the explicit index array differs from the one the state was saved with");
    }
    r.global_start = os.spec.global_start + os.position * os.spec.world_size;
    r.position = 0;
    OrderSpec spec = want;
    spec.epoch = os.spec.epoch;
    spec.global_start = r.global_start;
    auto check = OrderCursor::create(m.layout, spec);
    if (!check.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "loader state: saved by rank ", os.spec.rank, " of ", os.spec.world_size, ", restored on rank ", want.rank,
          " of ", want.world_size, ": ", check.status().message()));
    }
  }
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

const SampleIndex& Loader::index(size_t field) const { return impl_->indices.at(field); }
const std::vector<std::string>& Loader::field_names() const { return impl_->field_names; }
const std::vector<FieldSpec>& Loader::field_specs() const { return impl_->field_specs; }
const LoaderOptions& Loader::options() const { return impl_->options; }

counters::Counters& Loader::counters() const { return *impl_->counters; }
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
  IoStats io;
  for (const auto& e : m.engines) io += e->stats();
  s.bytes_read = io.device_bytes ? io.device_bytes : io.bytes;
  s.read_requests = m.planned_reads;
  s.extents = m.extents;
  {
    std::lock_guard<std::mutex> lock(m.budget->mu);
    s.peak_in_flight_bytes = m.budget->peak_bytes;
  }
  s.pool_allocations = m.pool->allocations();
  s.pool_reuses = m.pool->reuses();
  s.io_backend = m.engines[0]->backend().name();
  s.io_fallback_reason = m.engines[0]->backend().fallback_reason();
  s.io_engines = static_cast<uint32_t>(m.engines.size());
  s.batches_spread = m.batches_spread.load(std::memory_order_relaxed);
  if (m.stager) s.stage = m.stager->stats();
  s.files_read_staged = m.files_staged_now;
  s.files = m.file_names.size();
  return s;
}

}  // namespace dlfeed
