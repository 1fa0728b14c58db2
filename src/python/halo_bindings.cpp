// commux._C's neighbourhood-exchange part: the Cartesian grid and the face boxes come from
// the core so that Python and C++ agree on every neighbour and direction number; the
// exchange itself is the core's (halo/neighbour_exchange.hpp) over tensor views, one call per
// step with the GIL released.
#include "python/halo_bindings.hpp"

#include <ATen/MemoryOverlap.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "commux/process_group_ucx.hpp"
#include "core/error.hpp"
#include "halo/cart_topology.hpp"
#include "halo/face_runs.hpp"
#include "halo/neighbour_exchange.hpp"

namespace py = pybind11;

namespace {

using Views = std::optional<std::vector<at::Tensor>>;

// A view's elements as contiguous pieces of its memory, in row-major order of the view.
void appendPieces(const at::Tensor& t, bool receive, int rank,
                  std::vector<commux::halo::Piece>& out) {
  COMMUX_CHECK(t.device().is_cpu(), InvalidArgument,
               "commux.halo: the exchange's tensors must be CPU tensors; one for rank ", rank,
               " is on ", t.device().str());
  COMMUX_CHECK(!t.is_sparse() && t.layout() == c10::kStrided, InvalidArgument,
               "commux.halo: the exchange takes dense tensors");
  COMMUX_CHECK(!receive || at::has_internal_overlap(t) != at::MemOverlap::Yes, InvalidArgument,
               "commux.halo: a tensor received from rank ", rank,
               " has elements that share memory (a zero stride): it cannot be written");
  const auto esize = static_cast<std::size_t>(t.element_size());
  char* base = static_cast<char*>(t.data_ptr());
  if (t.numel() == 0) return;
  if (t.dim() == 0) {
    out.push_back({base, esize});
    return;
  }
  commux::halo::Box box{std::vector<std::int64_t>(static_cast<std::size_t>(t.dim()), 0),
                        t.sizes().vec()};
  for (const auto& run : commux::halo::contiguousRuns(box, t.strides().vec())) {
    out.push_back({base + run.offset * static_cast<std::int64_t>(esize),
                   static_cast<std::size_t>(run.length) * esize});
  }
}

// The core's exchange, holding the process group and the tensors it reads and writes.
class TensorNeighbourExchange {
 public:
  TensorNeighbourExchange(c10::intrusive_ptr<commux::ProcessGroupUCX> pg,
                          const std::vector<std::tuple<int, Views, Views>>& neighbours, int tag,
                          std::size_t packBelow)
      : pg_(std::move(pg)) {
    std::vector<commux::halo::NeighbourMessages> plan;
    for (const auto& [rank, sends, recvs] : neighbours) {
      commux::halo::NeighbourMessages n;
      n.rank = rank;
      n.sends = sends.has_value();
      n.receives = recvs.has_value();
      if (sends) {
        for (const auto& t : *sends) {
          appendPieces(t, false, rank, n.send);
          keep_.push_back(t);
        }
      }
      if (recvs) {
        for (const auto& t : *recvs) {
          appendPieces(t, true, rank, n.recv);
          keep_.push_back(t);
        }
      }
      plan.push_back(std::move(n));
    }
    exchange_ = std::make_unique<commux::halo::NeighbourExchange>(
        pg_->coreGroup(), std::move(plan), tag, pg_->timeout(), packBelow);
  }

  void start() { exchange_->start(); }
  void wait() { exchange_->wait(); }
  bool inFlight() const { return exchange_->inFlight(); }
  std::vector<std::pair<bool, bool>> packing() const {
    std::vector<std::pair<bool, bool>> out;
    for (std::size_t i = 0; i < exchange_->neighbours(); ++i) {
      out.emplace_back(exchange_->sendPacked(i), exchange_->recvPacked(i));
    }
    return out;
  }

 private:
  c10::intrusive_ptr<commux::ProcessGroupUCX> pg_;
  std::vector<at::Tensor> keep_;
  std::unique_ptr<commux::halo::NeighbourExchange> exchange_;  // after what it uses
};

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
            out.push_back(py::make_tuple(py::tuple(py::cast(n.offset)), n.rank, n.direction,
                                         n.opposite));
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
  py::class_<TensorNeighbourExchange>(m, "NeighbourExchange")
      .def(py::init<c10::intrusive_ptr<commux::ProcessGroupUCX>,
                    const std::vector<std::tuple<int, Views, Views>>&, int, std::size_t>(),
           py::arg("backend"), py::arg("neighbours"), py::arg("tag"),
           py::arg("pack_below") = commux::halo::kDefaultPackBelow,
           "The core's persistent exchange (halo/neighbour_exchange.hpp) on a commux backend: "
           "`neighbours` lists (group rank, tensors sent to it or None, tensors received "
           "from it or None), each rank once; any strides; CPU tensors")
      .def("start", &TensorNeighbourExchange::start, py::call_guard<py::gil_scoped_release>(),
           "Posts the step's receives and sends")
      .def("wait", &TensorNeighbourExchange::wait, py::call_guard<py::gil_scoped_release>(),
           "Waits for the step, writes what came packed and this rank's own message; raises the "
           "step's first error")
      .def_property_readonly("in_flight", &TensorNeighbourExchange::inFlight)
      .def("packing", &TensorNeighbourExchange::packing,
           "(send packed, receive packed) per neighbour, in the order given");
}
