// Formats: FormatOptions (how files become samples) and element types.
#include <pybind11/stl.h>

#include "common.h"
#include "dlfeed/dtype.h"
#include "dlfeed/format/format.h"

namespace dlfeed::python {
namespace {

std::string axis_name(SampleAxis a) {
  switch (a) {
    case SampleAxis::kFirst: return "first";
    case SampleAxis::kLast: return "last";
    default: return "auto";
  }
}

SampleAxis parse_axis(const std::string& s) {
  if (s == "first") return SampleAxis::kFirst;
  if (s == "last") return SampleAxis::kLast;
  if (s == "auto") return SampleAxis::kAuto;
  check(absl::InvalidArgumentError("bad axis '" + s + "': expected first, last or auto"));
  return SampleAxis::kAuto;
}

}  // namespace

void bind_format(py::module_& m) {
  py::class_<FormatOptions>(m, "FormatOptions", "How files are turned into samples (C++ FormatOptions).")
      .def(py::init<>())
      .def_property(
          "format", [](const FormatOptions& o) { return format_name(o.format); },
          [](FormatOptions& o, const std::string& s) { o.format = unwrap(parse_format(s)); },
          "auto (by extension), npy, npz, hdf5 or tfrecord")
      .def_property(
          "axis", [](const FormatOptions& o) { return axis_name(o.axis); },
          [](FormatOptions& o, const std::string& s) { o.axis = parse_axis(s); },
          "sample axis of NPY/NPZ arrays: first, last or auto")
      .def_readwrite("name", &FormatOptions::name)
      .def_readwrite("feature", &FormatOptions::feature)
      .def_property(
          "feature_dtype", [](const FormatOptions& o) { return o.feature_dtype.name(); },
          [](FormatOptions& o, const std::string& s) { o.feature_dtype = unwrap(DType::parse(s)); },
          "TFRecord: element type of bytes_list features (e.g. 'float32' or '<f4')")
      .def_property(
          "feature_shape",
          [](const FormatOptions& o) -> py::object {
            if (!o.feature_shape) return py::none();
            return shape_to_py(*o.feature_shape);
          },
          [](FormatOptions& o, const py::object& v) {
            if (v.is_none()) o.feature_shape.reset();
            else o.feature_shape = shape_from_py(v);
          },
          "TFRecord: fixed shape of the feature, or None (1-D)")
      .def_readwrite("verify_crc", &FormatOptions::verify_crc)
      .def_readwrite("use_index_files", &FormatOptions::use_index_files)
      .def_readwrite("write_index_files", &FormatOptions::write_index_files)
      .def_readwrite("index_dir", &FormatOptions::index_dir);

  m.def("detect_format", [](const std::string& path) { return format_name(unwrap(detect_format(path))); },
        py::arg("path"), "The format of a path by its extension.");
  m.def("npy_column_of", &npy_column_of, py::arg("path"),
        "The column an NPY file holds: its name without a shard tag (x_000.npy: 'x').");
  m.def("dtype_descr", [](const std::string& s) { return unwrap(DType::parse(s)).str(); }, py::arg("dtype"),
        "numpy's descriptor ('<f4') of a dtype name or descriptor, as dlfeed parses it.");
}

}  // namespace dlfeed::python
