// SPDX-License-Identifier: Apache-2.0
// The loader: LoaderOptions in, Batches out. Every call that waits or works
// in C++ (create, start_epoch, next, restore, close) releases the GIL, so
// other Python threads run meanwhile.
#include <pybind11/stl.h>

#include <unistd.h>

#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "batch_py.h"
#include "dlfeed/loader.h"
#include "dlfeed/order/order.h"

namespace dlfeed::python {
namespace {

struct PyLoader {
  std::unique_ptr<Loader> loader;
  std::shared_ptr<const Reshape> reshape;
  uint64_t remaining = 0;    // batches left in the running epoch
  bool pending_end = false;  // an epoch started whose end (next() giving None) was not taken yet
  uint32_t h2d_lane = 0;     // the trace lane of copies to the device (0: none yet)
  pid_t pid = getpid();

  PyLoader() = default;
  PyLoader(const PyLoader&) = delete;
  ~PyLoader() {
    if (loader && pid != getpid()) (void)loader.release();  // a forked child: the threads are the parent's
  }

  Loader& get() {
    if (!loader) throw py::value_error("the loader is closed");
    if (pid != getpid()) {
      throw py::value_error("this dlfeed loader was created before fork(); create a new one in this process");
    }
    return *loader;
  }

  /// Runs fn(loader) with the GIL released, holding call_mu: a close() from
  /// another thread waits for it to return, and a call after that close finds
  /// the loader gone ("the loader is closed"), never a freed one. The GIL is
  /// taken back outside any destructor: a daemon thread that the
  /// interpreter's exit ends as it takes the GIL (pthread_exit) unwinds
  /// through here, where gil_scoped_release's destructor would terminate.
  template <class F>
  auto without_gil(F&& fn) -> decltype(fn(std::declval<Loader&>())) {
    using R = decltype(fn(std::declval<Loader&>()));
    get();  // closed, or made before fork(): the error now, with the GIL
    std::optional<R> out = without_gil_call([&]() -> std::optional<R> {
      std::lock_guard<std::mutex> lock(call_mu);
      if (!loader) return std::nullopt;
      return fn(*loader);
    });
    if (!out) throw py::value_error("the loader is closed");
    return std::move(*out);
  }

  /// Lets go of the loader and joins its threads, after a call in progress
  /// on another thread returns.
  void close() {
    without_gil_call([&] { call_mu.lock(); });
    std::unique_ptr<Loader> l = std::move(loader);  // with the GIL and call_mu: seen by get() and without_gil()
    call_mu.unlock();
    without_gil_call([&] { l.reset(); });
  }

 private:
  std::mutex call_mu;  // held by a call working on `loader` without the GIL
};

/// shapes= views that cannot fit: refused when the loader is made, not at its
/// first batch. A field whose samples' shape is known from the index must have
/// as many elements as the view; one known only after decode is checked per
/// batch (with_sample_shape).
absl::Status check_views(const Loader& l, const Reshape& reshape) {
  const auto& names = l.field_names();
  for (size_t f = 0; f < reshape.size() && f < names.size(); ++f) {
    if (!reshape[f]) continue;
    const Shape& view = *reshape[f];
    int64_t want = 1;
    for (int64_t d : view) {
      if (d < 0) {
        return absl::InvalidArgumentError("shapes: field '" + names[f] + "': sample shape " + shape_str(view) +
                                          " has a negative dimension");
      }
      want *= d;
    }
    const FieldSpec& spec = l.field_specs()[f];
    if (spec.rank_varies) continue;
    int64_t have = 1;
    bool known = true;
    for (int64_t d : spec.shape) {
      known = known && d >= 0;
      have *= d;
    }
    if (known && have != want) {
      return absl::InvalidArgumentError("shapes: field '" + names[f] + "': its samples have shape " +
                                        shape_str(spec.shape) + " (" + std::to_string(have) +
                                        " elements), which cannot be viewed with sample shape " + shape_str(view) +
                                        " (" + std::to_string(want) + ")");
    }
  }
  return absl::OkStatus();
}

/// Loader(options, shapes): the C++ loader, made with the GIL released.
void bind_loader_create(py::class_<PyLoader>& cls) {
  cls.def(py::init([](const LoaderOptions& options, const std::vector<std::optional<std::vector<int64_t>>>& shapes) {
            auto self = std::make_unique<PyLoader>();
            auto reshape = std::make_shared<Reshape>();
            for (const auto& s : shapes) {
              if (s)
                reshape->push_back(Shape(s->begin(), s->end()));
              else
                reshape->push_back(std::nullopt);
            }
            self->reshape = std::move(reshape);
            self->loader = unwrap(without_gil_call([&] { return Loader::create(options); }));
            if (absl::Status views = check_views(*self->loader, *self->reshape); !views.ok()) {
              without_gil_call([&] { self->loader.reset(); });  // its threads end as at close()
              check(views);
            }
            return self;
          }),
          py::arg("options"), py::arg("shapes") = std::vector<std::optional<std::vector<int64_t>>>{});
}

/// Running epochs: start_epoch, set_overlap_epochs and next.
void bind_loader_epochs(py::class_<PyLoader>& cls) {
  cls.def(
         "start_epoch",
         [](PyLoader& self, uint64_t epoch, uint64_t position) {
           auto [st, left] = self.without_gil([&](Loader& l) {
             absl::Status started = position == 0 ? l.start_epoch(epoch) : l.start_epoch_at(epoch, position);
             return std::make_pair(started, l.batches_left());
           });
           check(st);
           // Batches left: all of them, those after a restored position, or this rank's share of what an
           // elastic restore left.
           self.remaining = left;
           self.pending_end = true;
         },
         py::arg("epoch"), py::arg("position") = 0)
      .def(
          "set_overlap_epochs", [](PyLoader& self, bool on) { self.get().set_overlap_epochs(on); }, py::arg("on"),
          "On: the pipeline reads the next epoch once this one is all read; start_epoch(next) adopts it.")
      .def(
          "next",
          [](PyLoader& self) -> py::object {
            std::shared_ptr<const Batch> b = unwrap(self.without_gil([](Loader& l) { return l.next(); }));
            if (!b) {
              self.remaining = 0;
              self.pending_end = false;
              return py::none();
            }
            if (self.remaining > 0) --self.remaining;
            return py::cast(PyBatch{std::move(b), self.reshape});
          },
          "The next batch of the running epoch, or None at its end.");
}

/// Checkpointing: state and restore.
void bind_loader_state(py::class_<PyLoader>& cls) {
  cls.def("state", [](PyLoader& self) { return py::bytes(self.get().state()); })
      .def(
          "restore",
          [](PyLoader& self, const py::bytes& state) {
            std::string s(state);
            check(self.without_gil([&](Loader& l) { return l.restore(s); }));
            self.pending_end = false;  // the running epoch, if any, is given up
          },
          py::arg("state"));
}

/// The dataset's sizes, the fields, the options and the stats.
void bind_loader_properties(py::class_<PyLoader>& cls) {
  cls.def_property_readonly("num_samples", [](PyLoader& self) { return self.get().num_samples(); })
      .def_property_readonly("samples_per_epoch", [](PyLoader& self) { return self.get().samples_per_epoch(); })
      .def_property_readonly("batches_per_epoch", [](PyLoader& self) { return self.get().batches_per_epoch(); })
      .def_property_readonly(
          "epoch_pending_end", [](PyLoader& self) { return self.pending_end; },
          "Whether the running epoch's end (next() giving None) is still to be taken.")
      .def_property_readonly(
          "batches_left", [](PyLoader& self) { return self.remaining; },
          "Batches the running epoch has still to deliver (all of them after start_epoch, fewer after a "
          "mid-epoch restore; 0 at its end).")
      .def_property_readonly("field_names", [](PyLoader& self) { return self.get().field_names(); })
      .def_property_readonly("options", [](PyLoader& self) { return self.get().options(); })
      .def("stats", [](PyLoader& self) { return self.get().stats(); });
}

/// Counters (docs/counters.md): JSON snapshot, summary table, compute
/// regions and steps for AU, the device= path's h2d copies and waits, traces.
void bind_loader_counters(py::class_<PyLoader>& cls) {
  cls.def("counters_json", [](PyLoader& self) { return self.get().counters_json(); })
      .def("summary_table", [](PyLoader& self) { return self.get().counters_snapshot().summary_table(); })
      .def("reset_counters", [](PyLoader& self) { self.get().counters().reset(); })
      .def("mark_step", [](PyLoader& self) { self.get().counters().mark_step(); })
      .def("counters_now", [](PyLoader& self) { return self.get().counters().now(); })
      .def(
          "record_h2d",
          [](PyLoader& self, uint64_t t0, uint64_t ns, uint64_t bytes, uint64_t epoch, uint64_t index) {
            // The h2d stage (docs/counters.md): one batch's copy to the GPU, timed by the device's
            // events, on a trace lane of its own that begins when the copy was issued.
            counters::Counters& c = self.get().counters();
            c.sample(counters::Id::kH2d, ns);
            c.add(counters::Id::kH2dBytes, bytes);
            if (c.tracing()) {
              if (self.h2d_lane == 0) self.h2d_lane = counters::Counters::new_lane("dlfeed h2d");
              c.trace_on_lane(self.h2d_lane, "h2d", "h2d", t0, ns, epoch, index, bytes);
            }
          },
          py::arg("t0"), py::arg("ns"), py::arg("bytes"), py::arg("epoch"), py::arg("index"),
          "Records one batch's copy to the device (the Python device= path) into the counters.")
      .def(
          "record_wait",
          [](PyLoader& self, uint64_t t0, uint64_t t1) {
            // The device= path's consumer waited in next() from t0 to t1 (counters_now()) for a
            // batch whose copy the feeder thread had not issued yet: stall, as a wait in next() is.
            counters::Counters& c = self.get().counters();
            counters::Span stall(&c, counters::kStallSpan, t0);
            stall.end_at(t1 > t0 ? t1 : t0);
          },
          py::arg("t0"), py::arg("t1"),
          "Records the consumer's wait for a device batch (the Python device= path) as stall.")
      .def(
          "compute_begin",
          [](PyLoader& self) {
            counters::Counters& c = self.get().counters();
            const uint64_t t0 = c.now();
            return py::make_tuple(t0, c.region_begin(counters::Region::kCompute, t0));
          },
          "Starts a compute region on this thread; returns a token for compute_end.")
      .def(
          "compute_end",
          [](PyLoader& self, uint64_t t0, uint64_t io0) {
            counters::Counters& c = self.get().counters();
            c.region_end(counters::Region::kCompute, t0, c.now(), io0);
          },
          py::arg("t0"), py::arg("io_busy_at_t0"))
      .def(
          "write_trace",
          [](PyLoader& self, const std::string& path, const std::string& format) {
            counters::TraceFormat f;
            if (!counters::parse_trace_format(format, &f)) {
              check(absl::InvalidArgumentError("trace format '" + format + "': expected one of " +
                                               counters::trace_format_names()));
            }
            check(self.without_gil([&](Loader& l) { return l.write_trace(path, f); }));
          },
          py::arg("path"), py::arg("format") = "chrome");
}

/// field_specs: each field's name, numpy descr and sample shape.
void bind_loader_field_specs(py::class_<PyLoader>& cls) {
  cls.def(
      "field_specs",
      [](PyLoader& self) {
        // Per field: (name, numpy descr, sample shape with None where samples differ or
        // are known only after decode), from the index (Loader::field_specs).
        Loader& l = self.get();
        py::list out;
        const auto& names = l.field_names();
        for (size_t f = 0; f < names.size(); ++f) {
          const FieldSpec& spec = l.field_specs()[f];
          std::optional<Shape> shape;
          if (!spec.rank_varies) shape = spec.shape;
          if (f < self.reshape->size() && (*self.reshape)[f]) shape = (*self.reshape)[f];
          py::object shp = py::none();
          if (shape) {
            py::list dims;
            for (int64_t d : *shape) dims.append(d < 0 ? py::object(py::none()) : py::object(py::int_(d)));
            shp = py::tuple(dims);
          }
          out.append(py::make_tuple(names[f], spec.dtype.str(), shp));
        }
        return out;
      },
      "[(name, numpy descr, sample shape with None for unknown dims, or None)] per field");
}

/// close and _abandon (after fork()).
void bind_loader_close(py::class_<PyLoader>& cls) {
  cls.def(
         "close",
         [](PyLoader& self) {
           if (self.pid != getpid()) {
             (void)self.loader.release();  // its threads are the parent's: never join them
             return;
           }
           self.close();
         },
         "Stops the pipeline and joins its threads (batches already handed out stay valid).")
      .def(
          "_abandon", [](PyLoader& self) { (void)self.loader.release(); },
          "After fork(): forget the parent's loader without joining threads that do not exist here.");
}

}  // namespace

void bind_loader(py::module_& m) {
  py::class_<PyLoader> cls(m, "Loader", "The C++ loader (private: use dlfeed.Loader).");
  bind_loader_create(cls);
  bind_loader_epochs(cls);
  bind_loader_state(cls);
  bind_loader_properties(cls);
  bind_loader_counters(cls);
  bind_loader_field_specs(cls);
  bind_loader_close(cls);
}

}  // namespace dlfeed::python
