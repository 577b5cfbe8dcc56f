// SPDX-License-Identifier: Apache-2.0
// LoaderStats as a bound struct: read-only properties (typed in the stubs),
// and, for the code that reads them as a dict, s["name"], "name" in s,
// keys(), items(), get() and to_dict() (a plain dict, nested for `stage`).
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <pybind11/typing.h>

#include "common.h"
#include "dlfeed/loader.h"

namespace dlfeed::python {
namespace {

/// LoaderStats::stage with LoaderStats::files_read_staged beside it, as
/// stats()["stage"] has always carried it.
struct StageView {
  staging::StageStats s;
  uint64_t files_read_staged = 0;
};

/// A read-only class whose fields are also reachable by name, as in a dict.
template <typename T>
class RecordClass {
 public:
  RecordClass(py::module_& m, const char* name, const char* doc)
      : cls_(m, name, doc), fields_(std::make_shared<Fields>()) {}

  template <typename Get>
  RecordClass& field(const char* name, Get get, const char* doc = "") {
    fields_->emplace_back(name, [get](const T& t) { return py::cast(get(t)); });
    cls_.def_property_readonly(name, get, doc);
    return *this;
  }

  void finish() {
    auto fields = fields_;
    auto find = [fields](const T& t, const std::string& key) -> py::object {
      for (const auto& [n, get] : *fields) {
        if (n == key) return get(t);
      }
      throw py::key_error(key);
    };
    cls_.def("__getitem__", find, py::arg("key"), "The field `key`, as in a dict")
        .def(
            "get",
            [find](const T& t, const std::string& key, const py::object& dflt) -> py::object {
              try {
                return find(t, key);
              } catch (const py::key_error&) {
                return dflt;
              }
            },
            py::arg("key"), py::arg("default") = py::none())
        .def("__contains__",
             [fields](const T&, const std::string& key) {
               for (const auto& f : *fields) {
                 if (f.first == key) return true;
               }
               return false;
             })
        .def(
            "keys",
            [fields](const T&) -> py::typing::List<py::str> {
              py::list l;
              for (const auto& f : *fields) l.append(py::str(f.first));
              return l;
            },
            "The field names, in order")
        .def("__iter__",
             [fields](const T&) -> py::iterator {
               py::list l;
               for (const auto& f : *fields) l.append(py::str(f.first));
               return py::iter(l);
             })
        .def("__len__", [fields](const T&) { return fields->size(); })
        .def(
            "to_dict", [fields](const T& t) { return to_dict(*fields, t); },
            "A plain dict of the fields (nested structs as dicts)")
        .def("items", [fields](const T& t) { return to_dict(*fields, t).attr("items")(); })
        .def("__repr__", [fields](const T& t) -> py::str { return py::repr(to_dict(*fields, t)); });
  }

 private:
  using Fields = std::vector<std::pair<std::string, std::function<py::object(const T&)>>>;

  static py::dict to_dict(const Fields& fields, const T& t) {
    py::dict d;
    for (const auto& [n, get] : fields) {
      py::object v = get(t);
      if (py::hasattr(v, "to_dict")) v = v.attr("to_dict")();
      d[py::str(n)] = v;
    }
    return d;
  }

  py::class_<T> cls_;
  std::shared_ptr<Fields> fields_;
};

/// StageStats: node-local staging so far, with files_read_staged beside it.
void bind_stage_stats(py::module_& m) {
  RecordClass<StageView>(m, "StageStats", "Node-local staging so far (C++ staging::StageStats)")
      .field(
          "files", [](const StageView& v) { return v.s.files; }, "Given to the stager")
      .field(
          "staged", [](const StageView& v) { return v.s.staged; }, "Copied")
      .field(
          "reused", [](const StageView& v) { return v.s.reused; }, "Found complete in the folder")
      .field(
          "skipped_limit", [](const StageView& v) { return v.s.skipped_limit; }, "Over limit_bytes")
      .field(
          "skipped_space", [](const StageView& v) { return v.s.skipped_space; }, "No room in the folder")
      .field(
          "failed", [](const StageView& v) { return v.s.failed; }, "Failed")
      .field(
          "bytes_copied", [](const StageView& v) { return v.s.bytes_copied; }, "Written by this stager")
      .field(
          "bytes_staged", [](const StageView& v) { return v.s.bytes_staged; }, "Of the staged and reused files")
      .field(
          "bytes_skipped", [](const StageView& v) { return v.s.bytes_skipped; }, "Of the skipped and failed files")
      .field(
          "done", [](const StageView& v) { return v.s.done; }, "Every file has its outcome")
      .field(
          "first_error", [](const StageView& v) { return v.s.first_error; }, "The first failure, naming the file")
      .field(
          "files_read_staged", [](const StageView& v) { return v.files_read_staged; },
          "Files read from staged copies (from the last start_epoch on)")
      .finish();
}

/// LoaderStats' counts of what was delivered and read, and the I/O engines.
void add_loader_traffic_fields(RecordClass<LoaderStats>& stats) {
  stats
      .field(
          "batches", [](const LoaderStats& s) { return s.batches; }, "Delivered to the consumer")
      .field("samples", [](const LoaderStats& s) { return s.samples; })
      .field(
          "bytes_delivered", [](const LoaderStats& s) { return s.bytes_delivered; }, "Decoded bytes handed out")
      .field(
          "bytes_read", [](const LoaderStats& s) { return s.bytes_read; }, "Bytes read from files")
      .field(
          "planned_reads", [](const LoaderStats& s) { return s.planned_reads; },
          "Reads planned after coalescing (one per merged run of extents)")
      .field(
          "io_operations", [](const LoaderStats& s) { return s.io_operations; },
          "Reads the I/O engines completed: planned reads, large ones in pieces")
      .field(
          "extents", [](const LoaderStats& s) { return s.extents; }, "Extents asked for before coalescing")
      .field("peak_in_flight_bytes", [](const LoaderStats& s) { return s.peak_in_flight_bytes; })
      .field("pool_allocations", [](const LoaderStats& s) { return s.pool_allocations; })
      .field("pool_reuses", [](const LoaderStats& s) { return s.pool_reuses; })
      .field(
          "io_backend", [](const LoaderStats& s) { return s.io_backend; }, "e.g. io_uring")
      .field(
          "lookahead_batches", [](const LoaderStats& s) { return s.lookahead_batches; },
          "Now: admitted (reading, decoding or queued) and not yet handed out")
      .field(
          "held_batches", [](const LoaderStats& s) { return s.held_batches; },
          "Now: handed to the consumer and not yet dropped")
      .field(
          "io_engines", [](const LoaderStats& s) { return s.io_engines; },
          "I/O engines batches go to now (the autotuner may move it)")
      .field(
          "io_engines_made", [](const LoaderStats& s) { return s.io_engines_made; },
          "I/O engines made at create (the most the autotuner may use)");
}

/// LoaderStats' autotuner, threads and cores, held memory, prefetch, route and staging.
void add_loader_resource_fields(RecordClass<LoaderStats>& stats) {
  stats
      .field(
          "autotune", [](const LoaderStats& s) { return s.autotune; }, "Whether the autotuner runs")
      .field(
          "autotune_changes", [](const LoaderStats& s) { return s.autotune_changes; }, "Steps the autotuner has taken")
      .field(
          "threads", [](const LoaderStats& s) { return s.threads; },
          "Decode threads batches go to now (threads, or the autotuner's)")
      .field(
          "cores", [](const LoaderStats& s) { return s.cores; },
          "Cores the process may use (affinity and cgroup quota)")
      .field(
          "decode_peak", [](const LoaderStats& s) { return s.decode_peak; },
          "The most batches in the decode stage at once")
      .field(
          "batches_spread", [](const LoaderStats& s) { return s.batches_spread; },
          "Batches read by an engine other than the first")
      .field(
          "split_records", [](const LoaderStats& s) { return s.split_records; },
          "TFRecord records read around their value (straight into the batch) and checked")
      .field(
          "split_records_whole", [](const LoaderStats& s) { return s.split_records_whole; },
          "Split records that failed their check and were decoded from the whole record")
      .field("io_fallback_reason", [](const LoaderStats& s) { return s.io_fallback_reason; })
      .field(
          "files", [](const LoaderStats& s) { return s.files; }, "Distinct files of the dataset (all fields)")
      .field(
          "resident_bytes", [](const LoaderStats& s) { return s.resident_bytes; },
          "Held in memory (resident); 0: read from the files")
      .field("resident_reason", [](const LoaderStats& s) { return s.resident_reason; })
      .field(
          "memory_budget", [](const LoaderStats& s) { return s.memory_budget; },
          "The memory budget in use, in bytes (memory_budget, or the machine's when 0)")
      .field("memory_budget_reason", [](const LoaderStats& s) { return s.memory_budget_reason; })
      .field(
          "unpacked_bytes", [](const LoaderStats& s) { return s.unpacked_bytes; },
          "Kept for unpacked arrays (unpack), reserved at create")
      .field("unpacked_reason", [](const LoaderStats& s) { return s.unpacked_reason; })
      .field(
          "prefetch", [](const LoaderStats& s) { return s.prefetch; }, "The prefetch policy in use")
      .field(
          "route", [](const LoaderStats& s) { return s.route; }, "gather or pipeline")
      .field(
          "stage",
          [](const LoaderStats& s) {
            return StageView{s.stage, s.files_read_staged};
          },
          "Node-local staging");
}

}  // namespace

void bind_stats(py::module_& m) {
  bind_stage_stats(m);
  m.def(
      "machine_memory_budget",
      [](uint32_t workers) {
        MachineBudget b = machine_memory_budget(workers);
        return py::make_tuple(b.bytes, b.why);
      },
      py::arg("workers") = 1,
      "The memory budget a Loader takes when memory_budget is 0 (the default), read now: (bytes, why); "
      "workers: processes of this rank each making a loader (DataLoader workers), the share of each.");

  RecordClass<LoaderStats> stats(m, "LoaderStats", "Totals since the loader was created (C++ LoaderStats; a snapshot)");
  add_loader_traffic_fields(stats);
  add_loader_resource_fields(stats);
  stats.finish();
}

}  // namespace dlfeed::python
