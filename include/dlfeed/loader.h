// SPDX-License-Identifier: Apache-2.0
// The loader: options in, batches out. It indexes the files once, then per
// epoch runs the pipeline
//
//   plan (serial: next ids from the order, coalesced reads, memory admission)
//     -> read (the I/O backend, driven by one engine thread, ahead of use)
//     -> decode (parallel: CRC, inflate, gathers, straight into the batch)
//     -> collate (serial, in order: hand the batch to the consumer)
//
// as oneTBB pipeline stages. A batch's memory counts against the budget from
// the moment its reads are planned until the consumer drops it.
//
//   dlfeed::LoaderOptions o;
//   o.paths = {"data/train"};
//   o.fields = {"x", "y"};
//   o.batch_size = 64;
//   o.order.strategy = "global_shuffle";
//   auto loader = dlfeed::Loader::create(o).value();
//   for (uint64_t e = 0; e < 3; ++e)
//     for (const auto& batch : loader->epoch(e)) train(batch->fields[0], batch->fields[1]);
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlfeed/batch/batch.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/detail/export.h"
#include "dlfeed/error.h"
#include "dlfeed/format/format.h"
#include "dlfeed/io/io_backend.h"
#include "dlfeed/io/object_store.h"
#include "dlfeed/order/order.h"
#include "dlfeed/plan/plan.h"
#include "dlfeed/plan/policy.h"
#include "dlfeed/sample.h"
#include "dlfeed/staging/staging.h"

namespace dlfeed::inline DLFEED_ABI {

/// AdvancedOptions::tuning: knobs for dlfeed's own tests and benches; may
/// change or go without notice.
struct DLFEED_EXPORT LoaderTuning {
  /// Send batches round all io_engines whatever their reads (to test
  /// spreading, and to measure what it costs where it does not engage).
  bool io_spread_always = false;
};

/// A loader switch (LoaderOptions::resident, LoaderOptions::unpack), written
/// "auto", "on" or "off" in Python and on the command line.
enum class Mode : uint8_t { kAuto, kOn, kOff };
/// "auto", "on" or "off".
DLFEED_EXPORT const char* mode_name(Mode mode);
/// Parses "auto", "on" or "off" for the option `what` (e.g. "resident"):
/// InvalidArgument "loader: resident is auto, on or off, not 'x'" otherwise.
DLFEED_EXPORT absl::StatusOr<Mode> parse_mode(absl::string_view text, absl::string_view what);

/// The memory budget a loader takes when LoaderOptions::memory_budget is 0,
/// read now: its bytes, and why (e.g. "5.5 GiB: a quarter of 22.0 GiB the
/// process may use (MemAvailable)"). `workers`: processes of this rank that
/// each make a loader (DataLoader workers), which the loader cannot see:
/// the share of each, to give it as memory_budget.
struct DLFEED_EXPORT MachineBudget {
  uint64_t bytes = 0;
  std::string why;
};
DLFEED_EXPORT MachineBudget machine_memory_budget(uint32_t workers = 1);

/// LoaderOptions::advanced: what the loader chooses from the machine and the
/// data by itself. Set these to measure, to plug in your own parts, or to
/// override a default that measurement showed wrong for your storage.
struct DLFEED_EXPORT AdvancedOptions {
  /// I/O engines: threads that hand reads to a backend of their own (an
  /// io_uring ring, a pread pool) and reap them. The first takes every batch
  /// while it has time to spare; when it spends 75% of its time on a CPU
  /// (reads served from the page cache, where the kernel's copy runs on the
  /// thread that submits, io_uring included), batches go round all engines,
  /// until together they are busy less than half of one thread again (reads
  /// waiting on the device, which more rings do not make faster). 0: from
  /// the cores the process may use (its CPU affinity and cgroup quota, not
  /// the host's): 1 on 1 core, then one per core (at least 2) up to 16; 1
  /// with io_factory. 1: one engine.
  uint32_t io_engines = 0;
  /// Knobs for dlfeed's own tests and measurements (not a stable API).
  LoaderTuning tuning;
  /// Makes the I/O backend (once per engine); empty (the default) uses make_io_backend. A
  /// backend made here is checked against the IoBackend contract
  /// (make_checked_backend), so a faulty one gives errors, not bad batches.
  IoBackendFactory io_factory;
  /// Opens the index of each field (called once per field, in field order,
  /// with options.paths and that field's format options); empty (the
  /// default) calls open_dataset. mpi::Job::share_index sets it so that one
  /// rank indexes the files and the others receive the index.
  std::function<absl::StatusOr<SampleIndex>(const std::vector<std::string>& paths, const FormatOptions& format)>
      index_opener;
  /// Called once, by the loader's first start_epoch (restore() and
  /// start_epoch_at() included), before any read of it: that epoch's order
  /// (options.order at that epoch, with the global_start a restore() set)
  /// and the rank's position in it where reading starts. An error ends that
  /// start_epoch, and the next one calls it again. mpi::JobCache plans from
  /// it which rank keeps which bytes.
  std::function<absl::Status(const OrderSpec& order, uint64_t position)> before_first_epoch;
  /// A file held open whose change time alone is new at an epoch's start
  /// (rewritten with its mtime put back, or a chmod) is indexed again and
  /// read on when its samples are where they were (true, the default). False:
  /// an error naming it, as a file with a new size or mtime is. mpi::JobCache
  /// sets false: bytes it kept from the file would be served unchanged.
  bool reindex_changed_files = true;
  /// Files kept open at once (0: the FileTable default).
  size_t max_open_files = 0;
  /// How far to read ahead of the consumer (prefetch::Prefetch, in
  /// dlfeed/plan/policy.h): auto, off, or limits on batches and bytes,
  /// given as values (Prefetch::limits(8, 256 << 20)) or in their string
  /// form ("off", "depth:N" batches, "budget:BYTES", both as
  /// "depth:8,budget:256M", or "auto"). Batches the consumer holds do not
  /// count against depth:N.
  /// "auto" (the default) is "depth:8,budget:256M" when samples are read:
  /// 8 small batches ahead but only 256 MiB of large ones (read-ahead beyond
  /// that buys no throughput and every batch ahead is a fresh buffer), with
  /// more than 8 cores one batch and 32 MiB per core (up to 32 cores), and
  /// at least 4 batches of the dataset's mean batch size (large samples),
  /// all within half of memory_budget; and
  /// "depth:8,budget:16M" when the files are held in memory (`resident`):
  /// a batch is then copies made at once, with no latency to hide, and the
  /// first touch of a fresh batch buffer costs more than the copies into it
  /// (fewer buffers also stay in the CPU's caches), so only 1 batch of 16 MiB
  /// goes ahead; tiny batches still go 8 ahead, so the copying thread and
  /// the consumer do not wake each other for each.
  prefetch::Prefetch prefetch;
  /// Your own policy (a plug-in: prefetch::PrefetchPolicy), used instead of
  /// `prefetch` when set. The loader calls it from its planner thread only,
  /// holding a lock, so admit() should answer at once.
  std::shared_ptr<const prefetch::PrefetchPolicy> prefetch_policy;
  prefetch::CoalesceOptions coalesce;
  /// posix_fadvise(WILLNEED) each batch's reads when it is planned.
  bool fadvise_willneed = false;
};

/// Everything a Loader is built from.
struct DLFEED_EXPORT LoaderOptions {
  /// Files and folders (folders are walked recursively, sorted).
  std::vector<std::string> paths;
  /// How files are indexed (format, sample axis, TFRecord feature dtype...).
  FormatOptions format;
  /// The fields of a sample, each the name of an NPZ member, an HDF5 dataset
  /// or a TFRecord feature (e.g. {"x", "y"} or {"records_0", "labels"} or
  /// {"image", "label"}). Empty: one field, format.name / format.feature.
  /// Every field must have the same number of samples per file, and one
  /// dtype in all its files. NPY files are columns: field "x" reads x.npy (or
  /// its shards x_000.npy, x_001.npy...), "y" reads y.npy; without fields
  /// every NPY file belongs to the one field, named "data". A field
  /// "NAME=PATTERN" (e.g. "x=*_data.npy", "y=*_label.npy") reads the files
  /// whose name matches PATTERN (one '*'), and the files of such fields pair
  /// by folder and what the '*' matched; a file without its partner is an
  /// error naming it (FormatOptions::file_pattern).
  std::vector<std::string> fields;
  /// Per field, by its name in `fields`: the sample shape and element type
  /// where the files do not record them, i.e. a TFRecord feature's (as
  /// tf.io.parse_example's FixedLenFeature(shape, dtype) gives them):
  /// {"x": (3, 224, 224)} with {"x": uint8} reads an image's raw bytes
  /// straight into its place in the batch, while {"y": ()} reads an int64
  /// label as a scalar. A field not named takes format.feature_shape and
  /// format.feature_dtype. Other formats give each sample its shape and
  /// dtype themselves (NPY, NPZ and HDF5 from their headers; indexed binary
  /// 1-D uint8) and take neither from here (Python's shapes= views their
  /// samples instead). A name that is not a field is an error at create();
  /// with `fields` empty, the one field may also be named by format.feature
  /// or format.name.
  std::map<std::string, Shape> field_shapes;
  std::map<std::string, DType> field_dtypes;
  /// Samples of one field may differ in shape (batches are then ragged:
  /// BatchField::ragged()). Off: such a dataset is refused at create(),
  /// naming two files whose samples differ.
  bool ragged = false;

  uint32_t batch_size = 32;
  /// Drop this rank's last batch when it has fewer than batch_size samples
  /// (batches; order.drop_last is about the ranks' shards).
  bool drop_last_batch = false;
  /// Strategy, seed, rank, world size and shard padding. order.epoch is only
  /// the epoch whose order create() prepares first (the first you will
  /// read; any epoch may be read, epoch(e) picks); order.global_start is set
  /// by restore() (elastic restarts), and create() refuses another value.
  OrderSpec order;

  IoOptions io;
  /// Bytes of batches in flight (read buffers and decoded batches, those the
  /// consumer still holds included) stay within this: read-ahead stops when
  /// the next batch would not fit. Never a hang: when the consumer waits and
  /// nothing is on the way, one batch is read even over the budget (so a
  /// consumer that keeps many batches gets them one at a time). The prefetch
  /// policy's byte limit counts only the look-ahead, so batches the consumer
  /// holds take room from this budget, not from the read-ahead.
  /// 0 (the default): from the machine, when the loader is made: a quarter
  /// of the memory the process may use (MemAvailable, capped by its cgroup's
  /// memory.max less what it uses), shared by the ranks of the job on this
  /// node (OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE,
  /// LOCAL_WORLD_SIZE...), at least 256 MiB. LoaderStats::memory_budget and
  /// memory_budget_reason say what was used and why.
  uint64_t memory_budget = 0;
  /// Memory for the batch buffers (null: allocate_buffer's pages). A trainer
  /// passes e.g. cudaHostAlloc/cudaFreeHost to get page-locked batches, ready
  /// for asynchronous copies to a GPU; buffers are pooled and reused, so each
  /// is allocated once. dlfeed itself never calls CUDA.
  std::shared_ptr<const BufferAllocator> buffer_allocator;
  /// Hold the dataset in memory. "auto" (the default): when all its files
  /// together fit in half of memory_budget, and nothing asks for the device
  /// itself (io.direct, stage, io_factory), each file is read once, whole
  /// (an object of a store: in 8 MiB ranged GETs), from create() on, on
  /// threads of the loader's own, in the order the first epoch first uses
  /// them: a batch waits only for its own files, not for the whole dataset.
  /// Every later read is a copy from memory, with no system call or request
  /// per sample (small samples then go at memory speed, and a strided or
  /// scattered layout is read once, not once per sample). Those bytes come
  /// out of memory_budget; the rest is for batches in flight. The copy is a
  /// snapshot of each file as it was read. A file that cannot be read whole
  /// is read from its source instead (LoaderStats::resident_reason says
  /// why), where its error, if any, is reported. kOn: every file read before
  /// create() returns (a read that fails is its error), or create() fails
  /// saying why not; kOff: always read the files.
  /// LoaderStats::resident_bytes says what was chosen.
  Mode resident = Mode::kAuto;
  /// Unpack arrays that are costly to read per sample: a deflated NPZ member
  /// (np.savez_compressed; per sample, each would read and inflate the whole
  /// member) and a strided NPY/NPZ array (the DLIO layout, samples on the
  /// last axis; each sample spans nearly the whole array). "auto" (the
  /// default): those that fit, in file order, in half of memory_budget less
  /// the held files (resident) are read once, whole, by the first sample
  /// decoded from them in an epoch (a deflated member inflated and
  /// CRC-checked then), and kept for the epoch's later samples (each epoch
  /// reads them once again); their bytes come out of
  /// memory_budget. Not with io.direct, stage or io_factory. The rest, and
  /// everything with "off", is read per sample. kOn: every one of them, or
  /// create() fails saying why not (as resident's kOn). LoaderStats::unpacked_bytes
  /// and unpacked_reason say what was chosen.
  Mode unpack = Mode::kAuto;
  /// oneTBB threads for decode, and for the copies from held files when
  /// there are more than 2 cores (0: the cores the process may use, at least
  /// 2). They are this loader's own (a task arena of its size), whatever
  /// other loaders the process holds.
  uint32_t threads = 0;
  /// Tune while it runs ("on"): what is left to the machine (io_engines 0,
  /// prefetch "auto" and threads 0, when the files are read, not held) is
  /// moved toward the best delivered rate, one step at a time, and settles:
  /// the I/O engines batches are spread over (up to the cores, at most 16,
  /// made at create), the read-ahead depth (never past the prefetch and
  /// memory budgets) and the decode threads (2 .. the threads made; fewer
  /// only while the engines are busy). An explicit io_engines, prefetch or
  /// threads is never moved.
  /// LoaderStats (io_engines, prefetch, threads, autotune_changes) and the trace
  /// ("autotune" events) show what it chose. kAuto (the default): on when
  /// the process may use 4 cores or more (on 2, engines cannot grow and the
  /// tries cost more than they found: docs/performance.md); kOn: whatever
  /// the cores; kOff: never. docs/io.md.
  Mode autotune = Mode::kAuto;
  /// Trace events (off by default; the counters themselves are always on).
  counters::TraceOptions trace;
  /// Node-local staging (off while stage.dir is empty): from the first
  /// start_epoch() the rank's owned files (staging::owned_files) are copied to
  /// stage.dir in the background; each start_epoch() then reads every file
  /// with a complete copy there (this rank's, or another rank's sharing the
  /// folder) from the copy, the others from the source. Sample ids and bytes
  /// are the same either way, so the order and the data do not change.
  staging::StageOptions stage;
  /// Paths that are objects of a store (s3://): a node-local folder keeping
  /// the bytes fetched (docs/object-storage.md). Ignored for files.
  ObjectCacheOptions object_cache;
  /// The engines, read-ahead, read merging and plug-ins (AdvancedOptions):
  /// the defaults follow the machine and the data.
  AdvancedOptions advanced;
};

/// Totals since the loader was created (a snapshot).
struct DLFEED_EXPORT LoaderStats {
  uint64_t batches = 0;  // delivered to the consumer
  uint64_t samples = 0;
  uint64_t bytes_delivered = 0;  // decoded bytes handed out
  uint64_t bytes_read = 0;       // bytes read from files
  uint64_t planned_reads = 0;    // reads planned after coalescing (one per merged run of extents)
  uint64_t io_operations = 0;    // reads the I/O engines completed (large ones in pieces), and copies from held files
  uint64_t extents = 0;          // extents asked for before coalescing
  uint64_t peak_in_flight_bytes = 0;
  uint64_t pool_allocations = 0;
  uint64_t pool_reuses = 0;
  uint64_t lookahead_batches = 0;  // now: admitted (reading, decoding or queued) and not yet handed out
  uint64_t held_batches = 0;       // now: handed to the consumer and not yet dropped
  std::string io_backend;          // e.g. "io_uring"
  uint32_t io_engines = 0;         // I/O engines batches are spread over now (AdvancedOptions::io_engines, autotune)
  uint32_t io_engines_made = 0;    // I/O engines made at create (the most the autotuner may use)
  bool autotune = false;           // the autotuner moves something (LoaderOptions::autotune)
  uint64_t autotune_changes = 0;   // settings it applied so far (steps tried, kept and undone)
  uint32_t threads = 0;            // decode threads batches go to now (LoaderOptions::threads, or autotune's)
  uint32_t cores = 0;              // cores the process may use (affinity and cgroup quota), which the defaults follow
  uint32_t decode_peak = 0;        // the most batches in the decode stage at once
  uint64_t batches_spread = 0;     // batches read by an engine other than the first
  /// TFRecord records read around their value (the image straight into the
  /// batch, docs/architecture.md "Split records") and checked; and of those,
  /// the ones that failed the check and were decoded from the whole record
  /// (a layout other than the first record's, or a corrupt byte: then the
  /// whole record's decode gives the error).
  uint64_t split_records = 0;
  uint64_t split_records_whole = 0;
  std::string io_fallback_reason;
  staging::StageStats stage;         // the stager's (LoaderOptions::stage)
  uint64_t files_read_staged = 0;    // files read from staged copies (from the last start_epoch on)
  uint64_t files = 0;                // distinct files of the dataset (all fields)
  uint64_t resident_bytes = 0;       // held in memory (LoaderOptions::resident); 0: read from the files
  std::string resident_reason;       // why the dataset is or is not held in memory
  uint64_t memory_budget = 0;        // LoaderOptions::memory_budget in use (0 resolved from the machine)
  std::string memory_budget_reason;  // "given (memory_budget)", or how the machine's was chosen
  uint64_t unpacked_bytes = 0;       // kept for unpacked arrays (LoaderOptions::unpack), reserved at create
  std::string unpacked_reason;       // what was unpacked and why (empty: no deflated or strided array)
  std::string prefetch;              // the prefetch policy in use ("auto" resolved), e.g. "depth:8,budget:268435456"
  /// How batches are made: "gather" when every file is held and every field
  /// is raw samples at a fixed stride (NPY, stored NPZ, contiguous HDF5),
  /// each batch gathered by copies on one thread with nothing to decode;
  /// else "pipeline" (reads or copies, then oneTBB's decode stage).
  std::string route;
};

class Loader;

/// One epoch's batches as a range for `for (auto& b : loader->epoch(e))`.
/// Iteration throws dlfeed::Error on a read or decode failure.
class DLFEED_EXPORT EpochRange {
 public:
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = std::shared_ptr<const Batch>;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = const value_type&;
    iterator() = default;
    reference operator*() const { return current_; }
    iterator& operator++();
    bool operator==(const iterator& o) const { return current_ == o.current_; }

   private:
    friend class EpochRange;
    explicit iterator(Loader* loader);
    Loader* loader_ = nullptr;
    std::shared_ptr<const Batch> current_;
  };
  iterator begin() { return iterator(loader_); }
  iterator end() { return iterator(); }

 private:
  friend class Loader;
  explicit EpochRange(Loader* loader) : loader_(loader) {}
  Loader* loader_;
};

/// The facade a trainer uses. Not thread-safe: one consumer thread calls
/// start_epoch/next/state; batches may be used and dropped on any thread.
class DLFEED_EXPORT Loader {
 public:
  static absl::StatusOr<std::unique_ptr<Loader>> create(LoaderOptions options);
  ~Loader();  // cancels in-flight reads and joins every thread
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Starts `epoch` from its beginning (or from the restore()d position when
  /// the pending state is for this epoch). A running epoch is cancelled,
  /// except one read ahead by overlap_epochs() that is exactly `epoch` from
  /// its start with no restore() pending: that one is adopted.
  absl::Status start_epoch(uint64_t epoch);
  /// Starts `epoch` at this rank's sample position `position` (<= its
  /// samples per epoch): the batches from position / batch_size on, as
  /// start_epoch(epoch) would give them (how dlfeed.torch's DataLoader
  /// workers each read a contiguous run of the rank's batches).
  absl::Status start_epoch_at(uint64_t epoch, uint64_t position);
  /// On: once epoch e's batches are all planned and read, the pipeline goes
  /// on reading epoch e + 1 from its start (its batches wait behind e's end),
  /// so that start_epoch(e + 1) finds them ready. Off by default: a pipeline
  /// still running after an epoch ended refuses fork() children
  /// (pipeline::fork_check), and loaders that stage or unpack keep a quiet
  /// point between epochs (they never read ahead).
  void set_overlap_epochs(bool on);
  /// The next batch, nullptr at the end of the epoch, or the first error of
  /// any stage (naming file, offset and cause); after an error the epoch is over.
  absl::StatusOr<std::shared_ptr<const Batch>> next();
  /// start_epoch(e) and a range over its batches (throws dlfeed::Error).
  EpochRange epoch(uint64_t e);

  /// A resume point after the batches delivered so far (small bytes). A new
  /// Loader with the same options, restore(state) and start_epoch(epoch of
  /// the state) yields exactly the remaining batches.
  std::string state() const;
  /// Restores state(). A state saved by the same rank of the same world size
  /// resumes that rank exactly. Otherwise (an elastic restart: another world
  /// size or rank; strided strategies only) the state's rank position k on W
  /// ranks means the job consumed the global order's first G + k*W positions
  /// (every rank at step k, as in collective training), and this rank reads
  /// its equal share of the rest (OrderSpec::global_start); a state of any
  /// rank of the old job serves every rank of the new one.
  absl::Status restore(absl::string_view state);

  uint64_t num_samples() const;        // in the dataset
  uint64_t samples_per_epoch() const;  // this rank's
  uint64_t batches_per_epoch() const;  // this rank's
  /// Batches the running epoch has still to deliver: all of them after
  /// start_epoch, fewer from a restored position, and after an elastic
  /// restore this rank's share of what the old job left (not
  /// batches_per_epoch()); 0 at its end and before any epoch.
  uint64_t batches_left() const;
  const SampleIndex& index(size_t field = 0) const;
  const std::vector<std::string>& field_names() const;
  /// Per field: the dtype and sample shape its samples share (uniform_spec).
  const std::vector<FieldSpec>& field_specs() const;
  LoaderStats stats() const;
  const LoaderOptions& options() const;

  /// The built-in timing counters, AU and traces (docs/counters.md). Any
  /// thread may snapshot() or reset() them at any time; the trainer marks its
  /// compute with counters::ScopedTimer(loader->counters()).
  counters::Counters& counters();
  const counters::Counters& counters() const;
  /// The same, shared: stays valid after the loader is destroyed.
  std::shared_ptr<counters::Counters> counters_ptr() const;
  /// counters().snapshot(), as a struct and as JSON.
  counters::Snapshot counters_snapshot() const;
  std::string counters_json() const;
  /// Writes the recorded trace events (LoaderOptions::trace) to `path`.
  absl::Status write_trace(const std::string& path,
                           counters::TraceFormat format = counters::TraceFormat::kChrome) const;

 private:
  struct Impl;
  explicit Loader(std::unique_ptr<Impl> impl);
  // create() less its catch: memory or threads the system refuses are
  // create's error (ResourceExhausted), not an exception.
  static absl::StatusOr<std::unique_ptr<Loader>> create_or_throw(LoaderOptions options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlfeed
