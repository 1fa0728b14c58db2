// commux._C's neighbourhood-exchange part: the Cartesian grid and the face boxes come from
// the core so that Python and C++ agree on every neighbour and direction number; the
// exchange itself is the core's (halo/neighbour_exchange.hpp) over tensor views, one call per
// step with the GIL released.
#include "python/halo_bindings.hpp"

#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "commux/process_group_ucx.hpp"
#include "commux/tensor_exchange.hpp"
#include "core/error.hpp"
#include "halo/cart_topology.hpp"
#include "halo/face_runs.hpp"

namespace py = pybind11;

namespace {

using Views = std::optional<std::vector<at::Tensor>>;

using Neighbour = std::tuple<int, Views, Views, std::optional<std::size_t>>;

commux::TensorExchange made(c10::intrusive_ptr<commux::ProcessGroupUCX> pg,
                            const std::vector<Neighbour>& neighbours, int tag,
                            std::optional<std::size_t> packBelow) {
  std::vector<commux::TensorExchange::Neighbour> list;
  for (const auto& [rank, sends, recvs, below] : neighbours) {
    list.push_back({rank, sends, recvs, below});
  }
  return commux::TensorExchange(std::move(pg), list, tag, packBelow);
}

}  // namespace

void bindHalo(py::module_& m) {
  // The Cartesian grid of a neighbourhood exchange (commux.halo): the core's, so that Python
  // and C++ agree on every neighbour and direction number.
  m.def(
      "dims_create",
      [](int ranks, std::vector<int> dims) {
        try {
          return commux::halo::dimsCreate(ranks, std::move(dims));
        } catch (const commux::core::Error& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("ranks"), py::arg("dims"), "MPI_Dims_create: a balanced grid (0 entries chosen)");
  m.def(
      "cart_neighbours",
      [](std::vector<int> dims, std::vector<bool> periodic, bool diagonals, int rank) {
        try {
          const commux::halo::CartTopology grid(std::move(dims), std::move(periodic), diagonals);
          std::vector<py::tuple> out;
          for (const auto& n : grid.neighbours(rank)) {
            out.push_back(
                py::make_tuple(py::tuple(py::cast(n.offset)), n.rank, n.direction, n.opposite));
          }
          return out;
        } catch (const commux::core::Error& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("dims"), py::arg("periodic"), py::arg("diagonals"), py::arg("rank"),
      "(offset, rank or -1, direction, opposite) of every direction of `rank`, in direction "
      "order (halo/cart_topology.hpp)");
  m.def(
      "face_box",
      [](std::vector<std::int64_t> shape, std::vector<std::int64_t> widths, std::vector<int> offset,
         bool ghost) {
        try {
          const commux::halo::Box box = commux::halo::faceBox(shape, widths, offset, ghost);
          return py::make_tuple(box.start, box.extent);
        } catch (const commux::core::Error& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("shape"), py::arg("widths"), py::arg("offset"), py::arg("ghost"),
      "(start, extent) of the face towards `offset`, or of the ghost cells beyond it "
      "(halo/face_runs.hpp); ValueError for a halo wider than the interior");
  py::class_<commux::TensorExchange>(m, "NeighbourExchange")
      .def(py::init(&made), py::arg("backend"), py::arg("neighbours"), py::arg("tag"),
           py::arg("pack_below") = std::nullopt,
           "The core's persistent exchange (halo/neighbour_exchange.hpp) on a commux backend: "
           "`neighbours` lists (group rank, tensors sent to it or None, tensors received "
           "from it or None, its pack_below or None), each rank once; any strides; CPU "
           "tensors")
      .def_static("halo", &commux::TensorExchange::halo, py::arg("backend"), py::arg("dims"),
                  py::arg("periodic"), py::arg("diagonals"), py::arg("fields"), py::arg("widths"),
                  py::arg("tag"), py::call_guard<py::gil_scoped_release>(),
                  "TensorExchange::halo: the ghost cells of contiguous `fields` on a Cartesian "
                  "grid; collective (the ranks agree on the exchange first)")
      .def("start", &commux::TensorExchange::start, py::call_guard<py::gil_scoped_release>(),
           "Posts the step's receives and sends")
      .def("wait", &commux::TensorExchange::wait, py::call_guard<py::gil_scoped_release>(),
           "Waits for the step, writes what came packed and this rank's own message; raises the "
           "step's first error")
      .def("step_work", &commux::TensorExchange::stepWork, py::call_guard<py::gil_scoped_release>(),
           "The step in flight as a c10d Work whose future completes where the step ends, "
           "with nobody calling wait() (once per step)")
      .def("start_receives", &commux::TensorExchange::startReceives,
           py::call_guard<py::gil_scoped_release>(),
           "Partitioned steps: posts the step's receives only")
      .def("ready", &commux::TensorExchange::ready, py::arg("rank"),
           py::call_guard<py::gil_scoped_release>(),
           "Sends the step's message to group rank `rank` now")
      .def_property_readonly("in_flight", &commux::TensorExchange::inFlight)
      .def("packing", &commux::TensorExchange::packing,
           "(send packed, receive packed) per neighbour, in the order given")
      .def("sharing", &commux::TensorExchange::sharing,
           "(send shared, receive shared) per neighbour, in the order given");
}
