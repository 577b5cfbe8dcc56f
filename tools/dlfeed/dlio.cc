// dlfeed dlio: runs a DLIO benchmark workload config (dlio_benchmark's
// configs/workload/*.yaml, plus Hydra overrides) with dlfeed's loader, and
// writes what DLIO writes: summary.json (same keys and units) and
// per_epoch_stats.json, with dlfeed's own counters beside DLIO's metrics.
//
// The phases follow DLIO 2.0.0's main.py: generate_data (DLIO's layout),
// then per epoch training (a step cap of floor(samples / batch / ranks), the
// emulated compute, checkpoints every N steps or after epochs), evaluation on
// valid/ and epoch checkpoints. Metrics are computed as DLIO's StatsCounter
// does: per block of steps between checkpoints, AU = the compute of all steps
// but the first / (block time - the first step's time), throughput = steps x
// batch / block time, weighted by steps over an epoch's blocks, summed
// (throughput) or averaged (AU) over ranks. Every YAML key is honoured or
// listed as ignored with the reason (dlio_config.cc, docs/dlio.md).
#include <fcntl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "command.h"
#include "compute_model.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/error.h"
#include "dlfeed/loader.h"
#include "dlio_config.h"
#include "gen/generate.h"
#include "io/raw_read.h"
#include "json.h"
#include "loader_flags.h"
#include "run_scale.h"

ABSL_FLAG(bool, dry_run, false,
          "Print the resolved settings, each key's mapping and the ignored keys, then stop (nothing is read or "
          "written)");
ABSL_DECLARE_FLAG(bool, evict);
ABSL_DECLARE_FLAG(bool, quiet);

namespace dlfeed::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using dlio::DlioConfig;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// DLIO's timestamps: datetime.now() as "%Y-%m-%dT%H:%M:%S.%f" (local time).
std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return absl::StrFormat("%s.%06d", buf, us);
}

double mean_of(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

/// numpy's std (population, ddof 0).
double std_of(const std::vector<double>& v) {
  if (v.empty()) return 0;
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

std::string num_list(const std::vector<double>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", ", [](std::string* o, double x) { o->append(json_number(x)); }), "]");
}

// --- the order --------------------------------------------------------------

/// DLIO's shuffles as a dlfeed strategy. DLIO's iterative sampler (the
/// tensorflow loader) shuffles the file list (file_shuffle) and the records
/// in a shuffle buffer of shuffle_size (sample_shuffle); its index sampler
/// (pytorch, dali) permutes the samples (sample_shuffle) and ignores
/// file_shuffle.
struct OrderMapping {
  std::string strategy = "sequential";
  uint64_t buffer_size = 0;
  uint64_t seed = 0;
  bool same_every_epoch = false;
  std::string why;
};

OrderMapping map_order(const DlioConfig& c) {
  OrderMapping m;
  const bool files = c.file_shuffle != "off", samples = c.sample_shuffle != "off";
  const bool random = (files && c.file_shuffle == "random") || (samples && c.sample_shuffle == "random");
  m.seed = static_cast<uint64_t>(c.seed);
  if (random) m.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  if (c.sampler() == "iterative") {
    if (samples) {
      m.strategy = "buffered_shuffle";
      m.buffer_size = static_cast<uint64_t>(c.shuffle_size);
      m.why = absl::StrCat("iterative sampler, sample_shuffle ", c.sample_shuffle, ": a shuffle buffer of ",
                           c.shuffle_size, " samples over ",
                           files ? "the shuffled file list"
                                 : "the file list (dlfeed's buffer reads a shuffled file list; DLIO's does not)");
    } else if (files) {
      m.strategy = "file_shuffle";
      m.why = "iterative sampler, file_shuffle only: the file list shuffled, samples in file order";
    } else {
      m.why = "iterative sampler, no shuffle: file order";
    }
    m.same_every_epoch = !c.seed_change_epoch;
  } else {
    if (samples) {
      m.strategy = "global_shuffle";
      m.why = absl::StrCat("index sampler, sample_shuffle ", c.sample_shuffle,
                           ": a permutation of all samples (DLIO permutes each rank's contiguous range)");
      // DLIO's index sampler seeds numpy with train.seed at every epoch.
      m.same_every_epoch = c.sample_shuffle == "seed" || !c.seed_change_epoch;
      if (m.same_every_epoch) absl::StrAppend(&m.why, "; the same order every epoch, as DLIO's");
    } else {
      m.why = "index sampler, no sample_shuffle: sample order";
    }
    if (files) absl::StrAppend(&m.why, "; file_shuffle has no effect with the index sampler (none in DLIO either)");
  }
  if (random) absl::StrAppend(&m.why, absl::StrFormat("; 'random': seed %llu drawn now", m.seed));
  return m;
}

// --- the dataset ------------------------------------------------------------

size_t digits(uint64_t n) { return absl::StrCat(n).size(); }

/// The path DLIO's generator gives file i of `count` in `split`.
std::string dlio_path(const DlioConfig& c, const std::string& split, uint64_t i, uint64_t count, uint64_t subfolders) {
  fs::path p = fs::path(c.data_dir()) / split;
  if (subfolders > 1) p /= absl::StrFormat("%0*d", static_cast<int>(digits(subfolders)), i % subfolders);
  return (p / gen::dlio_file_name(c.file_prefix, i, count, c.extension())).string();
}

/// Writes the dataset as DLIO's generator lays it out: train/ then valid/,
/// each file's two sides drawn from normal(side, side_stdev) (DLIO's
/// get_dimension; dlfeed's generator, not numpy's, so not DLIO's values).
void generate(const DlioConfig& c, bool quiet) {
  const auto t0 = Clock::now();
  const uint64_t train = static_cast<uint64_t>(c.num_files_train), valid = static_cast<uint64_t>(c.num_files_eval);
  const uint64_t spf = static_cast<uint64_t>(c.num_samples_per_file);
  const int64_t side = std::max<int64_t>(1, c.dimension());
  const double side_stdev = c.record_length_stdev / 2.0 / std::sqrt(c.record_length);
  ComputeModel draw(static_cast<double>(side), side_stdev, 10);  // DLIO seeds its generator with 10
  gen::Compression compression = gen::Compression::kNone;
  if (c.compression != "none") {
    const bool ok = (c.format == "hdf5" && c.compression == "gzip") || (c.format == "npz" && c.compression == "zip");
    if (!ok) {
      throw Error(absl::UnimplementedError(absl::StrCat("workload.dataset.compression: dlfeed generates ", c.format,
                                                        " with compression ", c.format == "hdf5" ? "gzip" : "zip",
                                                        " or none, not ", c.compression)));
    }
    compression = gen::Compression::kDeflate;
  }
  uint64_t bytes = 0;
  for (const bool is_train : {true, false}) {
    const uint64_t count = is_train ? train : valid;
    const std::string split = is_train ? "train" : "valid";
    const uint64_t sub = static_cast<uint64_t>(is_train ? c.num_subfolders_train : c.num_subfolders_eval);
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t file_no = is_train ? i : train + i;
      gen::FileSpec f;
      f.path = dlio_path(c, split, i, count, sub);
      std::error_code ec;
      fs::create_directories(fs::path(f.path).parent_path(), ec);
      if (ec) throw_if_error(absl::InternalError(absl::StrCat(f.path, ": mkdir: ", ec.message())));
      const int64_t d1 = std::max<int64_t>(1, static_cast<int64_t>(draw.next()));
      const int64_t d2 = std::max<int64_t>(1, static_cast<int64_t>(draw.next()));
      f.sample_shape = {d1, d2};
      // A stdev far above the record length (e.g. record_length overridden, its stdev not) draws sides
      // no memory holds; say which keys, rather than fail to allocate.
      if (static_cast<double>(d1) * static_cast<double>(d2) * static_cast<double>(spf) > 16.0 * (1ull << 30)) {
        throw Error(absl::InvalidArgumentError(
            absl::StrCat(f.path, ": drew a ", d1, " x ", d2, " sample (", spf, " per file): over 16 GiB per file; ",
                         "workload.dataset.record_length_stdev (", c.record_length_stdev,
                         ") is too large for record_length (", c.record_length, ")")));
      }
      f.num_samples = spf;
      f.first_global_id = file_no * spf;
      f.seed = 10;
      f.zero_labels = true;
      f.compression = compression;
      f.level = static_cast<int>(c.compression_level);
      absl::Status st;
      if (c.format == "npz") {
        f.axis = SampleAxis::kLast;
        st = gen::write_npz_file(f);
      } else if (c.format == "npy") {
        f.axis = SampleAxis::kLast;
        st = gen::write_npy_file(f);
      } else if (c.format == "hdf5") {
        f.axis = SampleAxis::kFirst;
        f.data_names = {"records"};  // DLIO 2.0.0's dataset names
        f.label_name = "labels";
        f.chunk_samples = c.enable_chunking ? 1 : 0;
        st = gen::write_hdf5_file(f);
      } else {
        const fs::path idx = fs::path(c.data_dir()) / "index" / split;
        fs::create_directories(idx, ec);
        if (ec) throw_if_error(absl::InternalError(absl::StrCat(idx.string(), ": mkdir: ", ec.message())));
        f.index_path = (idx / (fs::path(f.path).filename().string() + ".idx")).string();
        st = gen::write_tfrecord_file(f);
      }
      throw_if_error(st);
      bytes += fs::file_size(f.path, ec);
    }
  }
  if (!quiet) {
    std::printf("generate_data: %llu train + %llu valid files (%.1f MB) in %s in %.3f s\n",
                static_cast<unsigned long long>(train), static_cast<unsigned long long>(valid), bytes / 1e6,
                c.data_dir().c_str(), since(t0));
  }
}

/// The files DLIO trains (or evaluates) on: the data files of
/// DIR/train (DIR/valid) with the format's extension, sorted, or those of its
/// subfolders sorted by name; the first `want` of them.
std::vector<std::string> dataset_files(const DlioConfig& c, const std::string& split, uint64_t want) {
  const fs::path dir = fs::path(c.data_dir()) / split;
  std::vector<std::string> direct, nested;
  std::error_code ec;
  const std::string ext = absl::StrCat(".", c.extension());
  if (fs::is_directory(dir, ec)) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.is_regular_file(ec) && absl::EndsWith(e.path().filename().string(), ext)) {
        direct.push_back(e.path().string());
      } else if (e.is_directory(ec)) {
        for (const auto& f : fs::directory_iterator(e.path(), ec)) {
          if (f.is_regular_file(ec) && absl::EndsWith(f.path().filename().string(), ext))
            nested.push_back(f.path().string());
        }
      }
    }
  }
  std::vector<std::string> files = direct.empty() ? nested : direct;
  if (direct.empty()) {
    std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
      return fs::path(a).filename() < fs::path(b).filename();
    });
  } else {
    std::sort(files.begin(), files.end());
  }
  if (files.size() < want) {
    throw Error(absl::NotFoundError(
        absl::StrCat(dir.string(), ": ", files.size(), " ", ext, " files where workload.dataset.num_files_",
                     split == "train" ? "train" : "eval", " asks for ", want,
                     "; generate them with ++workload.workflow.generate_data=True (as DLIO says)")));
  }
  files.resize(want);
  return files;
}

LoaderOptions loader_options(const DlioConfig& c, const std::vector<std::string>& files, uint32_t batch,
                             const OrderMapping& order, const ScaleOut& scale) {
  LoaderOptions o;
  o.paths = files;
  o.format.format = value_or_throw(parse_format(c.format));
  if (c.format == "npz") {
    o.format.axis = SampleAxis::kLast;
    o.fields = {"x"};  // DLIO's reader reads x, not the labels
  } else if (c.format == "npy") {
    o.format.axis = SampleAxis::kLast;
  } else if (c.format == "tfrecord") {
    o.fields = {"image"};
  }
  o.ragged = c.record_length_stdev > 0;  // files of different shapes
  o.batch_size = batch;
  o.drop_last_batch = true;  // DLIO drops the last partial batch
  o.order.strategy = order.strategy;
  o.order.seed = order.seed;
  o.order.drop_last = true;
  if (order.buffer_size) o.order.params.buffer_size = order.buffer_size;
  apply_loader_flags(o);
  // --evict measures the device: a dataset held in memory would not be read.
  if (absl::GetFlag(FLAGS_evict) && o.resident == "auto" && !flag_given("resident")) o.resident = "off";
  scale.configure(o);
  return o;
}

// --- checkpoints ------------------------------------------------------------

struct CheckpointResult {
  uint64_t files = 0, bytes = 0;
  double secs = 0;
};

/// Writes `bytes` zeros (DLIO's tensors are torch.randint(high=1): zeros).
void write_zeros(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_if_error(absl::InternalError(absl::StrCat(path, ": cannot create: ", std::strerror(errno))));
  static const std::vector<char> zeros(4 << 20, 0);
  uint64_t left = bytes;
  while (left > 0) {
    const ssize_t n = ::write(fd, zeros.data(), std::min<uint64_t>(left, zeros.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      throw_if_error(absl::InternalError(absl::StrCat(path, ": write failed: ", std::strerror(err))));
    }
    left -= static_cast<uint64_t>(n);
  }
  if (::close(fd) != 0) throw_if_error(absl::InternalError(absl::StrCat(path, ": close failed")));
}

/// DLIO's BaseCheckpointing.checkpoint(): model-E-S-R (model_size bytes),
/// optimizer-E-S-R (3 x sum(optimization_groups)), layer-L-E-S-R (each
/// sum(layer_parameters)) for num_layers (+ tensor_parallelism when > 1)
/// layers on ranks that are multiples of pipeline_parallelism.
CheckpointResult checkpoint(const DlioConfig& c, uint64_t epoch, uint64_t step, int rank) {
  CheckpointResult r;
  if (c.checkpoint_type == "rank_zero" && rank != 0) return r;
  const auto t0 = Clock::now();
  std::error_code ec;
  fs::create_directories(c.checkpoint_folder, ec);
  if (ec) throw_if_error(absl::InternalError(absl::StrCat(c.checkpoint_folder, ": mkdir: ", ec.message())));
  const std::string ext = c.framework == "pytorch" ? "pt" : "pb";
  auto put = [&](const std::string& stem, uint64_t bytes) {
    write_zeros((fs::path(c.checkpoint_folder) / absl::StrCat(stem, ".", ext)).string(), bytes);
    ++r.files;
    r.bytes += bytes;
  };
  const std::string tag = absl::StrCat(epoch, "-", step, "-", rank);
  if (c.model_size > 0) put(absl::StrCat("model-", tag), static_cast<uint64_t>(c.model_size));
  uint64_t groups = 0;
  for (int64_t g : c.optimization_groups) groups += static_cast<uint64_t>(std::max<int64_t>(0, g));
  if (!c.optimization_groups.empty()) put(absl::StrCat("optimizer-", tag), 3 * groups);
  uint64_t layer = 0;
  for (int64_t p : c.layer_parameters) layer += static_cast<uint64_t>(std::max<int64_t>(0, p));
  if (!c.layer_parameters.empty() && c.num_layers > 0 && rank % c.pipeline_parallelism == 0) {
    const int64_t layers = c.num_layers + (c.tensor_parallelism > 1 ? c.tensor_parallelism : 0);
    for (int64_t l = 0; l < layers; ++l) put(absl::StrCat("layer-", l, "-", tag), layer);
  }
  r.secs = since(t0);
  return r;
}

// --- the run ----------------------------------------------------------------

/// One block of steps (between checkpoints) or one evaluation, as DLIO's
/// StatsCounter measures it.
struct Block {
  std::string start, end;
  double secs = 0;
  std::vector<double> compute, proc;  // per step: drawn compute, step time
  double au_percent() const {
    double c = 0;
    for (size_t i = 1; i < compute.size(); ++i) c += compute[i];
    if (c == 0) return 0;
    const double t = secs - (proc.empty() ? 0 : proc[0]);
    return t > 0 ? 100.0 * c / t : 0;
  }
  double throughput(uint64_t batch) const {
    return secs > 0 ? static_cast<double>(compute.size()) / secs * static_cast<double>(batch) : 0;
  }
};

struct Ckpt {
  std::string start, end;
  CheckpointResult result;
  uint64_t step = 0;
};

struct EpochStats {
  std::string start, end;
  double secs = 0;
  std::vector<Block> blocks;
  std::vector<Ckpt> ckpts;  // after block i (steps) or the epoch's last
  std::optional<Block> eval;
  uint64_t steps = 0;
  double au = 0, throughput = 0;  // this rank's, steps-weighted over blocks
};

/// The phase loop over one loader: steps until the cap or the epoch's end,
/// each with its emulated compute, the per-step barrier, and the step hook
/// (checkpoints) that may end a block.
class Phase {
 public:
  Phase(Loader& loader, const ScaleOut& scale, ComputeModel compute)
      : loader_(loader), scale_(scale), compute_(std::move(compute)) {}

  /// Runs one epoch of at most `cap` steps. `after_step(step)` returns true
  /// when it ended the block (a checkpoint was written).
  template <class F>
  void run(uint64_t order_epoch, uint64_t cap, std::vector<Block>& blocks, F&& after_step) {
    blocks.emplace_back();
    Block* b = &blocks.back();
    b->start = timestamp();
    auto block_t0 = Clock::now();
    throw_if_error(loader_.start_epoch(order_epoch));
    auto t0 = Clock::now();
    for (uint64_t step = 1; step <= cap; ++step) {
      std::shared_ptr<const Batch> batch = value_or_throw(loader_.next());
      if (!batch) break;
      double t = 0;
      if (compute_.active()) {
        t = compute_.next();
        counters::ScopedTimer region(loader_.counters(), counters::Region::kCompute);
        std::this_thread::sleep_until(Clock::now() +
                                      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t)));
      }
      b->compute.push_back(t);
      b->proc.push_back(since(t0));
      batch.reset();
      scale_.end_step(loader_.counters());  // DLIO's comm.barrier() per step
      if (after_step(step, [&] {
            b->secs = std::chrono::duration<double>(Clock::now() - block_t0).count();
            b->end = timestamp();
          })) {
        blocks.emplace_back();
        b = &blocks.back();
        b->start = timestamp();
        block_t0 = Clock::now();
      }
      t0 = Clock::now();
    }
    b->secs = since(block_t0);
    b->end = timestamp();
    if (b->compute.empty() && blocks.size() > 1) blocks.pop_back();  // a checkpoint on the last step
  }

  const ComputeModel& compute() const { return compute_; }

 private:
  Loader& loader_;
  const ScaleOut& scale_;
  ComputeModel compute_;
};

// --- host facts (summary.json's host_* keys) ---------------------------------

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

/// DLIO's lines_to_dict: "key : value" lines of a /proc file, later ones
/// winning, "processor" left out.
std::string proc_dict(const char* path) {
  std::ifstream in(path);
  std::map<std::string, std::string> kv;
  std::vector<std::string> order;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, ':');
    if (parts.size() != 2) continue;
    const std::string k(absl::StripAsciiWhitespace(parts[0])), v(absl::StripAsciiWhitespace(parts[1]));
    if (k == "processor" || k.empty()) continue;
    if (!kv.count(k)) order.push_back(k);
    kv[k] = v;
  }
  return absl::StrCat("{",
                      absl::StrJoin(order, ", ",
                                    [&](std::string* o, const std::string& k) {
                                      absl::StrAppend(o, json_quote(k), ": ", json_quote(kv[k]));
                                    }),
                      "}");
}

double host_memory_gb() {
  const double pages = static_cast<double>(::sysconf(_SC_PHYS_PAGES));
  return pages * static_cast<double>(::sysconf(_SC_PAGESIZE)) / 1073741824.0;
}

std::string json_path_join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

std::string default_output_folder(const DlioConfig& c) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d-%H-%M-%S", &tm);
  return (fs::path("hydra_log") / c.model / buf).string();
}

void print_mapping(const DlioConfig& c, bool all) {
  if (all) {
    for (const auto& k : c.honoured)
      std::printf("honoured: %s = %s (%s)\n", k.key.c_str(), k.value.c_str(), k.note.c_str());
  }
  for (const auto& k : c.ignored) std::printf("ignored: %s (%s)\n", k.key.c_str(), k.note.c_str());
}

int run_phases(const DlioConfig& c, const std::string& config_path, const OrderMapping& order,
               const std::string& out_dir, ScaleOut& scale_out);

int run_dlio(const std::vector<std::string>& args) {
  if (args.empty() || dlio::is_override(args[0])) {
    throw Error(absl::InvalidArgumentError(
        "give a DLIO workload config first: dlfeed dlio CONFIG.yaml [++workload.SECTION.KEY=VALUE ...]"));
  }
  const std::string config_path = args[0];
  dlio::YamlNode workload = value_or_throw(dlio::parse_yaml(value_or_throw(read_text_file(config_path)), config_path));
  std::string hydra_dir;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!dlio::is_override(a)) {
      throw Error(absl::InvalidArgumentError(absl::StrCat(
          "'", a, "': one config only; the arguments after it are overrides like ++workload.reader.batch_size=4")));
    }
    absl::string_view v = a;
    absl::ConsumePrefix(&v, "++") || absl::ConsumePrefix(&v, "+");
    if (absl::ConsumePrefix(&v, "hydra.run.dir=")) {  // DLIO's output folder, as Hydra sets it
      hydra_dir = std::string(v);
      continue;
    }
    throw_if_error(dlio::apply_override(workload, a));
  }
  DlioConfig c = value_or_throw(dlio::load_config(workload));
  const bool quiet = absl::GetFlag(FLAGS_quiet);
  const OrderMapping order = map_order(c);
  std::string out_dir = !c.output_folder.empty() ? c.output_folder
                        : !hydra_dir.empty()     ? hydra_dir
                                                 : default_output_folder(c);

  // Under MPI, ranks other than 0 print nothing from here on (ScaleOut).
  const std::unique_ptr<ScaleOut> scale = ScaleOut::begin();
  std::printf("dlio: %s: model %s, %s, %lld train + %lld eval files x %lld samples, record_length %.0f B, batch %lld\n",
              config_path.c_str(), c.model.c_str(), c.format.c_str(), static_cast<long long>(c.num_files_train),
              static_cast<long long>(c.num_files_eval), static_cast<long long>(c.num_samples_per_file), c.record_length,
              static_cast<long long>(c.batch_size));
  std::printf("order: %s seed %llu (%s)\n", order.strategy.c_str(), static_cast<unsigned long long>(order.seed),
              order.why.c_str());
  print_mapping(c, absl::GetFlag(FLAGS_dry_run));
  if (absl::GetFlag(FLAGS_dry_run)) {
    std::printf("data: %s/train for training, %s/valid for evaluation; output: %s\n", c.data_dir().c_str(),
                c.data_dir().c_str(), out_dir.c_str());
    return 0;
  }

  try {
    return run_phases(c, config_path, order, out_dir, *scale);
  } catch (const std::exception& e) {
    // Said here: an exception leaving with MPI up aborts the job before main() could print it.
    if (scale->distributed()) std::fprintf(stderr, "dlfeed dlio: error on rank %d: %s\n", scale->rank(), e.what());
    throw;
  }
}

int run_phases(const DlioConfig& c, const std::string& config_path, const OrderMapping& order,
               const std::string& out_dir, ScaleOut& scale_out) {
  ScaleOut* scale = &scale_out;
  const bool quiet = absl::GetFlag(FLAGS_quiet);
  const int rank = scale->rank(), world = scale->size();
  const std::string start_ts = timestamp();
  const auto t_run = Clock::now();
  double generate_s = 0;
  if (c.generate_data) {
    const auto t0 = Clock::now();
    if (scale->is_root()) generate(c, quiet);
    scale->barrier();
    generate_s = since(t0);
  }
  if (c.generate_only) {
    std::printf("workflow.train is not True: generated only\n");
    return 0;
  }

  // Training reads the first num_files_train of train/, evaluation those of valid/, never each other's.
  const std::vector<std::string> train_files = dataset_files(c, "train", static_cast<uint64_t>(c.num_files_train));
  std::vector<std::string> eval_files;
  if (c.do_eval) eval_files = dataset_files(c, "valid", static_cast<uint64_t>(c.num_files_eval));
  std::printf("data: training on %zu files of %s/train%s\n", train_files.size(), c.data_dir().c_str(),
              c.do_eval ? absl::StrCat(", evaluating on ", eval_files.size(), " of ", c.data_dir(), "/valid").c_str()
                        : " (valid/ is not read: workflow.evaluation is off)");

  const uint64_t spf = static_cast<uint64_t>(c.num_samples_per_file);
  const uint64_t batch = static_cast<uint64_t>(c.batch_size), batch_eval = static_cast<uint64_t>(c.batch_size_eval);
  const uint64_t max_steps = spf * train_files.size() / batch / static_cast<uint64_t>(world);
  uint64_t cap = max_steps;
  if (c.total_training_steps > 0) {
    if (static_cast<uint64_t>(c.total_training_steps) > max_steps) {
      throw Error(absl::InvalidArgumentError(absl::StrCat("workload.train.total_training_steps: only enough data for ",
                                                          max_steps, " steps but ", c.total_training_steps,
                                                          " wanted (DLIO stops here too)")));
    }
    cap = static_cast<uint64_t>(c.total_training_steps);
  }
  const uint64_t eval_cap = spf * eval_files.size() / batch_eval / static_cast<uint64_t>(world);
  if (cap == 0) {
    throw Error(absl::InvalidArgumentError(absl::StrCat("no full batch: ", spf * train_files.size(), " samples over ",
                                                        world, " ranks in batches of ", batch)));
  }

  std::unique_ptr<Loader> train_loader =
      value_or_throw(Loader::create(loader_options(c, train_files, static_cast<uint32_t>(batch), order, *scale)));
  std::unique_ptr<Loader> eval_loader;
  if (c.do_eval) {
    eval_loader =
        value_or_throw(Loader::create(loader_options(c, eval_files, static_cast<uint32_t>(batch_eval), order, *scale)));
  }
  std::printf(
      "train: %llu steps per epoch of %llu samples on each of %d rank(s) (the last partial batch dropped); "
      "compute %.4g s/step%s\n",
      static_cast<unsigned long long>(cap), static_cast<unsigned long long>(batch), world, c.computation_time,
      c.computation_time_stdev > 0 ? absl::StrFormat(" (stdev %.4g s)", c.computation_time_stdev).c_str() : "");
  const bool evict = absl::GetFlag(FLAGS_evict);

  Phase train(*train_loader, *scale, ComputeModel(c.computation_time, c.computation_time_stdev, order.seed));
  std::optional<Phase> eval;
  if (eval_loader) eval.emplace(*eval_loader, *scale, ComputeModel(c.eval_time, c.eval_time_stdev, order.seed + 1));

  std::vector<EpochStats> epochs;
  int64_t next_eval_epoch = c.eval_after_epoch, next_ckpt_epoch = c.checkpoint_after_epoch;
  double train_s = 0, eval_s = 0, ckpt_s = 0;
  uint64_t ckpt_bytes = 0, ckpt_files = 0;
  for (int64_t epoch = 1; epoch <= c.epochs; ++epoch) {
    EpochStats es;
    es.start = timestamp();
    if (evict) throw_if_error(evict_pages(train_loader->index().files));
    scale->begin_epoch();
    const auto t0 = Clock::now();
    const uint64_t order_epoch = order.same_every_epoch ? 0 : static_cast<uint64_t>(epoch - 1);
    int64_t next_ckpt_step = c.steps_between_checkpoints;
    train.run(order_epoch, cap, es.blocks, [&](uint64_t step, auto&& end_block) {
      if (!(c.do_checkpoint && c.steps_between_checkpoints >= 0 && static_cast<int64_t>(step) == next_ckpt_step)) {
        return false;
      }
      end_block();
      Ckpt k;
      k.start = timestamp();
      k.result = checkpoint(c, static_cast<uint64_t>(epoch), step, rank);
      k.end = timestamp();
      k.step = step;
      es.ckpts.push_back(k);
      next_ckpt_step += c.steps_between_checkpoints;
      return true;
    });
    scale->barrier();
    es.secs = since(t0);
    scale->end_epoch(*train_loader, static_cast<uint64_t>(epoch - 1));  // --stage-wait
    es.end = timestamp();
    train_s += es.secs;
    if (c.do_checkpoint && c.steps_between_checkpoints < 0 && epoch == next_ckpt_epoch) {
      uint64_t steps = 0;
      for (const Block& b : es.blocks) steps += b.compute.size();
      Ckpt k;
      k.start = timestamp();
      k.result = checkpoint(c, static_cast<uint64_t>(epoch), steps, rank);
      k.end = timestamp();
      k.step = steps;
      es.ckpts.push_back(k);
      next_ckpt_epoch += c.epochs_between_checkpoints;
      scale->barrier();
    }
    for (const Ckpt& k : es.ckpts) {
      ckpt_s += k.result.secs;
      ckpt_bytes += k.result.bytes;
      ckpt_files += k.result.files;
    }
    double wa = 0, wt = 0;
    for (const Block& b : es.blocks) {
      es.steps += b.compute.size();
      wa += b.au_percent() * static_cast<double>(b.compute.size());
      wt += b.throughput(batch) * static_cast<double>(b.compute.size());
    }
    if (es.steps) {
      es.au = wa / static_cast<double>(es.steps);
      es.throughput = wt / static_cast<double>(es.steps);
    }
    if (!quiet) {
      std::printf("epoch %lld: %llu steps in %.3f s: AU %.2f%%, %.1f samples/s (this rank)%s\n",
                  static_cast<long long>(epoch), static_cast<unsigned long long>(es.steps), es.secs, es.au,
                  es.throughput,
                  es.ckpts.empty() ? ""
                                   : absl::StrFormat(
                                         "; %zu checkpoint(s), %.1f MB in %.3f s", es.ckpts.size(),
                                         [&] {
                                           double b = 0;
                                           for (const Ckpt& k : es.ckpts) b += k.result.bytes;
                                           return b / 1e6;
                                         }(),
                                         [&] {
                                           double s = 0;
                                           for (const Ckpt& k : es.ckpts) s += k.result.secs;
                                           return s;
                                         }())
                                         .c_str());
    }
    if (eval && epoch >= next_eval_epoch) {
      next_eval_epoch += c.epochs_between_evals;
      if (evict) throw_if_error(evict_pages(eval_loader->index().files));
      scale->barrier();
      const auto e0 = Clock::now();
      std::vector<Block> blocks;
      eval->run(order_epoch, eval_cap, blocks, [](uint64_t, auto&&) { return false; });
      scale->barrier();
      es.eval = blocks.front();
      eval_s += since(e0);
      if (!quiet) {
        std::printf("  eval: %zu steps in %.3f s: AU %.2f%%, %.1f samples/s (this rank)\n", es.eval->compute.size(),
                    es.eval->secs, es.eval->au_percent(), es.eval->throughput(batch_eval));
      }
    }
    epochs.push_back(std::move(es));
  }
  const double run_s = since(t_run);

  // The job's metrics: throughput summed over ranks, AU averaged (DLIO's allreduce).
  std::string mine;
  for (const EpochStats& e : epochs) {
    absl::StrAppend(&mine,
                    absl::StrFormat("%.17g %.17g %.17g %.17g;", e.au, e.throughput, e.eval ? e.eval->au_percent() : 0.0,
                                    e.eval ? e.eval->throughput(batch_eval) : 0.0));
  }
  absl::StrAppend(&mine, "|", host_name());
  const std::vector<std::string> all = scale->gather(mine);
  const counters::Snapshot train_snap = scale->summary(*train_loader, "");
  std::optional<counters::Snapshot> eval_snap;
  if (eval_loader) eval_snap = scale->summary(*eval_loader, "");
  if (!scale->is_root()) return 0;

  std::vector<double> train_au(epochs.size(), 0), train_tp(epochs.size(), 0), eval_au, eval_tp;
  std::set<std::string> hosts;
  for (const std::string& r : all) {
    std::vector<std::string> parts = absl::StrSplit(r, '|');
    hosts.insert(parts.size() > 1 ? parts[1] : "");
    std::vector<std::string> rows = absl::StrSplit(parts[0], ';', absl::SkipEmpty());
    for (size_t e = 0; e < rows.size() && e < epochs.size(); ++e) {
      double v[4] = {};
      std::sscanf(rows[e].c_str(), "%lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3]);
      train_au[e] += v[0] / static_cast<double>(all.size());
      train_tp[e] += v[1];
      if (epochs[e].eval) {
        if (eval_au.size() <= e) {
          eval_au.resize(e + 1, 0);
          eval_tp.resize(e + 1, 0);
        }
        eval_au[e] += v[2] / static_cast<double>(all.size());
        eval_tp[e] += v[3];
      }
    }
  }
  if (c.do_eval) {  // only the epochs that evaluated
    std::vector<double> a, t;
    for (size_t e = 0; e < epochs.size(); ++e) {
      if (epochs[e].eval) {
        a.push_back(eval_au[e]);
        t.push_back(eval_tp[e]);
      }
    }
    eval_au = a;
    eval_tp = t;
  }
  const double mb = c.record_length / 1024.0 / 1024.0;
  const int num_hosts = static_cast<int>(std::max<size_t>(1, hosts.size()));
  const int per_node = std::max(1, world / num_hosts);
  const double data_per_host_gb =
      static_cast<double>(static_cast<uint64_t>(per_node) * spf * train_files.size() / static_cast<uint64_t>(world)) *
      c.record_length / 1073741824.0;
  const double mem_gb = host_memory_gb();
  auto meet = [&](const std::vector<double>& au) { return mean_of(au) >= c.au * 100 ? "success" : "fail"; };

  std::string metric = absl::StrCat("{\"train_au_percentage\": ", num_list(train_au),
                                    ", \"train_au_mean_percentage\": ", json_number(mean_of(train_au)),
                                    ", \"train_au_meet_expectation\": ", json_quote(meet(train_au)),
                                    ", \"train_au_stdev_percentage\": ", json_number(std_of(train_au)),
                                    ", \"train_throughput_samples_per_second\": ", num_list(train_tp),
                                    ", \"train_throughput_mean_samples_per_second\": ", json_number(mean_of(train_tp)),
                                    ", \"train_throughput_stdev_samples_per_second\": ", json_number(std_of(train_tp)),
                                    ", \"train_io_mean_MB_per_second\": ", json_number(mean_of(train_tp) * mb),
                                    ", \"train_io_stdev_MB_per_second\": ", json_number(std_of(train_tp) * mb));
  if (c.do_eval) {
    absl::StrAppend(&metric, ", \"eval_au_percentage\": ", num_list(eval_au),
                    ", \"eval_au_mean_percentage\": ", json_number(mean_of(eval_au)),
                    ", \"eval_au_meet_expectation\": ", json_quote(meet(eval_au)),
                    ", \"eval_au_stdev_percentage\": ", json_number(std_of(eval_au)),
                    ", \"eval_throughput_samples_per_second\": ", num_list(eval_tp),
                    ", \"eval_throughput_mean_samples_per_second\": ", json_number(mean_of(eval_tp)),
                    ", \"eval_throughput_stdev_samples_per_second\": ", json_number(std_of(eval_tp)),
                    ", \"eval_io_mean_MB_per_second\": ", json_number(mean_of(eval_tp) * mb),
                    ", \"eval_io_stdev_MB_per_second\": ", json_number(std_of(eval_tp) * mb));
  }
  metric += "}";

  // dlfeed's own: how the config was mapped, the phases' times, the loader's counters.
  std::vector<std::string> per_epoch;
  for (size_t e = 0; e < epochs.size(); ++e) {
    const EpochStats& es = epochs[e];
    double cs = 0;
    uint64_t cb = 0;
    for (const Ckpt& k : es.ckpts) {
      cs += k.result.secs;
      cb += k.result.bytes;
    }
    per_epoch.push_back(absl::StrCat(
        "{\"epoch\": ", e + 1, ", \"steps\": ", es.steps, ", \"train_s\": ", json_number(es.secs),
        ", \"eval_s\": ", es.eval ? json_number(es.eval->secs) : "null", ", \"checkpoints\": ", es.ckpts.size(),
        ", \"checkpoint_s\": ", json_number(cs), ", \"checkpoint_bytes\": ", cb,
        ", \"checkpoint_MB_per_second\": ", json_number(cs > 0 ? cb / cs / 1048576.0 : 0), "}"));
  }
  auto uses = [](const std::vector<DlioConfig::KeyUse>& v) {
    return absl::StrCat("[",
                        absl::StrJoin(v, ", ",
                                      [](std::string* o, const DlioConfig::KeyUse& k) {
                                        absl::StrAppend(o, "{\"key\": ", json_quote(k.key),
                                                        ", \"value\": ", json_quote(k.value),
                                                        ", \"note\": ", json_quote(k.note), "}");
                                      }),
                        "]");
  };
  const std::string dlfeed = absl::StrCat(
      "{\"schema\": \"dlfeed.dlio/1\", \"config\": ", json_quote(config_path),
      ", \"data_folder\": ", json_quote(c.data_dir()), ", \"strategy\": ", json_quote(order.strategy),
      ", \"seed\": ", order.seed, ", \"order_note\": ", json_quote(order.why), ", \"steps_per_epoch\": ", cap,
      ", \"drop_last_batch\": true, \"generate_s\": ", json_number(generate_s), ", \"train_s\": ", json_number(train_s),
      ", \"eval_s\": ", json_number(eval_s), ", \"checkpoint_s\": ", json_number(ckpt_s),
      ", \"checkpoint_bytes\": ", ckpt_bytes, ", \"checkpoint_files\": ", ckpt_files,
      ", \"run_s\": ", json_number(run_s), ", \"epochs\": [", absl::StrJoin(per_epoch, ", "),
      "], \"compute\": {\"drawn_mean_s\": ", json_number(train.compute().drawn().mean),
      ", \"drawn_stdev_s\": ", json_number(train.compute().drawn().stdev()), ", \"steps\": ", train.compute().drawn().n,
      "}, \"honoured\": ", uses(c.honoured), ", \"ignored\": ", uses(c.ignored),
      ", \"train_counters\": ", train_snap.to_json(),
      ", \"eval_counters\": ", eval_snap ? eval_snap->to_json() : "null", "}");

  struct utsname u {};
  ::uname(&u);
  std::vector<std::string> caching(static_cast<size_t>(num_hosts), mem_gb <= data_per_host_gb ? "0" : "1");
  std::vector<double> mems(static_cast<size_t>(num_hosts), mem_gb);
  const std::string cpus = absl::StrCat(std::thread::hardware_concurrency());
  const std::string summary = absl::StrCat(
      "{\n    \"start\": ", json_quote(start_ts), ",\n    \"num_accelerators\": ", world,
      ",\n    \"num_hosts\": ", num_hosts, ",\n    \"hostname\": ", json_quote(host_name()),
      ",\n    \"metric\": ", metric, ",\n    \"num_files_train\": ", train_files.size(),
      ",\n    \"num_files_eval\": ", eval_files.size(), ",\n    \"num_samples_per_file\": ", spf,
      ",\n    \"host_cpu_count\": [", absl::StrJoin(std::vector<std::string>(num_hosts, cpus), ", "), "]",
      ",\n    \"host_processor_name\": ", json_quote(u.machine), ",\n    \"potential_caching\": [",
      absl::StrJoin(caching, ", "), "],\n    \"host_cpuinfo\": ", proc_dict("/proc/cpuinfo"),
      ",\n    \"host_meminfo\": ", proc_dict("/proc/meminfo"), ",\n    \"host_memory_GB\": ", num_list(mems),
      ",\n    \"data_size_per_host_GB\": ", json_number(data_per_host_gb), ",\n    \"epochs\": ", train_au.size(),
      ",\n    \"end\": ", json_quote(timestamp()), ",\n    \"dlfeed\": ", dlfeed, "\n}\n");

  // per_epoch_stats.json: DLIO's per-epoch record (durations as "%.2f" strings, as DLIO writes them).
  auto span = [](const std::string& s, const std::string& e, double secs) {
    return absl::StrCat("{\"start\": ", json_quote(s), ", \"end\": ", json_quote(e),
                        ", \"duration\": ", json_quote(absl::StrFormat("%.2f", secs)), "}");
  };
  std::vector<std::string> pes;
  for (size_t e = 0; e < epochs.size(); ++e) {
    const EpochStats& es = epochs[e];
    std::vector<std::string> m = {absl::StrCat("\"start\": ", json_quote(es.start))};
    for (size_t b = 0; b < es.blocks.size(); ++b) {
      m.push_back(
          absl::StrCat("\"block", b + 1, "\": ", span(es.blocks[b].start, es.blocks[b].end, es.blocks[b].secs)));
    }
    for (size_t k = 0; k < es.ckpts.size(); ++k) {
      m.push_back(
          absl::StrCat("\"ckpt", k + 1, "\": ", span(es.ckpts[k].start, es.ckpts[k].end, es.ckpts[k].result.secs)));
    }
    m.push_back(absl::StrCat("\"end\": ", json_quote(es.end)));
    m.push_back(absl::StrCat("\"duration\": ", json_quote(absl::StrFormat("%.2f", es.secs))));
    if (es.eval) m.push_back(absl::StrCat("\"eval\": ", span(es.eval->start, es.eval->end, es.eval->secs)));
    pes.push_back(absl::StrCat("    \"", e + 1, "\": {", absl::StrJoin(m, ", "), "}"));
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw_if_error(absl::InternalError(absl::StrCat(out_dir, ": mkdir: ", ec.message())));
  throw_if_error(write_text_file(json_path_join(out_dir, "summary.json"), summary));
  throw_if_error(write_text_file(json_path_join(out_dir, "per_epoch_stats.json"),
                                 absl::StrCat("{\n", absl::StrJoin(pes, ",\n"), "\n}\n")));

  // DLIO's closing lines, so scripts that grep its log find them here too.
  std::printf("[METRIC] ==========================================================\n");
  std::printf("[METRIC] Number of Simulated Accelerators: %d\n", world);
  std::printf("[METRIC] Training Accelerator Utilization [AU] (%%): %.4f (%.4f)\n", mean_of(train_au),
              std_of(train_au));
  std::printf("[METRIC] Training Throughput (samples/second): %.4f (%.4f)\n", mean_of(train_tp), std_of(train_tp));
  std::printf("[METRIC] Training I/O Throughput (MB/second): %.4f (%.4f)\n", mean_of(train_tp) * mb,
              std_of(train_tp) * mb);
  std::printf("[METRIC] train_au_meet_expectation: %s\n", meet(train_au));
  if (c.do_eval) {
    std::printf("[METRIC] Eval Accelerator Utilization [AU] (%%): %.4f (%.4f)\n", mean_of(eval_au), std_of(eval_au));
    std::printf("[METRIC] Eval Throughput (samples/second): %.6f (%.6f)\n", mean_of(eval_tp), std_of(eval_tp));
    std::printf("[METRIC] Eval Throughput (MB/second): %.6f (%.6f)\n", mean_of(eval_tp) * mb, std_of(eval_tp) * mb);
    std::printf("[METRIC] eval_au_meet_expectation: %s\n", meet(eval_au));
  }
  std::printf("[METRIC] ==========================================================\n");
  std::printf("times: train %.3f s, eval %.3f s, checkpoint %.3f s (%llu files, %.1f MB)%s\n", train_s, eval_s, ckpt_s,
              static_cast<unsigned long long>(ckpt_files), ckpt_bytes / 1e6,
              generate_s > 0 ? absl::StrFormat(", generate %.3f s", generate_s).c_str() : "");
  std::printf("summary: %s\n", json_path_join(out_dir, "summary.json").c_str());
  return 0;
}

std::vector<FlagGroup> dlio_flags() {
  return {flag_group("", FLAGS_dry_run, FLAGS_evict, FLAGS_quiet), loader_flags(), scale_out_flags()};
}

}  // namespace

DLFEED_COMMAND(dlio,
               "run a DLIO benchmark workload YAML (with ++workload.KEY=VALUE overrides): generate, train, "
               "evaluate, checkpoint; writes DLIO's summary.json",
               "CONFIG.yaml [OVERRIDE...]", run_dlio, dlio_flags);

}  // namespace dlfeed::cli
