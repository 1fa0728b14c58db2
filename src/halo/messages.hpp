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
  /// Pack this neighbour's messages when their pieces average fewer bytes; 0: the
  /// exchange's default. A front end that knows the neighbour is on another host raises it
  /// (over TCP an iov of 1 KiB pieces cost 1.35x the packed message, on one host 0.83x).
  std::size_t packBelow = 0;
};

}  // namespace commux::halo
