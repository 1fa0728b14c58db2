#pragma once
// A Cartesian process grid, as MPI's MPI_Dims_create / MPI_Cart_create / MPI_Cart_shift
// define it, and the neighbours of each rank in it: the ground a neighbourhood exchange
// stands on (docs/halo.md). Pure logic: no torch, no UCX.
//
// Ranks are laid out in row-major order (the last dimension varies fastest). A rank's
// neighbours are the cells at offsets in {-1, 0, 1}^n other than 0: the 2n faces alone, or
// all 3^n - 1 with the edges and corners ("diagonals"). In a periodic dimension offsets
// wrap; at the edge of a non-periodic one there is no neighbour.
//
// Every direction has a number, the same on all ranks, and a message always carries the
// number of the direction it travels in. A receive for the ghost cells on side d takes the
// message its neighbour there sent in direction -d. That keeps the two directions of a
// dimension apart when both lead to the same rank (periodic size 2) or to the rank itself
// (periodic size 1), the case neighbourhood collectives have swapped (open-mpi PR #14416).
#include <cstdint>
#include <vector>

namespace commux::halo {

/// A balanced grid of `ranks` cells in `dims.size()` dimensions, as MPI_Dims_create: the
/// entries of `dims` that are not 0 are kept, the 0 entries are filled with factors of what
/// remains, as close to each other as they can be, in non-increasing order. Throws
/// InvalidArgument when ranks < 1, dims is empty, an entry is negative, or the kept entries'
/// product does not divide `ranks`.
std::vector<int> dimsCreate(int ranks, std::vector<int> dims);

/// No rank: the edge of a non-periodic dimension.
constexpr int kNoRank = -1;

struct Neighbour {
  /// -1, 0 or 1 per dimension; never all 0.
  std::vector<int> offset;
  /// The rank at `offset`, or kNoRank.
  int rank = kNoRank;
  /// The number of the direction `offset` (what this rank's message to `rank` carries).
  int direction = 0;
  /// The number of -offset: what the message this rank receives from `rank` carries.
  int opposite = 0;
};

class CartTopology {
 public:
  /// Throws InvalidArgument when dims is empty, an entry is < 1, `periodic` has another
  /// length, or the grid holds more ranks than an int.
  CartTopology(std::vector<int> dims, std::vector<bool> periodic, bool diagonals);

  int size() const noexcept { return size_; }
  int dimensions() const noexcept { return static_cast<int>(dims_.size()); }
  const std::vector<int>& dims() const noexcept { return dims_; }
  const std::vector<bool>& periodic() const noexcept { return periodic_; }
  bool diagonals() const noexcept { return diagonals_; }

  /// The grid coordinates of `rank` (InvalidArgument outside [0, size)).
  std::vector<int> coords(int rank) const;
  /// The rank at `coords`, wrapped in periodic dimensions; kNoRank past a non-periodic
  /// edge. InvalidArgument for a wrong number of coordinates.
  int rankAt(const std::vector<int>& coords) const;
  /// MPI_Cart_shift: (source, destination) of a shift by `displacement` along `dimension`.
  std::pair<int, int> shift(int rank, int dimension, int displacement) const;

  /// The offsets a neighbourhood has, in direction order: without diagonals, for each
  /// dimension its negative then its positive face (MPI's order); with them, every offset
  /// in {-1, 0, 1}^n but 0, the first dimension varying slowest.
  const std::vector<std::vector<int>>& directions() const noexcept { return directions_; }
  /// The number of `offset` among directions() (InvalidArgument if it is none).
  int directionOf(const std::vector<int>& offset) const;
  /// Every direction of `rank`, in direction order, with kNoRank at non-periodic edges.
  std::vector<Neighbour> neighbours(int rank) const;

 private:
  std::vector<int> dims_;
  std::vector<bool> periodic_;
  bool diagonals_;
  int size_ = 1;
  std::vector<std::vector<int>> directions_;
};

}  // namespace commux::halo
