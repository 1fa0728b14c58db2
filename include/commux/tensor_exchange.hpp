#pragma once
// A persistent neighbourhood exchange of CPU tensors on a commux process group: built once
// (neighbours, the tensors' memory as pieces, staging), then start() and wait() each step,
// one message per neighbour rank and step (the core's halo/neighbour_exchange underneath:
// faces sent as they lie, as a UCX iov, or packed where they are many short pieces).
// commux.halo in Python runs on it; C++ codes on torch use it directly.
#include <ATen/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "commux/process_group_ucx.hpp"

namespace c10d {
class Work;
}

namespace commux {
namespace halo {
class NeighbourExchange;
}

class TensorExchange {
 public:
  /// What this rank swaps with group rank `rank` every step: `send` (views of any strides,
  /// in order) go to it as one message, the one it sends fills `recv`; either may be absent
  /// (a one-way edge) but not both. A rank may be its own neighbour (a copy).
  struct Neighbour {
    int rank = -1;
    std::optional<std::vector<at::Tensor>> send;
    std::optional<std::vector<at::Tensor>> recv;
    /// Pack this neighbour's messages when their pieces average fewer bytes (default: the
    /// exchange's): a neighbour on another host gains from a higher one (docs/halo.md).
    std::optional<std::size_t> packBelow;
  };

  /// Along a graph. CPU tensors, each neighbour rank once; ValueError-kind errors (c10's)
  /// before anything moves. `tag`: the group's user tag the exchange's messages carry.
  /// `packBelow`: pack a message whose pieces average fewer bytes (default: measured).
  TensorExchange(c10::intrusive_ptr<ProcessGroupUCX> pg, const std::vector<Neighbour>& neighbours,
                 int tag, std::optional<std::size_t> packBelow = std::nullopt);
  /// The ghost cells of `fields` (contiguous CPU tensors of one shape, the grid's
  /// dimensions first) on a Cartesian grid of `dims` ranks (row-major, as MPI_Cart_create),
  /// `widths` ghost cells on both sides of each grid dimension. The face sent towards side
  /// d fills the neighbour's ghost cells on side -d, also where one rank is both neighbours
  /// (periodic size 2) or this rank itself (size 1). Collective: every rank passes the same
  /// grid, widths, dtypes and tag, and shapes that agree on their shared faces; the ranks
  /// check that together (two allgathers) and all raise the same error when they do not.
  static TensorExchange halo(c10::intrusive_ptr<ProcessGroupUCX> pg, std::vector<int> dims,
                             std::vector<bool> periodic, bool diagonals,
                             std::vector<at::Tensor> fields, std::vector<std::int64_t> widths,
                             int tag);
  ~TensorExchange();
  TensorExchange(TensorExchange&&) noexcept;
  /// The old exchange goes (with the last Work of its steps; a step of it still in flight
  /// is aborted then).
  TensorExchange& operator=(TensorExchange&&) noexcept;
  TensorExchange(const TensorExchange&) = delete;
  TensorExchange& operator=(const TensorExchange&) = delete;

  /// Posts the step's receives and sends.
  void start();
  /// Partitioned: posts the step's receives only; then ready(rank) sends the message to a
  /// neighbour as soon as its faces hold this step's values, and wait() sends the rest.
  void startReceives();
  void ready(int rank);
  /// Waits for the step, writes what came packed and this rank's own message; raises the
  /// step's first error. After one, every rank builds a new exchange with another tag: a
  /// late message of the failed step would match the next step's receive.
  void wait();
  void exchange() {
    start();
    wait();
  }
  /// The step in flight as a c10d Work (once per step, any time before its wait()): its
  /// future completes, with the tensors received, once every message of the step has been
  /// sent (each ready(), or wait()) and has ended, on whichever thread ends it, with
  /// nobody calling wait(). Work::wait() is wait(). Only wait() times a step out. The Work
  /// keeps the exchange's tensors alive. Without it a step ends in wait(), on the caller's
  /// thread (the fast path).
  c10::intrusive_ptr<c10d::Work> stepWork();
  /// start() (startReceives(), `partitioned`), then stepWork().
  c10::intrusive_ptr<c10d::Work> startWork(bool partitioned = false);
  bool inFlight() const;
  /// (send packed, receive packed) per neighbour, in the order given (rank order for halo()).
  std::vector<std::pair<bool, bool>> packing() const;
  /// (send shared, receive shared) per neighbour, as packing(): messages that go through
  /// shared memory (neighbours on this host, from the second step on), not UCX.
  std::vector<std::pair<bool, bool>> sharing() const;

 private:
  /// What a step's Work shares with the exchange.
  struct State;
  class StepWork;

  explicit TensorExchange(std::shared_ptr<State> state);
  halo::NeighbourExchange& live() const;  // raises for a moved-from object

  std::shared_ptr<State> state_;
};

}  // namespace commux
