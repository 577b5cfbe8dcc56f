// SPDX-License-Identifier: Apache-2.0
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
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "command.h"
#include "compute_model.h"
#include "dev/raw_read.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/error.h"
#include "dlio_config.h"
#include "dlio_internal.h"
#include "json.h"
#include "loader_flags.h"
#include "run_scale.h"

ABSL_FLAG(bool, dry_run, false,
          "Print the resolved settings, each key's mapping and the ignored keys, then stop (nothing is read or "
          "written)");
ABSL_DECLARE_FLAG(bool, evict);
ABSL_DECLARE_FLAG(bool, quiet);

namespace dlfeed::cli {
namespace dlio {
namespace {

/// The phase loop over one loader: steps until the cap or the epoch's end,
/// each with its emulated compute, the per-step barrier, and the step hook
/// (checkpoints) that may end a block.
class Phase {
 public:
  Phase(Loader& loader, const ScaleOut& scale, ComputeModel compute)
      : loader_(loader), scale_(scale), compute_(compute) {}

  /// Runs one epoch of at most `cap` steps. `after_step(step)` returns true
  /// when it ended the block (a checkpoint was written).
  template <class F>
  void run(uint64_t order_epoch, uint64_t cap, std::vector<Block>& blocks, F&& after_step) {
    blocks.emplace_back();
    Block* b = &blocks.back();
    b->start = timestamp();
    auto block_t0 = Clock::now();
    // As DLIO's loop takes its first step's time from before its loader's
    // iterator starts: the epoch's start-up is in the first step, which AU
    // leaves out, not in the compute-free time of the others.
    auto t0 = block_t0;
    throw_if_error(loader_.start_epoch(order_epoch));
    uint64_t steps = 0;
    for (uint64_t step = 1; step <= cap; ++step) {
      std::shared_ptr<const Batch> batch = value_or_throw(loader_.next());
      if (!batch) break;
      steps = step;
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
    // The cap reached at the epoch's last batch: its end is taken too, so
    // that the counters close the epoch complete, not cut short.
    if (steps == cap && cap >= loader_.batches_per_epoch()) {
      (void)value_or_throw(loader_.next());
    } else if (steps == cap) {  // cut short (total_training_steps): its last step ends here, not at a next()
      loader_.counters().step_boundary(loader_.counters().now());
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

void print_mapping(const DlioConfig& c, bool all) {
  if (all) {
    for (const auto& k : c.honoured)
      std::printf("honoured: %s = %s (%s)\n", k.key.c_str(), k.value.c_str(), k.note.c_str());
  }
  for (const auto& k : c.ignored) std::printf("ignored: %s (%s)\n", k.key.c_str(), k.note.c_str());
}

/// The loader's options for `files`: the format's fields, DLIO's dropped last
/// batch, the order, then the loader and scale-out flags.
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
  apply_loader_flags(o, absl::GetFlag(FLAGS_evict));
  scale.configure(o);
  return o;
}

/// Reads CONFIG.yaml and applies the overrides after it; hydra.run.dir=DIR
/// (DLIO's output folder, as Hydra sets it) goes to *hydra_dir.
DlioConfig load_workload(const std::vector<std::string>& args, std::string* hydra_dir) {
  if (args.empty() || is_override(args[0])) {
    throw Error(absl::InvalidArgumentError(
        "give a DLIO workload config first: dlfeed dlio CONFIG.yaml [++workload.SECTION.KEY=VALUE ...]"));
  }
  const std::string& config_path = args[0];
  YamlNode workload = value_or_throw(parse_yaml(value_or_throw(read_text_file(config_path)), config_path));
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!is_override(a)) {
      throw Error(absl::InvalidArgumentError(absl::StrCat(
          "'", a, "': one config only; the arguments after it are overrides like ++workload.reader.batch_size=4")));
    }
    absl::string_view v = a;
    absl::ConsumePrefix(&v, "++") || absl::ConsumePrefix(&v, "+");
    if (absl::ConsumePrefix(&v, "hydra.run.dir=")) {
      *hydra_dir = std::string(v);
      continue;
    }
    throw_if_error(apply_override(workload, a));
  }
  return value_or_throw(load_config(workload));
}

/// The steps of an epoch over `files` training files: DLIO's
/// floor(samples / batch / ranks), or total_training_steps, which must not
/// exceed it (an error, as DLIO's exit).
uint64_t check_training_steps(const DlioConfig& c, uint64_t files, int world) {
  const uint64_t max_steps = static_cast<uint64_t>(c.num_samples_per_file) * files /
                             static_cast<uint64_t>(c.batch_size) / static_cast<uint64_t>(world);
  if (c.total_training_steps <= 0) return max_steps;
  if (static_cast<uint64_t>(c.total_training_steps) > max_steps) {
    throw Error(absl::InvalidArgumentError(absl::StrCat("workload.train.total_training_steps: only enough data for ",
                                                        max_steps, " steps but ", c.total_training_steps,
                                                        " wanted (DLIO stops here too, before generating data)")));
  }
  return static_cast<uint64_t>(c.total_training_steps);
}

/// The files hold the samples the YAML says they do: the steps, the bytes
/// and the samples DLIO reads (the first num_samples_per_file of each file)
/// follow from it, so other data is an error, not another workload.
void check_samples_per_file(const DlioConfig& c, const Loader& loader, uint64_t files, const char* folder) {
  const SampleIndex& index = loader.index();
  const uint64_t want = static_cast<uint64_t>(c.num_samples_per_file);
  for (uint64_t f = 0; f < index.num_files(); ++f) {
    const uint64_t held = index.file_begin[f + 1] - index.file_begin[f];
    if (held == want) continue;
    throw Error(absl::InvalidArgumentError(absl::StrCat(
        c.data_dir(), "/", folder, ": ", index.files[f], " holds ", held, " samples, where ",
        "workload.dataset.num_samples_per_file says ", want, " (", files,
        " files): generate the data again (workflow.generate_data) or set num_samples_per_file to what it was "
        "generated with")));
  }
}

/// What training and evaluation read: the files, the steps per epoch, the loaders.
struct Data {
  std::vector<std::string> train_files, eval_files;
  uint64_t spf = 0, batch = 0, batch_eval = 0, cap = 0, eval_cap = 0;
  std::unique_ptr<Loader> train_loader, eval_loader;
};

Data open_data(const DlioConfig& c, const OrderMapping& order, const ScaleOut& scale) {
  Data d;
  const int world = scale.size();
  // Training reads the first num_files_train of train/, evaluation those of valid/, never each other's.
  d.train_files = dataset_files(c, "train", static_cast<uint64_t>(c.num_files_train));
  if (c.do_eval) d.eval_files = dataset_files(c, "valid", static_cast<uint64_t>(c.num_files_eval));
  std::printf("data: training on %zu files of %s/train%s\n", d.train_files.size(), c.data_dir().c_str(),
              c.do_eval ? absl::StrCat(", evaluating on ", d.eval_files.size(), " of ", c.data_dir(), "/valid").c_str()
                        : " (valid/ is not read: workflow.evaluation is off)");

  d.spf = static_cast<uint64_t>(c.num_samples_per_file);
  d.batch = static_cast<uint64_t>(c.batch_size);
  d.batch_eval = static_cast<uint64_t>(c.batch_size_eval);
  d.cap = check_training_steps(c, d.train_files.size(), world);
  d.eval_cap = d.spf * d.eval_files.size() / d.batch_eval / static_cast<uint64_t>(world);
  if (d.cap == 0) {
    throw Error(absl::InvalidArgumentError(absl::StrCat("no full batch: ", d.spf * d.train_files.size(),
                                                        " samples over ", world, " ranks in batches of ", d.batch)));
  }

  d.train_loader =
      value_or_throw(Loader::create(loader_options(c, d.train_files, static_cast<uint32_t>(d.batch), order, scale)));
  check_samples_per_file(c, *d.train_loader, d.train_files.size(), "train");
  if (c.do_eval) {
    d.eval_loader = value_or_throw(
        Loader::create(loader_options(c, d.eval_files, static_cast<uint32_t>(d.batch_eval), order, scale)));
    check_samples_per_file(c, *d.eval_loader, d.eval_files.size(), "valid");
  }
  std::printf(
      "train: %llu steps per epoch of %llu samples on each of %d rank(s) (the last partial batch dropped); "
      "compute %.4g s/step%s\n",
      static_cast<unsigned long long>(d.cap), static_cast<unsigned long long>(d.batch), world, c.computation_time,
      c.computation_time_stdev > 0 ? absl::StrFormat(" (stdev %.4g s)", c.computation_time_stdev).c_str() : "");
  return d;
}

/// The epochs: training (with checkpoints every N steps or after the
/// epochs due), then evaluation after the epochs due, as DLIO's main.py.
class EpochLoop {
 public:
  EpochLoop(const DlioConfig& c, ScaleOut& scale, Data& d, RunRecord& r)
      : c_(c),
        scale_(scale),
        d_(d),
        r_(r),
        train_(*d.train_loader, scale, ComputeModel(c.computation_time, c.computation_time_stdev, r.order.seed)),
        next_eval_epoch_(c.eval_after_epoch),
        next_ckpt_epoch_(c.checkpoint_after_epoch) {
    if (d.eval_loader)
      eval_.emplace(*d.eval_loader, scale, ComputeModel(c.eval_time, c.eval_time_stdev, r.order.seed + 1));
  }

  void run_epochs() {
    for (int64_t epoch = 1; epoch <= c_.epochs; ++epoch) {
      EpochStats es;
      const uint64_t order_epoch = r_.order.same_every_epoch ? 0 : static_cast<uint64_t>(epoch - 1);
      train_epoch(epoch, order_epoch, es);
      tally(epoch, es);
      if (eval_ && epoch >= next_eval_epoch_) evaluate(order_epoch, es);
      r_.epochs.push_back(std::move(es));
    }
    r_.drawn = train_.compute().drawn();
  }

 private:
  Ckpt write_checkpoint(int64_t epoch, uint64_t step) const {
    Ckpt k;
    k.start = timestamp();
    k.result = checkpoint(c_, static_cast<uint64_t>(epoch), step, scale_.rank());
    k.end = timestamp();
    k.step = step;
    return k;
  }

  void train_epoch(int64_t epoch, uint64_t order_epoch, EpochStats& es) {
    if (evict_) throw_if_error(evict_pages(d_.train_loader->index().files));
    es.start = timestamp();  // after the eviction, as the time is: duration = end - start, as DLIO's
    scale_.begin_epoch();
    const auto t0 = Clock::now();
    int64_t next_ckpt_step = c_.steps_between_checkpoints;
    train_.run(order_epoch, d_.cap, es.blocks, [&](uint64_t step, auto&& end_block) {
      if (!(c_.do_checkpoint && c_.steps_between_checkpoints >= 0 && static_cast<int64_t>(step) == next_ckpt_step)) {
        return false;
      }
      end_block();
      es.ckpts.push_back(write_checkpoint(epoch, step));
      next_ckpt_step += c_.steps_between_checkpoints;
      return true;
    });
    scale_.barrier();
    // DLIO's _train writes the epoch-end checkpoint before end_train: the
    // epoch's end and time include it.
    checkpoint_after_epoch(epoch, es);
    es.secs = since(t0);
    es.end = timestamp();
    scale_.end_epoch(*d_.train_loader, static_cast<uint64_t>(epoch - 1));  // --stage-wait
    r_.train_s += es.secs;
  }

  void checkpoint_after_epoch(int64_t epoch, EpochStats& es) {
    if (!(c_.do_checkpoint && c_.steps_between_checkpoints < 0 && epoch == next_ckpt_epoch_)) return;
    uint64_t steps = 0;
    for (const Block& b : es.blocks) steps += b.compute.size();
    es.ckpts.push_back(write_checkpoint(epoch, steps));
    next_ckpt_epoch_ += c_.epochs_between_checkpoints;
    scale_.barrier();
  }

  /// The epoch's checkpoint totals and this rank's AU and throughput.
  void tally(int64_t epoch, EpochStats& es) {
    double ckpt_bytes = 0, ckpt_s = 0;
    for (const Ckpt& k : es.ckpts) {
      r_.ckpt_s += k.result.secs;
      r_.ckpt_bytes += k.result.bytes;
      r_.ckpt_files += k.result.files;
      ckpt_bytes += k.result.bytes;
      ckpt_s += k.result.secs;
    }
    double wa = 0, wt = 0;
    for (const Block& b : es.blocks) {
      es.steps += b.compute.size();
      wa += b.au_percent() * static_cast<double>(b.compute.size());
      wt += b.throughput(d_.batch) * static_cast<double>(b.compute.size());
    }
    if (es.steps) {
      es.au = wa / static_cast<double>(es.steps);
      es.throughput = wt / static_cast<double>(es.steps);
    }
    if (!quiet_) {
      std::printf(
          "epoch %lld: %llu steps in %.3f s: AU %.2f%%, %.1f samples/s (this rank)%s\n", static_cast<long long>(epoch),
          static_cast<unsigned long long>(es.steps), es.secs, es.au, es.throughput,
          es.ckpts.empty()
              ? ""
              : absl::StrFormat("; %zu checkpoint(s), %.1f MB in %.3f s", es.ckpts.size(), ckpt_bytes / 1e6, ckpt_s)
                    .c_str());
    }
  }

  void evaluate(uint64_t order_epoch, EpochStats& es) {
    next_eval_epoch_ += c_.epochs_between_evals;
    if (evict_) throw_if_error(evict_pages(d_.eval_loader->index().files));
    scale_.barrier();
    const auto e0 = Clock::now();
    std::vector<Block> blocks;
    eval_->run(order_epoch, d_.eval_cap, blocks, [](uint64_t, auto&&) { return false; });
    scale_.barrier();
    es.eval = blocks.front();
    r_.eval_s += since(e0);
    if (!quiet_) {
      std::printf("  eval: %zu steps in %.3f s: AU %.2f%%, %.1f samples/s (this rank)\n", es.eval->compute.size(),
                  es.eval->secs, es.eval->au_percent(), es.eval->throughput(d_.batch_eval));
    }
  }

  const DlioConfig& c_;
  ScaleOut& scale_;
  Data& d_;
  RunRecord& r_;
  Phase train_;
  std::optional<Phase> eval_;
  int64_t next_eval_epoch_, next_ckpt_epoch_;
  const bool quiet_ = absl::GetFlag(FLAGS_quiet);
  const bool evict_ = absl::GetFlag(FLAGS_evict);
};

/// The run after setup: generate_data, the epochs, the summary.
int run_phases(const DlioConfig& c, const std::string& config_path, const OrderMapping& order,
               const std::string& out_dir, ScaleOut& scale) {
  RunRecord r;
  r.config_path = config_path;
  r.out_dir = out_dir;
  r.order = order;
  r.start_ts = timestamp();
  const auto t_run = Clock::now();
  // The keys that decide the collectives (generation's barrier, the steps,
  // evaluations and checkpoints): the same on every rank.
  scale.agree({{"workload.dataset", absl::StrCat(c.format, " ", c.num_files_train, "+", c.num_files_eval, " files x ",
                                                 c.num_samples_per_file, " in ", c.data_dir())},
               {"workload.reader.batch_size", absl::StrCat(c.batch_size, "/", c.batch_size_eval)},
               {"workload.train", absl::StrCat(c.epochs, " epochs, ", c.total_training_steps, " steps, seed ", c.seed)},
               {"workload.workflow", absl::StrCat(c.generate_data, c.generate_only, c.do_eval, c.do_checkpoint)},
               {"workload evaluation and checkpoint epochs",
                absl::StrCat(c.eval_after_epoch, ",", c.epochs_between_evals, ",", c.checkpoint_after_epoch, ",",
                             c.epochs_between_checkpoints, ",", c.steps_between_checkpoints)},
               {"the order", absl::StrCat(order.strategy, " seed ", order.seed)}});
  // DLIO's StatsCounter refuses a total_training_steps the configured data
  // cannot give when it is made (in DLIOBenchmark.__init__, whatever the
  // workflow), before generate_data writes anything.
  check_training_steps(c, static_cast<uint64_t>(c.num_files_train), scale.size());
  if (c.generate_data && c.storage_type == "s3") {
    throw Error(absl::UnimplementedError(absl::StrCat(
        "workload.workflow.generate_data with storage_type s3: dlfeed generates into local files only; generate "
        "with a local storage_root and upload the data folder to ",
        c.data_dir(), "/ (or generate with DLIO)")));
  }
  if (c.generate_data) {
    const auto t0 = Clock::now();
    if (scale.is_root()) generate(c, absl::GetFlag(FLAGS_quiet));
    scale.barrier();
    r.generate_s = since(t0);
  }
  if (c.generate_only) {
    std::printf("workflow.train is not True: generated only\n");
    return 0;
  }
  Data d = open_data(c, order, scale);
  r.train_files = d.train_files.size();
  // As DLIO writes it: the configured value, evaluated or not.
  r.eval_files = c.do_eval ? d.eval_files.size() : static_cast<size_t>(c.num_files_eval);
  r.spf = d.spf;
  r.batch = d.batch;
  r.batch_eval = d.batch_eval;
  r.cap = d.cap;
  EpochLoop(c, scale, d, r).run_epochs();
  r.run_s = since(t_run);
  write_summary(c, r, scale, *d.train_loader, d.eval_loader.get());
  return 0;
}

int run_dlio(const std::vector<std::string>& args) {
  std::string hydra_dir;
  const DlioConfig c = load_workload(args, &hydra_dir);
  const std::string& config_path = args[0];
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
  if (c.do_checkpoint && c.framework == "tensorflow") {
    std::printf(
        "note: checkpoints are written at their full sizes; DLIO 2.0.0's tf.train.Checkpoint saves none of its "
        "tensors (about 330 B a file whatever model_size says; docs/dlio.md)\n");
  }
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

std::vector<FlagGroup> dlio_flags() {
  return {flag_group("", FLAGS_dry_run, FLAGS_evict, FLAGS_quiet), loader_flags(), scale_out_flags()};
}

}  // namespace

DLFEED_COMMAND(dlio,
               "run a DLIO benchmark workload YAML (with ++workload.KEY=VALUE overrides): generate, train, "
               "evaluate, checkpoint; writes DLIO's summary.json",
               "CONFIG.yaml [OVERRIDE...]", run_dlio, dlio_flags);

}  // namespace dlio
}  // namespace dlfeed::cli
