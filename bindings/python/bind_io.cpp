// I/O: IoOptions (backend kind, queue depth, bytes in flight, threads, O_DIRECT).
#include "common.h"
#include "dlfeed/io/io_backend.h"

namespace dlfeed::python {

void bind_io(py::module_& m) {
  py::class_<IoOptions>(m, "IoOptions", "How the loader reads (C++ IoOptions).")
      .def(py::init<>())
      .def_property(
          "kind", [](const IoOptions& o) { return std::string(io_kind_name(o.kind)); },
          [](IoOptions& o, const std::string& s) { o.kind = unwrap(parse_io_kind(s)); },
          "auto, io_uring, thread_pool or sync")
      .def_readwrite("queue_depth", &IoOptions::queue_depth)
      .def_readwrite("max_bytes_in_flight", &IoOptions::max_bytes_in_flight)
      .def_readwrite("threads", &IoOptions::threads)
      .def_readwrite("direct", &IoOptions::direct);

  m.def(
      "io_uring_available",
      []() {
        absl::Status s;
        {
          py::gil_scoped_release nogil;
          s = io_uring_available();
        }
        return py::make_tuple(s.ok(), std::string(s.message()));
      },
      "(True, '') when io_uring works in this process, else (False, why).");
}

}  // namespace dlfeed::python
