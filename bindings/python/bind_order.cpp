// Order: OrderSpec (strategy, seed, rank, world size...), the strategies, and
// the resume state's fields.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "common.h"
#include "dlfeed/loader_state.h"
#include "dlfeed/order/order.h"

namespace dlfeed::python {

absl::StatusOr<OrderState> order_state_of(const std::string& state) {
  if (!is_loader_state(state)) return decode_state(state);
  DLFEED_ASSIGN_OR_RETURN(LoaderState s, decode_loader_state(state));
  return s.order;
}

void bind_order(py::module_& m) {
  py::class_<OrderSpec>(m, "OrderSpec", "Which sample ids a rank reads per epoch (C++ OrderSpec).")
      .def(py::init<>())
      .def_readwrite("strategy", &OrderSpec::strategy)
      .def_readwrite("seed", &OrderSpec::seed)
      .def_readwrite("epoch", &OrderSpec::epoch)
      .def_readwrite("rank", &OrderSpec::rank)
      .def_readwrite("world_size", &OrderSpec::world_size)
      .def_readwrite("drop_last", &OrderSpec::drop_last)
      .def_readwrite("global_start", &OrderSpec::global_start)
      .def_property(
          "buffer_size", [](const OrderSpec& s) { return s.params.buffer_size; },
          [](OrderSpec& s, uint64_t v) { s.params.buffer_size = v; })
      .def_property(
          "block_size", [](const OrderSpec& s) { return s.params.block_size; },
          [](OrderSpec& s, uint64_t v) { s.params.block_size = v; })
      .def_property(
          "window", [](const OrderSpec& s) { return s.params.window; },
          [](OrderSpec& s, uint64_t v) { s.params.window = v; })
      .def_property(
          "indices",
          [](const OrderSpec& s) -> py::object {
            if (!s.params.indices) return py::none();
            return py::array_t<uint64_t>(s.params.indices->size(), s.params.indices->data());
          },
          [](OrderSpec& s, const py::object& v) {
            if (v.is_none()) {
              s.params.indices.reset();
              return;
            }
            auto a = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(v);
            if (!a) throw py::value_error("indices: expected a sequence of non-negative ints");
            s.params.indices = std::make_shared<const std::vector<uint64_t>>(a.data(), a.data() + a.size());
          },
          "explicit strategy: the global order itself");

  m.def("strategy_names", &strategy_names, "The registered order strategies.");

  m.def(
      "decode_state",
      [](const py::bytes& b) {
        OrderState s = unwrap(order_state_of(std::string(b)));
        py::dict d;
        d["strategy"] = s.spec.strategy;
        d["seed"] = s.spec.seed;
        d["epoch"] = s.spec.epoch;
        d["rank"] = s.spec.rank;
        d["world_size"] = s.spec.world_size;
        d["drop_last"] = s.spec.drop_last;
        d["position"] = s.position;
        d["global_start"] = s.spec.global_start;
        return d;
      },
      py::arg("state"), "The fields of a resume state (Loader.state(), or an order state).");

  m.def(
      "rank_order",
      [](const std::vector<uint64_t>& samples_per_file, const OrderSpec& spec) {
        std::vector<uint64_t> ids;
        {
          py::gil_scoped_release nogil;
          ids = unwrap(rank_order(FileLayout::from_sizes(samples_per_file), spec));
        }
        return py::array_t<uint64_t>(ids.size(), ids.data());
      },
      py::arg("samples_per_file"), py::arg("spec"),
      "All ids one rank reads in spec.epoch, for files of the given sizes.");
}

}  // namespace dlfeed::python
