// SPDX-License-Identifier: Apache-2.0
// Order: the strategies, a rank's order, and the resume state's fields
// (OrderSpec is bound with the other option structs, bind_options.cpp).
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
        std::vector<uint64_t> ids =
            unwrap(without_gil_call([&] { return rank_order(FileLayout::from_sizes(samples_per_file), spec); }));
        return py::array_t<uint64_t>(ids.size(), ids.data());
      },
      py::arg("samples_per_file"), py::arg("spec"),
      "All ids one rank reads in spec.epoch, for files of the given sizes.");
}

}  // namespace dlfeed::python
