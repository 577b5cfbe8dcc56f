// SPDX-License-Identifier: Apache-2.0
// Errors: dlfeed::Error (an absl::Status) becomes a Python exception whose
// class follows the status code and whose message is the C++ one, which
// names the file and the byte offset:
//   NotFound                                   -> dlfeed.NotFoundError(dlfeed.Error, FileNotFoundError)
//   InvalidArgument, OutOfRange, FailedPrecondition, AlreadyExists
//                                              -> dlfeed.InvalidArgumentError(dlfeed.Error, ValueError)
//   ResourceExhausted                          -> dlfeed.ResourceError(dlfeed.Error, MemoryError)
//   everything else (DataLoss, Unavailable...) -> dlfeed.DataError(dlfeed.Error, OSError)
// Every instance has .code, the absl status code name ("DATA_LOSS").
#include <Python.h>

#include "absl/status/status.h"
#include "common.h"

namespace dlfeed::python {
namespace {

PyObject* g_error = nullptr;
PyObject* g_not_found = nullptr;
PyObject* g_invalid = nullptr;
PyObject* g_data = nullptr;
PyObject* g_resource = nullptr;

PyObject* new_class(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qual = std::string("dlfeed.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qual.c_str(), doc, bases, nullptr);
  if (!cls) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // steals nothing: add_object increfs
  return cls;                           // the module keeps it alive; so do we (leaked ref)
}

PyObject* class_for(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kNotFound: return g_not_found;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists: return g_invalid;
    case absl::StatusCode::kResourceExhausted: return g_resource;
    default: return g_data;
  }
}

void raise(const absl::Status& status) {
  PyObject* cls = class_for(status.code());
  // A message may hold bytes that are not UTF-8 (a file or NPZ member named
  // in another encoding): escaped (\xc6), never a UnicodeDecodeError in
  // place of the error.
  const absl::string_view text = status.message();
  py::object msg = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace"));
  if (!msg) return;  // the decode's own error stays set (it cannot fail with backslashreplace)
  PyObject* exc = PyObject_CallOneArg(cls, msg.ptr());
  if (!exc) return;  // the call's own error stays set
  std::string code = absl::StatusCodeToString(status.code());
  PyObject* code_obj = PyUnicode_FromString(code.c_str());
  PyObject_SetAttrString(exc, "code", code_obj);
  Py_XDECREF(code_obj);
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
}

}  // namespace

void bind_error(py::module_& m) {
  g_error = new_class(m, "Error", PyExc_Exception, "Base class of dlfeed's errors.");
  py::tuple nf = py::make_tuple(py::handle(g_error), py::handle(PyExc_FileNotFoundError));
  g_not_found = new_class(m, "NotFoundError", nf.ptr(),
                          "A file or folder does not exist, or a field (NPY column, NPZ member, HDF5 dataset, "
                          "TFRecord feature) is not in it.");
  py::tuple inv = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_invalid = new_class(m, "InvalidArgumentError", inv.ptr(),
                        "A bad option, or a file whose structure is not what dlfeed expects.");
  py::tuple data = py::make_tuple(py::handle(g_error), py::handle(PyExc_OSError));
  g_data = new_class(m, "DataError", data.ptr(), "A read or decode failure (corrupt data, CRC mismatch, I/O error).");
  py::tuple resource = py::make_tuple(py::handle(g_error), py::handle(PyExc_MemoryError));
  g_resource = new_class(m, "ResourceError", resource.ptr(),
                         "The system gave the loader no more memory (or address space) or threads.");

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const dlfeed::Error& e) {
      raise(e.status());
    }
  });

  // For tests and tools: raise the exception a status code maps to.
  m.def("_raise_status", [](int code, const std::string& message) {
    check(absl::Status(static_cast<absl::StatusCode>(code), message));
  });
}

}  // namespace dlfeed::python
