#pragma once
// Where a face of a field lies in memory: the box of cells a neighbourhood exchange sends
// towards a direction (or receives beyond it), and that box as runs of contiguous elements,
// which is what a UCX iov datatype or a direct copy into a neighbour's ghost cells takes
// (docs/halo.md, "Plan"). Pure logic: no torch, no UCX.
#include <cstdint>
#include <vector>

namespace commux::halo {

/// A box of cells: a start and an extent per dimension.
struct Box {
  std::vector<std::int64_t> start;
  std::vector<std::int64_t> extent;
  std::int64_t cells() const;
};

/// Throws InvalidArgument unless every width is >= 0 and, where it is not 0, the dimension
/// holds at least three widths (ghost cells on both sides and an interior as wide as the
/// halo, so that no face sends ghost cells). `widths` covers the leading dimensions of
/// `shape`; the others are not split.
void checkHalo(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& widths);

/// The face towards `offset` (-1, 0 or 1 per leading dimension) of a field of `shape` with
/// `widths` ghost cells on each side: the interior cells next to it (`ghost` false, what is
/// sent) or the ghost cells beyond it (true, what is received). Dimensions past `offset`
/// are whole.
Box faceBox(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& widths,
            const std::vector<int>& offset, bool ghost);

/// A run of `length` contiguous elements starting `offset` elements into the field.
struct ElementRun {
  std::int64_t offset;
  std::int64_t length;
  bool operator==(const ElementRun& o) const { return offset == o.offset && length == o.length; }
};

/// The cells of `box` in a field with `strides` (in elements, one per dimension, >= 0), in
/// row-major order of the box, as runs of contiguous elements: neighbouring cells that are
/// neighbours in memory too share a run. An empty box has no runs.
std::vector<ElementRun> contiguousRuns(const Box& box, const std::vector<std::int64_t>& strides);

}  // namespace commux::halo
