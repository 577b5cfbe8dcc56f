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
  // s3:// URLs wherever a path goes (dlfeed::s3, when built with libcurl).
#if DLFEED_WITH_S3
  if (absl::Status st = dlfeed::s3::install(); !st.ok()) throw std::runtime_error(std::string(st.message()));
  m.attr("has_s3") = true;
  m.def(
      "s3_stats",
      [] {
        const dlfeed::s3::Stats s = dlfeed::s3::stats();
        py::dict d;
        d["requests"] = s.requests;
        d["gets"] = s.gets;
        d["lists"] = s.lists;
        d["heads"] = s.heads;
        d["bytes"] = s.bytes;
        d["retries"] = s.retries;
        d["retry_throttled"] = s.retry_throttled;
        d["retry_server"] = s.retry_server;
        d["retry_network"] = s.retry_network;
        d["retry_short"] = s.retry_short;
        d["failures"] = s.failures;
        d["request_seconds"] = static_cast<double>(s.request_ns) / 1e9;
        d["cache_hits"] = s.cache_hits;
        d["cache_bytes"] = s.cache_bytes;
        d["cache_kept"] = s.cache_kept;
        d["cache_damaged"] = s.cache_damaged;
        return d;
      },
      "This process's requests to object stores since it started (counts, bytes, retries by cause).");
#else
  m.attr("has_s3") = false;
#endif
}
