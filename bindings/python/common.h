// SPDX-License-Identifier: Apache-2.0
// Shared by the bind_<stage>.cpp files of the _dlfeed extension module.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dlfeed/error.h"
#include "dlfeed/order/order.h"
#include "dlfeed/sample.h"

namespace dlfeed::python {

namespace py = pybind11;

// One per stage; module.cpp calls them in this order.
void bind_error(py::module_& m);
void bind_options(py::module_& m);
void bind_format(py::module_& m);
void bind_order(py::module_& m);
void bind_io(py::module_& m);
void bind_batch(py::module_& m);
void bind_stats(py::module_& m);
void bind_loader(py::module_& m);
void bind_memory(py::module_& m);
void bind_mpi(py::module_& m);

/// Throws dlfeed::Error (translated to a dlfeed Python exception) if not OK.
inline void check(const absl::Status& s) { throw_if_error(s); }
template <typename T>
T unwrap(absl::StatusOr<T> v) {
  return value_or_throw(std::move(v));
}

/// The order state inside a Loader::state() (or a bare order state).
absl::StatusOr<OrderState> order_state_of(const std::string& state);

/// A Python sequence of ints as a Shape, and back.
Shape shape_from_py(const py::handle& seq);
py::tuple shape_to_py(const Shape& shape);

/// fn() with the GIL released, taken back outside any destructor: a daemon
/// thread that the interpreter's exit ends as it takes the GIL back
/// (pthread_exit) unwinds through here, where gil_scoped_release's
/// destructor, being noexcept, would end the process (std::terminate).
template <typename F>
auto without_gil_call(F&& fn) -> decltype(fn()) {
  using T = decltype(fn());
  PyThreadState* ts = PyEval_SaveThread();
  if constexpr (std::is_void_v<T>) {
    try {
      fn();
    } catch (...) {
      PyEval_RestoreThread(ts);
      throw;
    }
    PyEval_RestoreThread(ts);  // outside the try: an exit's unwind from here is not caught
  } else {
    std::optional<T> out;
    try {
      out.emplace(fn());
    } catch (...) {
      PyEval_RestoreThread(ts);
      throw;
    }
    PyEval_RestoreThread(ts);
    return std::move(*out);
  }
}

}  // namespace dlfeed::python
