// SPDX-License-Identifier: Apache-2.0
// I/O: whether io_uring works here (IoOptions is bound with the other option
// structs, bind_options.cpp).
#include "common.h"
#include "dlfeed/io/io_backend.h"

namespace dlfeed::python {

void bind_io(py::module_& m) {
  m.def(
      "io_uring_available",
      []() {
        const absl::Status s = without_gil_call([] { return io_uring_available(); });
        return py::make_tuple(s.ok(), std::string(s.message()));
      },
      "(True, '') when io_uring works in this process, else (False, why).");
}

}  // namespace dlfeed::python
