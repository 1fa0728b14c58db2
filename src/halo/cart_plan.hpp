#pragma once
// The messages of a halo exchange on a Cartesian grid, for fields kept as dense row-major
// arrays with their ghost cells inside: to each neighbour rank, the faces of every
// direction that leads to it (in direction order, each field in turn); from it, the ghost
// cells of every direction it lies in, in the order of the directions its messages travel
// (the opposites). Item i of a message so lands where it belongs even when one rank is the
// neighbour on both sides (periodic size 2) or this rank itself (size 1). The same plan as
// commux.halo.HaloExchange's. Pure logic: no UCX.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "halo/cart_topology.hpp"
#include "halo/face_runs.hpp"
#include "halo/messages.hpp"

namespace commux::halo {

/// A field: `data` holds the dense row-major array of the plan's shape, elements of
/// `elementSize` bytes.
struct Field {
  void* data = nullptr;
  std::size_t elementSize = 0;
};

/// The cells of `box` in `field`, whose strides (in elements) are `strides`, as contiguous
/// pieces of its memory in row-major order of the box (halo/face_runs's runs, in bytes).
void appendPieces(const Field& field, const Box& box, const std::vector<std::int64_t>& strides,
                  std::vector<Piece>& out);

/// The plan of `rank` in `grid` for `fields` of `shape` (the grid's dimensions first, any
/// trailing ones whole) with `widths` ghost cells on both sides of each grid dimension.
/// Directions across a dimension of width 0, and past a non-periodic edge, carry nothing.
/// InvalidArgument for a bad halo (checkHalo), a shape with fewer dimensions than the grid,
/// widths of another length, no fields, or a field without memory or element size.
std::vector<NeighbourMessages> cartMessages(const CartTopology& grid, int rank,
                                            const std::vector<std::int64_t>& shape,
                                            const std::vector<std::int64_t>& widths,
                                            const std::vector<Field>& fields);

}  // namespace commux::halo
