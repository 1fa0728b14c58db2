#pragma once
// What a neighbourhood exchange moves each step, as plain data: per neighbour rank, the
// pieces of memory that go to it as one message and the pieces its message fills. Built by
// a plan (halo/cart_plan.hpp for a Cartesian grid, the front ends for a graph) and run by
// the core's exchange (halo/neighbour_exchange.hpp).
#include <cstddef>
#include <vector>

namespace commux::halo {

/// A piece of a message: contiguous host memory the caller keeps alive.
struct Piece {
  void* data = nullptr;
  std::size_t bytes = 0;
};

/// What this rank swaps with one neighbour every step. `send` goes to it as one message,
/// `recv` is filled from the one it sends; either may be absent (a one-way edge of a
/// graph) but not both.
struct NeighbourMessages {
  int rank = -1;
  bool sends = false;
  bool receives = false;
  std::vector<Piece> send;
  std::vector<Piece> recv;
};

}  // namespace commux::halo
