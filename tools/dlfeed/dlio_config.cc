// SPDX-License-Identifier: Apache-2.0
// `dlfeed dlio`'s configuration: Hydra overrides and DLIO's keys mapped to
// dlfeed's settings (see dlio_config.h; the YAML parser is yaml_subset.cc).
#include "dlio_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dlfeed/error.h"

namespace dlfeed::cli::dlio {
namespace {

absl::Status error_at(const std::string& origin, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", what));
}

// --- typed values -----------------------------------------------------------

std::string found(const YamlNode& n) {
  switch (n.kind) {
    case YamlNode::Kind::kNull: return "nothing";
    case YamlNode::Kind::kMap: return "a mapping";
    case YamlNode::Kind::kList: return absl::StrCat("the sequence ", n.text());
    case YamlNode::Kind::kScalar:
      return n.quoted ? absl::StrCat("the string '", n.scalar, "'") : absl::StrCat("'", n.scalar, "'");
  }
  return "?";
}

absl::Status expected(const YamlNode& n, const std::string& key, absl::string_view what) {
  return error_at(n.origin, absl::StrCat(key, ": expected ", what, ", found ", found(n)));
}

absl::Status get_bool(const YamlNode& n, const std::string& key, bool* out) {
  if (n.kind == YamlNode::Kind::kScalar && !n.quoted) {
    const std::string v = absl::AsciiStrToLower(n.scalar);
    if (v == "true" || v == "yes" || v == "on") {
      *out = true;
      return absl::OkStatus();
    }
    if (v == "false" || v == "no" || v == "off") {
      *out = false;
      return absl::OkStatus();
    }
  }
  return expected(n, key, "True or False");
}

// A plain scalar as a number's text: without its '_'s (4_096 is 4096).
std::string without_underscores(const std::string& scalar) {
  std::string v;
  for (char c : scalar) {
    if (c != '_') v += c;
  }
  return v;
}

// YAML 1.1, as DLIO's reader (PyYAML under OmegaConf) takes a plain scalar:
// 010 is octal 8 and 09 a string. Neither is read as the decimal it looks
// like. Quoted scalars and other nodes pass.
absl::Status no_leading_zero(const YamlNode& n, const std::string& key) {
  if (n.kind != YamlNode::Kind::kScalar || n.quoted) return absl::OkStatus();
  const std::string plain = without_underscores(n.scalar);
  absl::string_view v = plain;
  if (!v.empty() && (v[0] == '+' || v[0] == '-')) v.remove_prefix(1);
  if (v.size() < 2 || v[0] != '0' || !std::all_of(v.begin(), v.end(), absl::ascii_isdigit)) return absl::OkStatus();
  const bool octal = v.find_first_of("89") == absl::string_view::npos;
  return error_at(n.origin, absl::StrCat(key, ": ", n.scalar, " has a leading zero, which YAML 1.1 (DLIO's reader) ",
                                         octal ? "takes as an octal number" : "takes as a string",
                                         "; write the number without it"));
}

absl::Status get_int(const YamlNode& n, const std::string& key, int64_t* out) {
  DLFEED_RETURN_IF_ERROR(no_leading_zero(n, key));
  if (n.kind == YamlNode::Kind::kScalar && !n.quoted && absl::SimpleAtoi(without_underscores(n.scalar), out)) {
    return absl::OkStatus();
  }
  return expected(n, key, "an integer");
}

absl::Status get_double(const YamlNode& n, const std::string& key, double* out) {
  DLFEED_RETURN_IF_ERROR(no_leading_zero(n, key));
  if (n.kind == YamlNode::Kind::kScalar && !n.quoted && absl::SimpleAtod(without_underscores(n.scalar), out) &&
      std::isfinite(*out)) {
    return absl::OkStatus();
  }
  return expected(n, key, "a number");
}

absl::Status get_string(const YamlNode& n, const std::string& key, std::string* out) {
  if (n.kind == YamlNode::Kind::kScalar) {
    *out = n.scalar;
    return absl::OkStatus();
  }
  return expected(n, key, "a string");
}

absl::Status get_int_list(const YamlNode& n, const std::string& key, std::vector<int64_t>* out) {
  if (n.kind != YamlNode::Kind::kList) return expected(n, key, "a sequence of integers like [1, 2]");
  std::vector<int64_t> v;
  for (const YamlNode& e : n.list) {
    int64_t x;
    DLFEED_RETURN_IF_ERROR(no_leading_zero(e, key));  // its own message, not the list's
    if (!get_int(e, key, &x).ok()) return expected(n, key, "a sequence of integers like [1, 2]");
    v.push_back(x);
  }
  *out = std::move(v);
  return absl::OkStatus();
}

/// A string that must be one of `choices` (compared in lower case).
absl::Status get_choice(const YamlNode& n, const std::string& key, std::initializer_list<const char*> choices,
                        std::string* out) {
  std::string v;
  if (n.kind == YamlNode::Kind::kScalar) v = absl::AsciiStrToLower(n.scalar);
  for (const char* c : choices) {
    if (v == c) {
      *out = v;
      return absl::OkStatus();
    }
  }
  return expected(n, key, absl::StrCat("one of ", absl::StrJoin(choices, ", ")));
}

// A shuffle setting: off, seed or random; a YAML 1.1 false (`off`, `no`,
// `False`: the same value to YAML's readers) is off. A true names none.
absl::Status get_shuffle(const YamlNode& n, const std::string& key, std::string* out) {
  bool b = true;
  if (!n.quoted && get_bool(n, key, &b).ok() && !b) {
    *out = "off";
    return absl::OkStatus();
  }
  return get_choice(n, key, {"off", "seed", "random"}, out);
}

// --- the key table ----------------------------------------------------------

using Setter = absl::Status (*)(DlioConfig&, const YamlNode&, const std::string&);

struct Rule {
  const char* section;  // "" for the top level
  const char* key;
  Setter set;        // nullptr: ignored
  const char* note;  // how it is honoured, or why it is ignored
};

#define DLIO_INT(f) [](DlioConfig& c, const YamlNode& n, const std::string& k) { return get_int(n, k, &c.f); }
#define DLIO_NUM(f) [](DlioConfig& c, const YamlNode& n, const std::string& k) { return get_double(n, k, &c.f); }
#define DLIO_BOOL(f) [](DlioConfig& c, const YamlNode& n, const std::string& k) { return get_bool(n, k, &c.f); }
#define DLIO_STR(f) [](DlioConfig& c, const YamlNode& n, const std::string& k) { return get_string(n, k, &c.f); }
#define DLIO_LIST(f) [](DlioConfig& c, const YamlNode& n, const std::string& k) { return get_int_list(n, k, &c.f); }
#define DLIO_CHOICE(f, ...) \
  [](DlioConfig& c, const YamlNode& n, const std::string& k) { return get_choice(n, k, {__VA_ARGS__}, &c.f); }
#define DLIO_SHUFFLE(f) [](DlioConfig& c, const YamlNode& n, const std::string& k) { return get_shuffle(n, k, &c.f); }

/// The keys of the top level and of the storage: and dataset: sections.
void add_dataset_rules(std::vector<Rule>& r) {
  const Rule keys[] = {
      {"", "model", DLIO_STR(model), "the run's name (default output folder hydra_log/MODEL/...)"},
      {"", "framework", DLIO_CHOICE(framework, "tensorflow", "pytorch"),
       "checkpoint file extension (.pb or .pt); dlfeed delivers C++ batches to no framework"},
      {"storage", "storage_type", DLIO_CHOICE(storage_type, "local_fs", "s3"),
       "local_fs (POSIX files) or s3 (read from the bucket storage_root, keys under data_folder; credentials "
       "and endpoint from the environment, as AWS's tools take them; generate_data and checkpoints stay local)"},
      {"storage", "storage_root", DLIO_STR(storage_root), "prefix of data_folder, as DLIO joins them (s3: the bucket)"},
      {"dataset", "format",
       DLIO_CHOICE(format, "npz", "npy", "hdf5", "tfrecord", "indexed_binary", "mmap_indexed_binary"),
       "format of the files read and generated (npz, npy, hdf5, tfrecord, indexed_binary, mmap_indexed_binary)"},
      {"dataset", "record_length", DLIO_NUM(record_length),
       "generated sample side int(sqrt(record_length)); the MB/s in summary.json use it, as DLIO's do"},
      {"dataset", "record_length_stdev", DLIO_NUM(record_length_stdev),
       "generation: each file's two sides drawn from normal(side, stdev / 2 / sqrt(record_length)); "
       "reading: ragged batches"},
      {"dataset", "record_length_resize", nullptr,
       "DLIO's reader hands the compute a fixed random image of this size instead of the bytes it read; "
       "dlfeed delivers the bytes read, and DLIO's generator does not use it"},
      {"dataset", "num_files_train", DLIO_INT(num_files_train), "generated; the first N of train/ are read"},
      {"dataset", "num_files_eval", DLIO_INT(num_files_eval), "generated; the first N of valid/ are evaluated"},
      {"dataset", "generation_buffer_size", nullptr, "dlfeed's generator writes each file in one piece"},
      {"dataset", "num_samples_per_file", DLIO_INT(num_samples_per_file), "generated; sets the steps per epoch"},
      {"dataset", "data_folder", DLIO_STR(data_folder), "train/ is trained on, valid/ evaluated"},
      {"dataset", "num_subfolders_train", DLIO_INT(num_subfolders_train), "generated as train/I/ round-robin; read"},
      {"dataset", "num_subfolders_eval", DLIO_INT(num_subfolders_eval), "generated as valid/I/ round-robin; read"},
      {"dataset", "enable_chunking", DLIO_BOOL(enable_chunking), "hdf5 generation: chunks of one sample"},
      {"dataset", "chunk_size", DLIO_INT(chunk_size),
       "hdf5 generation: chunks of (1, c, c) with c = ceil(sqrt(chunk_size)), at most the sample's side, as DLIO "
       "writes them (0: whole samples)"},
      {"dataset", "compression", DLIO_CHOICE(compression, "none", "gzip", "zip", "lzf", "bz2", "xz"),
       "generation: gzip (hdf5) and zip (npz) as deflate; others are refused when generating"},
      {"dataset", "compression_level", DLIO_INT(compression_level), "generation: deflate level"},
      {"dataset", "file_prefix", DLIO_STR(file_prefix), "file names PREFIX_I_of_N.FORMAT"},
      {"dataset", "keep_files", nullptr, "dlfeed never deletes a dataset"},
  };
  r.insert(r.end(), std::begin(keys), std::end(keys));
}

/// The keys of the reader: section.
void add_reader_rules(std::vector<Rule>& r) {
  const Rule keys[] = {
      {"reader", "data_loader", DLIO_CHOICE(data_loader, "tensorflow", "pytorch", "dali", "native_dali"),
       "picks DLIO's sampler and so the shuffle mapping (tensorflow: iterative, others: index)"},
      {"reader", "data_loader_sampler", DLIO_CHOICE(data_loader_sampler, "iterative", "index"),
       "the shuffle mapping (iterative: file list and a shuffle buffer; index: a sample permutation)"},
      {"reader", "data_loader_classname", nullptr, "a Python class; dlfeed's loader is its own"},
      {"reader", "reader_classname", nullptr,
       "a Python class; dlfeed reads npz, npy, hdf5, tfrecord, indexed binary itself"},
      {"reader", "multiprocessing_context", nullptr, "dlfeed runs no worker processes"},
      {"reader", "dont_use_mmap", nullptr, "dlfeed reads with pread/io_uring, never mmap"},
      {"reader", "read_threads", nullptr,
       "DLIO's worker processes each read and decode whole samples; dlfeed pipelines reads (--io-engines, "
       "--io-threads) and decode (--threads) itself"},
      {"reader", "computation_threads", nullptr,
       "parallelism of DLIO's tf.data map over a no-op parse; dlfeed decodes with --threads"},
      {"reader", "batch_size", DLIO_INT(batch_size), "batch size; the last partial batch is dropped, as DLIO does"},
      {"reader", "batch_size_eval", DLIO_INT(batch_size_eval), "evaluation batch size, last partial batch dropped"},
      {"reader", "prefetch_size", nullptr,
       "batches DLIO's workers queue; dlfeed's read-ahead is --prefetch (batches and bytes)"},
      {"reader", "file_shuffle", DLIO_SHUFFLE(file_shuffle), "the order strategy (see the strategy line)"},
      {"reader", "shuffle_size", DLIO_INT(shuffle_size), "buffered_shuffle's buffer size (iterative sampler)"},
      {"reader", "sample_shuffle", DLIO_SHUFFLE(sample_shuffle), "the order strategy (see the strategy line)"},
      {"reader", "file_access", nullptr, "multi/shared matter to DLIO's MPI-IO readers only"},
      {"reader", "read_type", nullptr, "dlfeed always reads on demand"},
      {"reader", "transfer_size", nullptr, "tf.data's read buffer; dlfeed's read size is --max-read"},
      {"reader", "preprocess_time", nullptr, "no per-sample sleep in dlfeed's decode stage"},
      {"reader", "preprocess_time_stdev", nullptr, "no per-sample sleep in dlfeed's decode stage"},
  };
  r.insert(r.end(), std::begin(keys), std::end(keys));
}

/// The keys of the train:, evaluation: and checkpoint: sections.
void add_train_rules(std::vector<Rule>& r) {
  const Rule keys[] = {
      {"train", "epochs", DLIO_INT(epochs), "epochs"},
      {"train", "total_training_steps", DLIO_INT(total_training_steps),
       "steps per epoch at most (DLIO 2.0.0 counts them per epoch)"},
      {"train", "seed_change_epoch", DLIO_BOOL(seed_change_epoch), "False: every epoch reads epoch 1's order"},
      {"train", "computation_time", DLIO_NUM(computation_time), "emulated compute per step, in seconds"},
      {"train", "computation_time_stdev", DLIO_NUM(computation_time_stdev),
       "normal(computation_time, stdev) per step, redrawn below 0"},
      {"train", "seed", DLIO_INT(seed), "the order's seed (and the compute draws')"},
      {"evaluation", "eval_time", DLIO_NUM(eval_time), "emulated compute per evaluation step, in seconds"},
      {"evaluation", "eval_time_stdev", DLIO_NUM(eval_time_stdev), "normal(eval_time, stdev) per step"},
      {"evaluation", "eval_after_epoch", DLIO_INT(eval_after_epoch), "first epoch evaluated"},
      {"evaluation", "epochs_between_evals", DLIO_INT(epochs_between_evals), "epochs between evaluations"},
      {"checkpoint", "checkpoint_folder", DLIO_STR(checkpoint_folder), "where checkpoint files are written"},
      {"checkpoint", "checkpoint_after_epoch", DLIO_INT(checkpoint_after_epoch), "first epoch checkpointed"},
      {"checkpoint", "epochs_between_checkpoints", DLIO_INT(epochs_between_checkpoints), "epochs between checkpoints"},
      {"checkpoint", "steps_between_checkpoints", DLIO_INT(steps_between_checkpoints),
       "checkpoint every N steps of an epoch instead (>= 0)"},
      {"checkpoint", "type", DLIO_CHOICE(checkpoint_type, "rank_zero", "all_ranks"), "which ranks write"},
      {"checkpoint", "checkpoint_mechanism_classname", nullptr, "a Python class; dlfeed writes the bytes itself"},
      {"checkpoint", "model_size", DLIO_INT(model_size), "bytes of the model file per checkpoint"},
      {"checkpoint", "optimization_groups", DLIO_LIST(optimization_groups), "optimizer file of 3 x sum(groups) bytes"},
      {"checkpoint", "num_layers", DLIO_INT(num_layers), "layer files per checkpoint"},
      {"checkpoint", "layer_parameters", DLIO_LIST(layer_parameters), "bytes of each layer file (their sum)"},
      {"checkpoint", "tensor_parallelism", DLIO_INT(tensor_parallelism), "extra layer files when > 1"},
      {"checkpoint", "pipeline_parallelism", DLIO_INT(pipeline_parallelism),
       "only ranks that are multiples of it write layer files"},
  };
  r.insert(r.end(), std::begin(keys), std::end(keys));
}

/// The keys of the output:, workflow:, profiling: and metric: sections.
void add_workflow_rules(std::vector<Rule>& r) {
  const Rule keys[] = {
      {"output", "folder", DLIO_STR(output_folder), "where summary.json and per_epoch_stats.json go"},
      {"output", "log_file", nullptr, "dlfeed prints its log to stdout"},
      {"workflow", "generate_data", DLIO_BOOL(generate_data), "writes the dataset first (DLIO's layout)"},
      {"workflow", "train", nullptr, nullptr},  // special: sets generate_only
      {"workflow", "evaluation", DLIO_BOOL(do_eval), "evaluates on valid/ after the epochs it says"},
      {"workflow", "checkpoint", DLIO_BOOL(do_checkpoint), "writes checkpoints"},
      {"workflow", "debug", nullptr, "DLIO's wait-for-enter; dlfeed does not wait"},
      {"workflow", "profiling", nullptr,
       "DLIO's iostat/darshan profilers; dlfeed's trace of the same data: dlfeed run --trace"},
      {"profiling", "profiler", nullptr,
       "DLIO's iostat/darshan profilers; dlfeed's trace of the same data: dlfeed run --trace"},
      {"profiling", "iostat_devices", nullptr, "DLIO's iostat profiler"},
      {"metric", "au", DLIO_NUM(au), "the AU pass mark (a fraction): train_au_meet_expectation"},
  };
  r.insert(r.end(), std::begin(keys), std::end(keys));
}

const std::vector<Rule>& rules() {
  static const std::vector<Rule> r = [] {
    std::vector<Rule> v;
    add_dataset_rules(v);
    add_reader_rules(v);
    add_train_rules(v);
    add_workflow_rules(v);
    return v;
  }();
  return r;
}

#undef DLIO_INT
#undef DLIO_NUM
#undef DLIO_BOOL
#undef DLIO_STR
#undef DLIO_LIST
#undef DLIO_CHOICE
#undef DLIO_SHUFFLE

const Rule* find_rule(absl::string_view section, absl::string_view key) {
  for (const Rule& r : rules()) {
    if (section == r.section && key == r.key) return &r;
  }
  return nullptr;
}

bool is_section(absl::string_view s) {
  for (const Rule& r : rules()) {
    if (*r.section && s == r.section) return true;
  }
  return s == "data_reader";
}

}  // namespace

bool is_override(absl::string_view arg) { return absl::StrContains(arg, '=') || absl::StartsWith(arg, "~"); }

absl::Status apply_override(YamlNode& workload, const std::string& arg) {
  const std::string origin = absl::StrCat("override '", arg, "'");
  absl::string_view a = arg;
  enum { kSet, kAdd, kForce, kDelete } mode = kSet;
  if (absl::ConsumePrefix(&a, "++")) {
    mode = kForce;
  } else if (absl::ConsumePrefix(&a, "+")) {
    mode = kAdd;
  } else if (absl::ConsumePrefix(&a, "~")) {
    mode = kDelete;
  }
  const size_t eq = a.find('=');
  absl::string_view key = eq == absl::string_view::npos ? a : a.substr(0, eq);
  if (mode != kDelete && eq == absl::string_view::npos) {
    return error_at(origin, "expected KEY=VALUE (e.g. ++workload.dataset.num_files_train=8)");
  }
  if (!absl::ConsumePrefix(&key, "workload.")) {
    const std::string first(key.substr(0, key.find('.')));
    if (is_section(first) || first == "model" || first == "framework") {
      return error_at(origin, absl::StrCat("DLIO's overrides name the workload: write workload.", key,
                                           " (DLIO's Hydra refuses or ignores '", key, "')"));
    }
    return error_at(
        origin, absl::StrCat("'", key, "' is not a workload key; overrides look like ++workload.SECTION.KEY=VALUE"));
  }
  std::vector<std::string> parts = absl::StrSplit(key, '.');
  for (const std::string& p : parts) {
    if (p.empty()) return error_at(origin, absl::StrCat("empty name in the key '", key, "'"));
  }
  YamlNode* node = &workload;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YamlNode* next = node->find(parts[i]);
    if (next == nullptr) {
      if (mode != kAdd && mode != kForce) {
        return error_at(origin, absl::StrCat("workload.", key, " is not in the config; add it with +", arg));
      }
      YamlNode m;
      m.kind = YamlNode::Kind::kMap;
      m.origin = origin;
      node->map.emplace_back(parts[i], std::move(m));
      next = &node->map.back().second;
    } else if (next->kind != YamlNode::Kind::kMap) {
      return error_at(origin, absl::StrCat("workload.", absl::StrJoin(parts.begin(), parts.begin() + i + 1, "."),
                                           " is ", found(*next), " (", next->origin, "), not a section"));
    }
    node = next;
  }
  const std::string& last = parts.back();
  YamlNode* existing = node->find(last);
  if (mode == kDelete) {
    if (!existing) return error_at(origin, absl::StrCat("workload.", key, " is not in the config; nothing to remove"));
    std::erase_if(node->map, [&](const auto& kv) { return kv.first == last; });
    return absl::OkStatus();
  }
  if (mode == kSet && !existing) {
    return error_at(origin, absl::StrCat("workload.", key, " is not in the config; add it with +", arg,
                                         " or set it either way with ++", arg));
  }
  if (mode == kAdd && existing) {
    return error_at(origin, absl::StrCat("workload.", key, " is already in the config (", existing->origin,
                                         "); override it with ++", arg.substr(1)));
  }
  const absl::string_view text = a.substr(eq + 1);
  YamlNode v;
  if (absl::StripAsciiWhitespace(text).empty()) {
    v.kind = YamlNode::Kind::kScalar;
    v.quoted = true;  // Hydra: KEY= is the empty string
    v.origin = origin;
  } else {
    auto parsed = parse_yaml_value(text, origin);
    if (!parsed.ok()) return parsed.status();
    v = *std::move(parsed);
  }
  if (existing) {
    *existing = std::move(v);
  } else {
    node->map.emplace_back(last, std::move(v));
  }
  return absl::OkStatus();
}

// --- DlioConfig -------------------------------------------------------------

std::string DlioConfig::data_dir() const {
  std::string d = data_folder;
  while (d.size() > 1 && d.back() == '/') d.pop_back();  // DLIO: rstrip('/')
  if (storage_type == "s3") {
    // DLIO's S3 storage: the bucket is storage_root, the keys start with data_folder.
    const absl::string_view bucket = absl::StripSuffix(absl::StripPrefix(storage_root, "s3://"), "/");
    const absl::string_view key = absl::StripPrefix(absl::StripSuffix(d, "/"), "/");
    return key.empty() ? absl::StrCat("s3://", bucket) : absl::StrCat("s3://", bucket, "/", key);
  }
  return (std::filesystem::path(storage_root) / d).lexically_normal().string();
}

std::string DlioConfig::sampler() const {
  if (!data_loader_sampler.empty()) return data_loader_sampler;
  return data_loader == "tensorflow" ? "iterative" : "index";
}

int64_t DlioConfig::dimension() const { return static_cast<int64_t>(std::sqrt(record_length)); }

absl::StatusOr<DlioConfig> load_config(const YamlNode& workload) {
  DlioConfig c;
  auto note = [&](const std::string& key, const YamlNode& v, const Rule* r) {
    (r->set ? c.honoured : c.ignored).push_back({key, v.text(), r->note});
  };
  bool train_seen = false, train_value = false, workflow_seen = false;
  for (const auto& [top, value] : workload.map) {
    const std::string top_key = absl::StrCat("workload.", top);
    if (const Rule* r = find_rule("", top)) {
      if (r->set) {
        if (auto st = r->set(c, value, top_key); !st.ok()) return st;
      }
      note(top_key, value, r);
      continue;
    }
    if (!is_section(top)) {
      c.ignored.push_back({top_key, value.text(), "not a DLIO 2.0.0 setting (DLIO ignores it too)"});
      continue;
    }
    if (value.kind != YamlNode::Kind::kMap) return expected(value, top_key, "a section of 'key: value' lines");
    const std::string section = top == "data_reader" ? "reader" : top;
    if (section == "workflow") workflow_seen = true;
    for (const auto& [key, v] : value.map) {
      const std::string full = absl::StrCat(top_key, ".", key);
      const Rule* r = find_rule(section, key);
      if (r == nullptr) {
        c.ignored.push_back({full, v.text(), "not a DLIO 2.0.0 setting (DLIO ignores it too)"});
        continue;
      }
      if (section == "workflow" && key == "train") {
        if (auto st = get_bool(v, full, &train_value); !st.ok()) return st;
        train_seen = true;
        c.honoured.push_back({full, v.text(), "False: generate only"});
        continue;
      }
      if (r->set) {
        if (auto st = r->set(c, v, full); !st.ok()) return st;
      }
      note(full, v, r);
    }
  }
  // DLIO: a workflow section without train: True only generates.
  c.generate_only = workflow_seen && !(train_seen && train_value);
  auto positive = [](int64_t v, const char* what) -> absl::Status {
    if (v < 1) return absl::InvalidArgumentError(absl::StrCat("workload.", what, " must be at least 1, not ", v));
    return absl::OkStatus();
  };
  for (auto [v, what] : {std::pair<int64_t, const char*>{c.num_files_train, "dataset.num_files_train"},
                         {c.num_samples_per_file, "dataset.num_samples_per_file"},
                         {c.batch_size, "reader.batch_size"},
                         {c.batch_size_eval, "reader.batch_size_eval"},
                         {c.epochs, "train.epochs"},
                         {c.shuffle_size, "reader.shuffle_size"},
                         {c.epochs_between_evals, "evaluation.epochs_between_evals"},
                         {c.epochs_between_checkpoints, "checkpoint.epochs_between_checkpoints"},
                         {c.pipeline_parallelism, "checkpoint.pipeline_parallelism"},
                         {c.tensor_parallelism, "checkpoint.tensor_parallelism"}}) {
    if (auto st = positive(v, what); !st.ok()) return st;
  }
  if (c.num_files_eval < 0) return absl::InvalidArgumentError("workload.dataset.num_files_eval must be at least 0");
  if (c.storage_type == "s3") {
    const absl::string_view bucket = absl::StripSuffix(absl::StripPrefix(c.storage_root, "s3://"), "/");
    if (bucket.empty() || bucket == "." || absl::StrContains(bucket, '/')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "workload.storage.storage_root names the bucket with storage_type s3 (as DLIO's S3 storage takes it), not '",
          c.storage_root, "'"));
    }
  }
  if (!(c.record_length >= 1)) return absl::InvalidArgumentError("workload.dataset.record_length must be at least 1");
  if (c.record_length_stdev < 0 || c.computation_time < 0 || c.computation_time_stdev < 0 || c.eval_time < 0 ||
      c.eval_time_stdev < 0) {
    return absl::InvalidArgumentError(
        "workload: record_length_stdev, computation_time(_stdev) and eval_time(_stdev) must be at least 0");
  }
  if (c.do_eval && c.num_files_eval < 1) {
    return absl::InvalidArgumentError(
        "workload.workflow.evaluation is True but workload.dataset.num_files_eval is 0: nothing to evaluate");
  }
  if (c.num_layers % c.pipeline_parallelism != 0 || c.num_layers % c.tensor_parallelism != 0) {
    return absl::InvalidArgumentError(absl::StrCat("workload.checkpoint.num_layers (", c.num_layers,
                                                   ") must be a multiple of pipeline_parallelism and "
                                                   "tensor_parallelism (as DLIO requires)"));
  }
  return c;
}

}  // namespace dlfeed::cli::dlio
