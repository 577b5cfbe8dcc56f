// SPDX-License-Identifier: Apache-2.0
// Formats: detection by extension, NPY columns and element types (FormatOptions
// is bound with the other option structs, bind_options.cpp).
#include "common.h"
#include "dlfeed/dtype.h"
#include "dlfeed/format/format.h"

namespace dlfeed::python {

void bind_format(py::module_& m) {
  m.def(
      "detect_format", [](const std::string& path) { return format_name(unwrap(detect_format(path))); },
      py::arg("path"), "The format of a path by its extension.");
  m.def("npy_column_of", &npy_column_of, py::arg("path"),
        "The column an NPY file holds: its name without a shard tag (x_000.npy: 'x').");
  m.def(
      "dtype_descr", [](const std::string& s) { return unwrap(DType::parse(s)).str(); }, py::arg("dtype"),
      "numpy's descriptor ('<f4') of a dtype name or descriptor, as dlfeed parses it.");
}

}  // namespace dlfeed::python
