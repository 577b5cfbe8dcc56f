// SPDX-License-Identifier: Apache-2.0
// The loader's option structs, bound once with their C++ field names:
// LoaderOptions and the structs it holds (FormatOptions, OrderSpec with its
// OrderParams, IoOptions, CoalesceOptions, TraceOptions, StageOptions).
// python/dlfeed/_options.py maps each dlfeed.Loader keyword to a field path
// here ("shard_drop_last" -> "order.drop_last"); tests/python/api/test_options.py
// checks that every field bound here has a keyword (or a reason it has none)
// and, through _option_structs(), that every C++ member is bound here or
// listed below as unbound. So a new C++ field fails a test until it is bound
// and mapped.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <pybind11/typing.h>

#include <map>

#include "common.h"
#include "dlfeed/counters/counters.h"
#include "dlfeed/dtype.h"
#include "dlfeed/format/format.h"
#include "dlfeed/io/io_backend.h"
#include "dlfeed/loader.h"
#include "dlfeed/order/order.h"
#include "dlfeed/plan/plan.h"
#include "dlfeed/staging/staging.h"

namespace dlfeed::python {
namespace {

// The number of members of an aggregate: the most initializers T{...} takes,
// each a value that converts to any type. The conversion is callable on
// rvalues only, so templated constructors of members (std::string's from a
// string_view-like const T&) do not compete with it.
struct AnyMember {
  template <typename T>
  operator T&() const&&;
};
template <typename T, typename... Members>
constexpr size_t member_count() {
  if constexpr (requires { T{Members{}..., AnyMember{}}; }) {
    return member_count<T, Members..., AnyMember>();
  } else {
    return sizeof...(Members);
  }
}

// Per struct: its C++ member count and the members not bound (with why), for
// _option_structs().
struct StructInfo {
  size_t members;
  std::map<std::string, std::string> unbound;
};
std::map<std::string, StructInfo>& struct_infos() {
  static std::map<std::string, StructInfo> infos;
  return infos;
}
template <typename T>
void describe(const std::string& name, std::map<std::string, std::string> unbound = {}) {
  struct_infos()[name] = StructInfo{member_count<T>(), std::move(unbound)};
}

void bind_format_options(py::module_& m) {
  describe<FormatOptions>("FormatOptions");
  py::class_<FormatOptions>(m, "FormatOptions", "How files are turned into samples (C++ FormatOptions).")
      .def(py::init<>())
      .def_property(
          "format", [](const FormatOptions& o) { return format_name(o.format); },
          [](FormatOptions& o, const std::string& s) { o.format = unwrap(parse_format(s)); },
          "auto (by extension), npy, npz, hdf5, tfrecord or indexed_binary")
      .def_property(
          "axis", [](const FormatOptions& o) { return axis_name(o.axis); },
          [](FormatOptions& o, const std::string& s) { o.axis = unwrap(parse_axis(s)); },
          "Sample axis of arrays: first, last (NPY/NPZ: DLIO's layout), none (each NPY file, NPZ member or HDF5 "
          "dataset is one whole sample) or auto (NPY/NPZ: last only for files where and as DLIO's generator writes "
          "them; HDF5: axis 0)")
      .def_readwrite("name", &FormatOptions::name,
                     "NPZ member or HDF5 dataset of the single field (HDF5: 'records', else 'records_0')")
      .def_readwrite("file_pattern", &FormatOptions::file_pattern,
                     "A file-name pattern with one '*': only the matching files, ordered by what '*' matched "
                     "(fields={name: pattern} sets it per field)")
      .def_readwrite("feature", &FormatOptions::feature, "TFRecord: the tf.train.Example feature that is the sample")
      .def_property(
          "feature_dtype", [](const FormatOptions& o) { return o.feature_dtype.name(); },
          [](FormatOptions& o, const std::string& s) { o.feature_dtype = unwrap(DType::parse(s)); },
          "TFRecord: element type of bytes_list features (e.g. 'float32' or '<f4')")
      .def_property(
          "feature_shape",
          [](const FormatOptions& o) -> py::typing::Optional<py::typing::Tuple<py::int_, py::ellipsis>> {
            if (!o.feature_shape) return py::none();
            return shape_to_py(*o.feature_shape);
          },
          [](FormatOptions& o, const py::object& v) {
            if (v.is_none())
              o.feature_shape.reset();
            else
              o.feature_shape = shape_from_py(v);
          },
          "TFRecord: fixed shape of the feature, or None (1-D)")
      .def_readwrite("shape_feature", &FormatOptions::shape_feature,
                     "TFRecord: an int64 feature giving the feature's shape per file ('auto': DLIO's 'size' for files "
                     "in DLIO's layout; 'off': 1-D; a name: that feature, required)")
      .def_readwrite("verify_crc", &FormatOptions::verify_crc, "TFRecord: check both CRC32C of every record")
      .def_readwrite("use_index_files", &FormatOptions::use_index_files,
                     "TFRecord: read a DALI/DLIO .idx sidecar when present")
      .def_readwrite("write_index_files", &FormatOptions::write_index_files,
                     "TFRecord: write the .idx sidecar after a scan")
      .def_readwrite("index_dir", &FormatOptions::index_dir,
                     "TFRecord: where sidecars live; empty: next to the file, or DLIO's {data}/index/{train|valid}/")
      .def_readwrite("index_cache", &FormatOptions::index_cache,
                     "Persistent dataset index: '' or 'off', 'auto' (in the dataset folder, or ~/.cache/dlfeed), "
                     "or the cache file's path (PATH.FIELD for each of several fields)")
      .def_readwrite("index_cache_check", &FormatOptions::index_cache_check,
                     "How a reopen from the cache knows the files are unchanged: 'files' (a stat each) or "
                     "'folders' (a stat per folder; files checked at their first read)");
}

void bind_order_spec(py::module_& m) {
  describe<OrderParams>("OrderParams");
  py::class_<OrderParams>(m, "OrderParams", "Parameters of the order strategies (C++ OrderParams).")
      .def(py::init<>())
      .def_readwrite("buffer_size", &OrderParams::buffer_size, "buffered_shuffle: shuffle buffer, in samples")
      .def_readwrite("block_size", &OrderParams::block_size, "block_shuffle: samples per contiguous block")
      .def_readwrite("window", &OrderParams::window, "block_shuffle: blocks per shuffling window")
      .def_property(
          "indices",
          [](const OrderParams& p) -> py::typing::Optional<py::array_t<uint64_t>> {
            if (!p.indices) return py::none();
            return py::array_t<uint64_t>(p.indices->size(), p.indices->data());
          },
          [](OrderParams& p, const py::object& v) {
            if (v.is_none()) {
              p.indices.reset();
              return;
            }
            auto a = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(v);
            if (!a) throw py::value_error("indices: expected a sequence of non-negative ints");
            p.indices = std::make_shared<const std::vector<uint64_t>>(a.data(), a.data() + a.size());
          },
          "explicit strategy: the global order itself (any ids below num_samples, repeats allowed), or None");

  describe<OrderSpec>("OrderSpec");
  py::class_<OrderSpec>(m, "OrderSpec", "Which sample ids a rank reads per epoch (C++ OrderSpec).")
      .def(py::init<>())
      .def_readwrite("strategy", &OrderSpec::strategy, "One of strategy_names()")
      .def_readwrite("seed", &OrderSpec::seed, "Seed of the shuffles: same seed and epoch, same order")
      .def_readwrite("epoch", &OrderSpec::epoch, "The epoch (a Loader sets it per epoch)")
      .def_readwrite("rank", &OrderSpec::rank, "This rank, below world_size")
      .def_readwrite("world_size", &OrderSpec::world_size, "Number of ranks sharing the dataset")
      .def_readwrite("drop_last", &OrderSpec::drop_last,
                     "Equal shards by dropping the global order's tail (False: pad shards with its head)")
      .def_readwrite("global_start", &OrderSpec::global_start,
                     "Global positions consumed before an elastic restart (a Loader sets it on restore)")
      .def_readwrite("params", &OrderSpec::params, "The strategies' parameters");
}

void bind_io_options(py::module_& m) {
  describe<IoOptions>("IoOptions");
  py::class_<IoOptions>(m, "IoOptions", "How the loader reads (C++ IoOptions).")
      .def(py::init<>())
      .def_property(
          "kind", [](const IoOptions& o) { return std::string(io_kind_name(o.kind)); },
          [](IoOptions& o, const std::string& s) { o.kind = unwrap(parse_io_kind(s)); },
          "auto, io_uring, thread_pool or sync")
      .def_readwrite("queue_depth", &IoOptions::queue_depth, "io_uring: ring entries and most reads in the kernel")
      .def_readwrite("max_bytes_in_flight", &IoOptions::max_bytes_in_flight,
                     "io_uring: most bytes of reads in the kernel at once (0: no limit)")
      .def_readwrite("checksum_round_bytes", &IoOptions::checksum_round_bytes,
                     "io_uring: while reads hit the page cache, reads asking for a checksum go in rounds of at most "
                     "this many bytes (0: none)")
      .def_readwrite("register_files", &IoOptions::register_files,
                     "io_uring: register the files with the ring when there are few enough")
      .def_readwrite("threads", &IoOptions::threads, "thread_pool: reader threads")
      .def_readwrite("direct", &IoOptions::direct, "Read with O_DIRECT (bypass the page cache)");

  describe<prefetch::CoalesceOptions>("CoalesceOptions");
  py::class_<prefetch::CoalesceOptions>(m, "CoalesceOptions", "Merging of nearby reads (C++ CoalesceOptions).")
      .def(py::init<>())
      .def_readwrite("max_gap", &prefetch::CoalesceOptions::max_gap,
                     "Extents of a file at most this many bytes apart are read as one")
      .def_readwrite("adaptive_gap", &prefetch::CoalesceOptions::adaptive_gap,
                     "A batch merges across gaps no longer than its mean extent (at most max_gap); False: max_gap")
      .def_readwrite(
          "max_read", &prefetch::CoalesceOptions::max_read,
          "Largest merged read in bytes (longer extents are read in pieces of this size; 0 or at least 4096)")
      .def_readwrite("enabled", &prefetch::CoalesceOptions::enabled, "False: one read per extent")
      .def_readwrite("split_above", &prefetch::CoalesceOptions::split_above,
                     "Buffered reads longer than this go in split_piece pieces (0: no such split)")
      .def_readwrite("split_piece", &prefetch::CoalesceOptions::split_piece,
                     "The piece size of split_above (0 or at least 4096)")
      .def_readwrite(
          "split_piece_cold", &prefetch::CoalesceOptions::split_piece_cold,
          "The piece size of split_above while most reads miss the page cache (0: split_piece; else at least 4096)")
      .def_readwrite("large_above", &prefetch::CoalesceOptions::large_above,
                     "Reads of at least this many bytes go in large_piece pieces that kernel workers copy, so one "
                     "batch's large samples spread over the cores (0: no such route)")
      .def_readwrite("large_piece", &prefetch::CoalesceOptions::large_piece,
                     "The piece size of large_above (0 or at least 4096)");
}

/// The structs LoaderOptions holds besides the I/O, order and format options:
/// TraceOptions, StageOptions and LoaderTuning.
void bind_loader_option_structs(py::module_& m) {
  describe<counters::TraceOptions>("TraceOptions");
  py::class_<counters::TraceOptions>(m, "TraceOptions", "Trace events of the counters (C++ counters::TraceOptions).")
      .def(py::init<>())
      .def_readwrite("enabled", &counters::TraceOptions::enabled, "Record trace events (Loader.write_trace)")
      .def_readwrite("max_events", &counters::TraceOptions::max_events,
                     "Events kept (64 bytes each); later ones are dropped and counted")
      .def_readwrite("io_sample_every", &counters::TraceOptions::io_sample_every, "Record one of every N read requests")
      .def_readwrite("pid", &counters::TraceOptions::pid,
                     "The trace's process id (e.g. the rank, so ranks' traces merge); -1: getpid()")
      .def_readwrite("process_name", &counters::TraceOptions::process_name, "The trace's process name");

  describe<staging::StageOptions>("StageOptions");
  py::class_<staging::StageOptions>(m, "StageOptions", "Node-local staging of the rank's files (C++ StageOptions).")
      .def(py::init<>())
      .def_readwrite("dir", &staging::StageOptions::dir, "Folder on node-local storage; empty: no staging")
      .def_readwrite("limit_bytes", &staging::StageOptions::limit_bytes,
                     "Most bytes of copies this rank keeps there; files that do not fit are read from the source")
      .def_readwrite("sync", &staging::StageOptions::sync, "fsync each copy before renaming it into place");

  describe<ObjectCacheOptions>("ObjectCacheOptions");
  py::class_<ObjectCacheOptions>(m, "ObjectCacheOptions",
                                 "A node-local folder keeping bytes fetched from an object store (C++ "
                                 "ObjectCacheOptions).")
      .def(py::init<>())
      .def_readwrite("dir", &ObjectCacheOptions::dir, "The folder; empty: no cache")
      .def_readwrite(
          "max_bytes", &ObjectCacheOptions::max_bytes,
          "Most bytes kept in the cache_dir folder (0: no bound; needs cache_dir); once full, what it holds stays "
          "(by next use in the known order when the order uses samples again)");

  describe<LoaderTuning>("LoaderTuning");
  py::class_<LoaderTuning>(m, "LoaderTuning",
                           "Knobs for dlfeed's tests and benches (C++ LoaderTuning); not a stable API.")
      .def(py::init<>())
      .def_readwrite("io_spread_always", &LoaderTuning::io_spread_always,
                     "Send batches round all io_engines whatever their reads");
}

void bind_advanced_options(py::module_& m) {
  describe<AdvancedOptions>("AdvancedOptions",
                            {{"io_factory", "a C++ callback making I/O backends"},
                             {"index_opener", "a C++ callback opening the index (mpi::Job::share_index)"},
                             {"before_first_epoch", "a C++ callback at the first epoch's start (mpi::JobCache)"},
                             {"reindex_changed_files", "set by mpi::JobCache (job_cache=), which needs it off"},
                             {"prefetch_policy", "a C++ plug-in object (prefetch::PrefetchPolicy); use prefetch"}});
  py::class_<AdvancedOptions>(m, "AdvancedOptions",
                              "The engines, read-ahead, read merging (C++ AdvancedOptions): the defaults follow the "
                              "machine and the data")
      .def(py::init<>())
      .def_readwrite("io_engines", &AdvancedOptions::io_engines,
                     "I/O engine threads, each with its own backend; more than the first are used only while it "
                     "is busy on the CPU. 0: from the cores the process may use (affinity and cgroup quota): 1 on 1 "
                     "core, then one per core (at least 2) up to 16")
      .def_readwrite("tuning", &AdvancedOptions::tuning, "For dlfeed's tests and benches; not a stable API")
      .def_readwrite("max_open_files", &AdvancedOptions::max_open_files, "Files kept open at once (0: the default)")
      .def_property(
          "prefetch", [](const AdvancedOptions& a) { return a.prefetch.str(); },
          [](AdvancedOptions& a, const std::string& text) { a.prefetch = prefetch::Prefetch(text); },
          "Read-ahead (its string form; C++ prefetch::Prefetch): auto (depth:8,budget:256M reading, "
          "depth:8,budget:16M when the files are held), off, depth:N (batches), budget:BYTES, or both joined by a "
          "comma")
      .def_readwrite("coalesce", &AdvancedOptions::coalesce, "Merging of nearby reads")
      .def_readwrite("fadvise_willneed", &AdvancedOptions::fadvise_willneed,
                     "posix_fadvise(WILLNEED) each batch's reads when it is planned");
}

void bind_loader_options(py::module_& m) {
  bind_loader_option_structs(m);
  bind_advanced_options(m);

  describe<LoaderOptions>("LoaderOptions");
  py::class_<LoaderOptions>(m, "LoaderOptions", "Everything a Loader is built from (C++ LoaderOptions).")
      .def(py::init<>())
      .def_readwrite("paths", &LoaderOptions::paths, "Files, folders (walked recursively, sorted) and globs")
      .def_readwrite("format", &LoaderOptions::format, "How files are indexed")
      .def_readwrite("fields", &LoaderOptions::fields,
                     "NPY columns, NPZ members, HDF5 datasets or TFRecord features; empty: one field")
      .def_property(
          "field_shapes",
          [](const LoaderOptions& o) {
            py::dict d;
            for (const auto& [k, v] : o.field_shapes) d[py::str(k)] = shape_to_py(v);
            return d;
          },
          [](LoaderOptions& o, const py::dict& d) {
            std::map<std::string, Shape> m;
            for (const auto& [k, v] : d) m[py::cast<std::string>(k)] = shape_from_py(v);
            o.field_shapes = std::move(m);
          },
          "Per field name: the sample shape where the files do not record it (a TFRecord feature's; () for a "
          "scalar)")
      .def_property(
          "field_dtypes",
          [](const LoaderOptions& o) {
            py::dict d;
            for (const auto& [k, v] : o.field_dtypes) d[py::str(k)] = v.name();
            return d;
          },
          [](LoaderOptions& o, const py::dict& d) {
            std::map<std::string, DType> m;
            for (const auto& [k, v] : d) m[py::cast<std::string>(k)] = unwrap(DType::parse(py::cast<std::string>(v)));
            o.field_dtypes = std::move(m);
          },
          "Per field name: the element type where the files do not record it (a TFRecord bytes feature's, "
          "e.g. 'uint8')")
      .def_readwrite("ragged", &LoaderOptions::ragged,
                     "Allow samples of different shapes in a field (ragged batches); else refused at create")
      .def_readwrite("batch_size", &LoaderOptions::batch_size, "Samples per batch")
      .def_readwrite("drop_last_batch", &LoaderOptions::drop_last_batch,
                     "Drop this rank's last batch when it is partial")
      .def_readwrite("order", &LoaderOptions::order, "Strategy, seed, rank, world size, shard padding")
      .def_readwrite("io", &LoaderOptions::io, "The I/O backend's options")
      .def_property(
          "autotune", [](const LoaderOptions& o) { return mode_name(o.autotune); },
          [](LoaderOptions& o, const std::string& s) { o.autotune = unwrap(parse_mode(s, "autotune")); },
          "on: move what is left to the machine (io_engines 0, prefetch auto) toward the best rate while "
          "it runs, within the memory budget (an explicit value is never moved); off; auto (the default): "
          "on with 4 cores or more")
      .def_readwrite(
          "memory_budget", &LoaderOptions::memory_budget,
          "Most bytes of batches in flight (read buffers and decoded batches, held ones included); 0: a "
          "quarter of the memory the process may use (MemAvailable, cgroup memory.max, ulimit -v), shared by the "
          "job's ranks on the node, at least 256 MiB")
      .def_property(
          "resident", [](const LoaderOptions& o) { return mode_name(o.resident); },
          [](LoaderOptions& o, const std::string& s) { o.resident = unwrap(parse_mode(s, "resident")); },
          "Hold the dataset in memory: auto (when its files fit in half of memory_budget: each read once, "
          "from create on, in the order the first epoch uses them, then copies from memory), on (all read "
          "at create, or fail saying why not), off")
      .def_property(
          "unpack", [](const LoaderOptions& o) { return mode_name(o.unpack); },
          [](LoaderOptions& o, const std::string& s) { o.unpack = unwrap(parse_mode(s, "unpack")); },
          "Deflated NPZ members and strided (DLIO-layout) arrays: auto (those that fit in half of "
          "memory_budget less the held files are read once whole per epoch, inflated once, kept and "
          "gathered from memory), off (read per sample)")
      .def_readwrite("threads", &LoaderOptions::threads,
                     "Decode threads, also spreading copies from held files when more than 2 (0: the cores the process "
                     "may use, at least 2); this loader's own")
      .def_readwrite("trace", &LoaderOptions::trace, "Trace events (the counters themselves are always on)")
      .def_readwrite("stage", &LoaderOptions::stage, "Node-local staging (off while stage.dir is empty)")
      .def_readwrite("object_cache", &LoaderOptions::object_cache,
                     "s3:// paths: a node-local cache of the bytes fetched (off while object_cache.dir is empty)")
      .def_readwrite("advanced", &LoaderOptions::advanced,
                     "The engines, read-ahead, read merging: the defaults follow the machine and the data");
}

}  // namespace

void bind_options(py::module_& m) {
  bind_format_options(m);
  bind_order_spec(m);
  bind_io_options(m);
  bind_loader_options(m);

  m.def(
      "_option_structs",
      []() {
        py::dict out;
        for (const auto& [name, info] : struct_infos()) {
          py::dict unbound;
          for (const auto& [field, why] : info.unbound) unbound[py::str(field)] = why;
          out[py::str(name)] = py::make_tuple(info.members, unbound);
        }
        return out;
      },
      "{struct name: (its C++ member count, {member not bound: why})} of the option structs bound here.");
}

}  // namespace dlfeed::python
