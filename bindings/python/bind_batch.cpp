// SPDX-License-Identifier: Apache-2.0
// Batches: zero-copy numpy arrays and DLPack tensors over the batch buffer.
//
// Nothing is copied: an array's base object (a capsule) and a DLPack
// capsule's manager context each own a std::shared_ptr<const Batch>, and the
// batch's deleter returns its buffers to the loader's pool only when the
// last one is released. The arrays are writable: the buffer belongs to this
// batch alone until then.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>

#include "batch_py.h"
#include "dlpack.h"

namespace dlfeed::python {
namespace {

/// One field of a batch, or one sample of a ragged field: what a numpy
/// array or a DLPack tensor is made of.
struct TensorView {
  std::shared_ptr<const Batch> keep;
  std::string name;
  DType dtype;
  Shape shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
};

using Owner = std::shared_ptr<const Batch>;

py::capsule owner_capsule(const Owner& keep) {
  return py::capsule(new Owner(keep), [](void* p) { delete static_cast<Owner*>(p); });
}

py::array to_numpy(const TensorView& t) {
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
  py::dtype dt(t.dtype.str());
  if (t.nbytes == 0 || t.data == nullptr) return py::array(dt, shape);  // nothing to share
  return py::array(dt, shape, const_cast<std::byte*>(t.data), owner_capsule(t.keep));
}

// NumPy's __array__(dtype=None, copy=None) protocol (NumPy 2): the shared
// memory when neither asks for a copy; a copy when copy=True or the dtype
// differs; ValueError when copy=False and the dtype differs (a copy needed).
py::object array_protocol(const TensorView& t, const py::object& dtype, const py::object& copy) {
  py::array a = to_numpy(t);
  const bool copy_asked = !copy.is_none() && copy.cast<bool>();
  const bool copy_refused = !copy.is_none() && !copy.cast<bool>();
  if (!dtype.is_none()) {
    const py::dtype want = py::dtype::from_args(dtype);
    if (!a.dtype().equal(want)) {
      if (copy_refused) {
        throw py::value_error("dlfeed.Tensor '" + t.name + "' is " + t.dtype.name() + "; viewing it as " +
                              py::str(want).cast<std::string>() + " needs a copy, and copy=False was given");
      }
      return a.attr("astype")(want);
    }
  }
  if (copy_asked) return a.attr("copy")();
  return a;
}

Shape with_sample_shape(const std::string& field, size_t batch, const Shape& given, const Shape& sample) {
  Shape out;
  out.push_back(static_cast<int64_t>(batch));
  for (int64_t d : sample) out.push_back(d);
  int64_t a = 1, b = 1;
  for (int64_t d : given) a *= d;
  for (int64_t d : out) b *= d;
  if (a != b) {
    check(absl::InvalidArgumentError("field '" + field + "': batch of shape " + shape_str(given) +
                                     " cannot be viewed with sample shape " + shape_str(sample)));
  }
  return out;
}

const Shape* override_for(const PyBatch& b, size_t f) {
  if (!b.reshape || f >= b.reshape->size() || !(*b.reshape)[f]) return nullptr;
  return &*(*b.reshape)[f];
}

size_t field_index(const PyBatch& b, const py::handle& key) {
  const auto& fields = b.batch->fields;
  if (py::isinstance<py::int_>(key)) {
    int64_t i = key.cast<int64_t>();
    if (i < 0) i += static_cast<int64_t>(fields.size());
    if (i < 0 || i >= static_cast<int64_t>(fields.size())) throw py::index_error("field index out of range");
    return static_cast<size_t>(i);
  }
  if (!py::isinstance<py::str>(key)) {
    throw py::type_error(std::string("batch[...]: a field's name (str) or index (int), not ") +
                         std::string(py::str(py::type::of(key).attr("__name__"))));
  }
  std::string name = key.cast<std::string>();
  for (size_t f = 0; f < fields.size(); ++f)
    if (fields[f].name == name) return f;
  throw py::key_error("no field '" + name + "' in this batch");
}

/// The whole field (uniform), or one view per sample (ragged).
std::vector<TensorView> views(const PyBatch& b, size_t f) {
  const BatchField& field = b.batch->fields[f];
  const Shape* want = override_for(b, f);
  std::vector<TensorView> out;
  if (!field.ragged()) {
    TensorView t{b.batch, field.name, field.dtype, field.shape, field.bytes.data(), field.bytes.size()};
    if (want) t.shape = with_sample_shape(field.name, field.size(), field.shape, *want);
    out.push_back(std::move(t));
    return out;
  }
  for (size_t i = 0; i < field.size(); ++i) {
    auto bytes = field.sample(i);
    TensorView t{b.batch, field.name, field.dtype, field.sample_shapes[i], bytes.data(), bytes.size()};
    if (want) {
      Shape s = with_sample_shape(field.name, 1, t.shape, *want);
      t.shape = Shape(s.begin() + 1, s.end());
    }
    out.push_back(std::move(t));
  }
  return out;
}

py::object field_arrays(const PyBatch& b, size_t f) {
  auto vs = views(b, f);
  if (!b.batch->fields[f].ragged()) return to_numpy(vs[0]);
  py::list l;
  for (auto& v : vs) l.append(to_numpy(v));
  return l;
}

// ---- DLPack ----

struct DLContext {
  Owner keep;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor tensor{};
};

void dl_deleter(DLManagedTensor* t) { delete static_cast<DLContext*>(t->manager_ctx); }

void capsule_destructor(PyObject* capsule) {
  // Renamed "used_dltensor" by a consumer that took ownership; otherwise ours.
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (t && t->deleter) t->deleter(t);
}

DLDataType dl_dtype(const DType& d) {
  if (d.size > 1 && d.big_endian) {
    throw py::buffer_error("DLPack has no big-endian types; the field is " + d.name() + " (use numpy())");
  }
  DLDataType t{};
  t.bits = static_cast<uint8_t>(d.size * 8);
  t.lanes = 1;
  switch (d.kind) {
    case DType::Kind::kBool: t.code = kDLBool; break;
    case DType::Kind::kInt: t.code = kDLInt; break;
    case DType::Kind::kUInt: t.code = kDLUInt; break;
    case DType::Kind::kFloat: t.code = kDLFloat; break;
  }
  return t;
}

py::object to_dlpack(const TensorView& v) {
  auto ctx = std::make_unique<DLContext>();
  ctx->keep = v.keep;
  ctx->shape.assign(v.shape.begin(), v.shape.end());
  ctx->strides.assign(v.shape.size(), 1);
  for (size_t i = v.shape.size(); i-- > 1;) ctx->strides[i - 1] = ctx->strides[i] * v.shape[i];
  DLTensor& t = ctx->tensor.dl_tensor;
  t.data = const_cast<std::byte*>(v.data);
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<int32_t>(ctx->shape.size());
  t.dtype = dl_dtype(v.dtype);
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->tensor.manager_ctx = ctx.get();
  ctx->tensor.deleter = dl_deleter;
  PyObject* cap = PyCapsule_New(&ctx->tensor, "dltensor", capsule_destructor);
  if (!cap) throw py::error_already_set();
  ctx.release();  // now owned by the capsule (or by the consumer that takes it)
  return py::reinterpret_steal<py::object>(cap);
}

py::object dlpack_method(const TensorView& v, const py::object& stream, const py::object& max_version,
                         const py::object& dl_device, const py::object& copy) {
  (void)stream;       // CPU memory: nothing to synchronise
  (void)max_version;  // we produce the unversioned (0.x) capsule, which every consumer accepts
  if (!dl_device.is_none()) {
    auto dev = dl_device.cast<std::pair<int, int>>();
    if (dev.first != kDLCPU) throw py::buffer_error("dlfeed batches are in CPU memory");
  }
  if (!copy.is_none() && copy.cast<bool>()) throw py::buffer_error("copy=True is not supported: dlfeed shares memory");
  return to_dlpack(v);
}

/// dlfeed.Tensor: one field of a batch (or one sample of a ragged field), with numpy and DLPack.
void bind_tensor(py::module_& m) {
  py::class_<TensorView>(m, "Tensor",
                         "One field of a batch (or one sample of a ragged field), in the batch's memory. "
                         "Implements __dlpack__/__dlpack_device__ (zero copy) and numpy().")
      .def_readonly("name", &TensorView::name)
      .def_property_readonly("shape", [](const TensorView& t) { return shape_to_py(t.shape); })
      .def_property_readonly("dtype", [](const TensorView& t) { return py::dtype(t.dtype.str()); })
      .def_property_readonly("nbytes", [](const TensorView& t) { return t.nbytes; })
      .def_property_readonly(
          "data_ptr", [](const TensorView& t) { return reinterpret_cast<uintptr_t>(t.data); },
          "Address of the first byte (for checking zero copy).")
      .def("numpy", &to_numpy, "A numpy array sharing this tensor's memory.")
      .def("__array__", &array_protocol, py::arg("dtype") = py::none(), py::arg("copy") = py::none(),
           "numpy's array protocol: shares the memory unless dtype differs or copy=True; copy=False with "
           "another dtype raises ValueError")
      .def("__dlpack__", &dlpack_method, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const TensorView&) { return py::make_tuple(int(kDLCPU), 0); })
      .def("__repr__", [](const TensorView& t) {
        return "<dlfeed.Tensor '" + t.name + "' " + shape_str(t.shape) + " " + t.dtype.name() + ">";
      });
}

/// A batch's place in the epoch, its sample ids and size.
void bind_batch_info(py::class_<PyBatch>& cls) {
  cls.def_property_readonly("epoch", [](const PyBatch& b) { return b.batch->epoch; })
      .def_property_readonly(
          "index", [](const PyBatch& b) { return b.batch->index; }, "Batch number within the epoch (for this rank).")
      .def_property_readonly("position", [](const PyBatch& b) { return b.batch->position; })
      .def_property_readonly(
          "sample_ids",
          [](const PyBatch& b) {
            // A copy (a few bytes): ids are often kept, and they should not keep the batch.
            const auto& ids = b.batch->sample_ids;
            return py::array_t<uint64_t>(static_cast<py::ssize_t>(ids.size()), ids.data());
          },
          "Global sample ids, in batch order (numpy uint64, a copy).")
      .def_property_readonly("nbytes", [](const PyBatch& b) { return b.batch->nbytes(); });
}

/// A batch's fields by name or position: as numpy arrays or dlfeed.Tensors.
void bind_batch_fields(py::class_<PyBatch>& cls) {
  cls.def("keys",
          [](const PyBatch& b) {
            py::list l;
            for (const auto& f : b.batch->fields) l.append(f.name);
            return l;
          })
      .def(
          "__len__", [](const PyBatch& b) { return b.batch->size(); }, "Number of samples.")
      .def("__contains__", [](const PyBatch& b, const std::string& name) { return b.batch->field(name) != nullptr; })
      .def(
          "__getitem__", [](const PyBatch& b, const py::handle& key) { return field_arrays(b, field_index(b, key)); },
          "batch['x'] or batch[0]: the field as a numpy array (ragged: a list of arrays).")
      .def(
          "arrays",
          [](const PyBatch& b) {
            py::dict d;
            for (size_t f = 0; f < b.batch->fields.size(); ++f)
              d[py::str(b.batch->fields[f].name)] = field_arrays(b, f);
            return d;
          },
          "{name: numpy array (or list of arrays when ragged)}")
      .def("is_ragged",
           [](const PyBatch& b, const py::handle& key) { return b.batch->fields[field_index(b, key)].ragged(); })
      .def(
          "tensor",
          [](const PyBatch& b, const py::handle& key) -> py::object {
            size_t f = field_index(b, key);
            auto vs = views(b, f);
            if (!b.batch->fields[f].ragged()) return py::cast(std::move(vs[0]));
            py::list l;
            for (auto& v : vs) l.append(py::cast(std::move(v)));
            return l;
          },
          "The field as a dlfeed.Tensor (DLPack); ragged: a list of one per sample.");
}

/// DLPack and numpy's array protocol for a batch of one uniform field, and repr.
void bind_batch_protocols(py::class_<PyBatch>& cls) {
  cls.def(
         "__dlpack__",
         [](const PyBatch& b, const py::object& stream, const py::object& max_version, const py::object& dl_device,
            const py::object& copy) {
           if (b.batch->fields.size() != 1 || b.batch->fields[0].ragged()) {
             throw py::buffer_error(
                 "a batch is one DLPack tensor only when it has one uniform field; use "
                 "batch.tensor(name)");
           }
           return dlpack_method(views(b, 0)[0], stream, max_version, dl_device, copy);
         },
         py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
         py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const PyBatch&) { return py::make_tuple(int(kDLCPU), 0); })
      .def(
          "__array__",
          [](const PyBatch& b, const py::object& dtype, const py::object& copy) {
            if (b.batch->fields.size() != 1 || b.batch->fields[0].ragged()) {
              throw py::type_error(
                  "a batch is one array only when it has one uniform field; use batch[name] or "
                  "batch.tensor(name)");
            }
            return array_protocol(views(b, 0)[0], dtype, copy);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none(),
          "np.asarray(batch) for a batch of one uniform field (as __dlpack__); dtype and copy as for Tensor")
      .def("__repr__", [](const PyBatch& b) {
        std::string s = "<dlfeed.Batch epoch " + std::to_string(b.batch->epoch) + " index " +
                        std::to_string(b.batch->index) + ", " + std::to_string(b.batch->size()) + " samples:";
        for (const auto& f : b.batch->fields)
          s += " " + f.name + (f.ragged() ? " ragged " : " " + shape_str(f.shape) + " ") + f.dtype.name();
        return s + ">";
      });
}

}  // namespace

void bind_batch(py::module_& m) {
  bind_tensor(m);

  py::class_<PyBatch> cls(m, "Batch",
                          "One batch: sample ids and fields. batch['x'] is a numpy array sharing the batch's "
                          "memory (a list of arrays for a ragged field); batch.tensor('x') supports DLPack.");
  bind_batch_info(cls);
  bind_batch_fields(cls);
  bind_batch_protocols(cls);
}

}  // namespace dlfeed::python
