// SPDX-License-Identifier: Apache-2.0
// The private extension module behind the `dlfeed` Python package. Each
// stage of the library is bound in its own bind_<stage>.cpp; the public,
// Pythonic API (dlfeed.Loader, dlfeed.torch, dlfeed.tf) is pure Python on top.
#include "common.h"
#include "dlfeed/detail/export.h"
#if DLFEED_WITH_S3
#include "dlfeed/s3/s3.h"
#endif

namespace dlfeed::python {

Shape shape_from_py(const py::handle& seq) {
  Shape s;
  for (py::handle d : seq) s.push_back(d.cast<int64_t>());
  return s;
}

py::tuple shape_to_py(const Shape& shape) {
  py::tuple t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t[i] = py::int_(shape[i]);
  return t;
}

}  // namespace dlfeed::python

PYBIND11_MODULE(_dlfeed, m) {
  using namespace dlfeed::python;
  m.doc() = "dlfeed's C++ core (private: use the dlfeed package)";
  // The version the library was compiled as (VERSION, via detail/export.h).
  m.attr("__version__") = DLFEED_VERSION_STRING;
  bind_error(m);
  bind_options(m);
  bind_format(m);
  bind_order(m);
  bind_io(m);
  bind_batch(m);
  bind_stats(m);
  bind_loader(m);
  bind_memory(m);
  bind_mpi(m);  // the job cache under mpirun (dlfeed::mpi, when built with MPI)
  // s3:// URLs wherever a path goes (dlfeed::s3, when built with libcurl).
#if DLFEED_WITH_S3
  if (absl::Status st = dlfeed::s3::install(); !st.ok()) throw std::runtime_error(std::string(st.message()));
  m.attr("has_s3") = true;
  m.def(
      "s3_stats",
      [] {
        // One list of the counters: dlfeed::s3::stats_json's, as the command line writes them.
        return py::dict(py::module_::import("json").attr("loads")(dlfeed::s3::stats_json(dlfeed::s3::stats())));
      },
      "This process's requests to object stores since it started (counts, bytes, retries by cause, cache reads).");
#else
  m.attr("has_s3") = false;
#endif
}
