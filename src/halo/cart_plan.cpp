#include "halo/cart_plan.hpp"

#include <algorithm>
#include <map>

#include "core/error.hpp"
#include "halo/face_runs.hpp"

namespace commux::halo {

void appendPieces(const Field& field, const Box& box, const std::vector<std::int64_t>& strides,
                  std::vector<Piece>& out) {
  char* base = static_cast<char*>(field.data);
  const auto size = static_cast<std::int64_t>(field.elementSize);
  for (const auto& run : contiguousRuns(box, strides)) {
    std::int64_t at = 0;
    std::int64_t bytes = 0;
    COMMUX_CHECK(!__builtin_mul_overflow(run.offset, size, &at) &&
                     !__builtin_mul_overflow(run.length, size, &bytes),
                 InvalidArgument, "commux: halo: a face of a field lies past what 64-bit byte "
                 "offsets reach (elements of ", size, " bytes)");
    out.push_back({base + at, static_cast<std::size_t>(bytes)});
  }
}

std::vector<NeighbourMessages> cartMessages(const CartTopology& grid, int rank,
                                            const std::vector<std::int64_t>& shape,
                                            const std::vector<std::int64_t>& widths,
                                            const std::vector<Field>& fields) {
  const auto n = static_cast<std::size_t>(grid.dimensions());
  COMMUX_CHECK(shape.size() >= n, InvalidArgument, "commux: halo: the fields have ",
               shape.size(), " dimensions, fewer than the grid's ", n);
  COMMUX_CHECK(widths.size() == n, InvalidArgument, "commux: halo: ", widths.size(),
               " widths for a grid of ", n, " dimensions");
  COMMUX_CHECK(!fields.empty(), InvalidArgument, "commux: halo: no fields");
  for (std::size_t i = 0; i < fields.size(); ++i) {
    COMMUX_CHECK(fields[i].data != nullptr && fields[i].elementSize > 0 &&
                     fields[i].elementSize <= 16,
                 InvalidArgument, "commux: halo: field ", i,
                 " has no memory or no element size (1 to 16 bytes)");
  }
  // Sizes a caller's memory could hold: no product of them (strides, byte offsets) wraps.
  // An extent of 0 counts as 1 here: it empties the field, but the strides are still
  // products of the other extents, which must not wrap either.
  std::int64_t cells = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    COMMUX_CHECK(shape[d] >= 0, InvalidArgument, "commux: halo: dimension ", d, " of the fields is ",
                 shape[d]);
    std::int64_t bytes = 0;
    COMMUX_CHECK(!__builtin_mul_overflow(cells, std::max<std::int64_t>(shape[d], 1), &cells) &&
                     !__builtin_mul_overflow(cells, static_cast<std::int64_t>(16), &bytes),
                 InvalidArgument, "commux: halo: the fields' shape holds more cells than "
                 "memory (at its dimension ", d, " of ", shape[d], ")");
  }
  for (std::size_t d = 0; d < n; ++d) {
    COMMUX_CHECK(widths[d] >= 0 && widths[d] <= shape[d], InvalidArgument, "commux: halo: width ",
                 widths[d], " in dimension ", d, " of a field ", shape[d], " cells wide");
  }
  std::vector<std::int64_t> gridShape(shape.begin(), shape.begin() + static_cast<long>(n));
  checkHalo(gridShape, widths);
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];

  std::vector<Neighbour> live;
  for (auto& nb : grid.neighbours(rank)) {
    bool carries = nb.rank != kNoRank;
    for (std::size_t d = 0; d < n && carries; ++d) carries = nb.offset[d] == 0 || widths[d] != 0;
    if (carries) live.push_back(std::move(nb));
  }
  std::map<int, NeighbourMessages> byRank;
  const auto faces = [&](const Neighbour& nb, bool ghost, std::vector<Piece>& out) {
    const Box box = faceBox(shape, widths, nb.offset, ghost);
    for (const auto& f : fields) appendPieces(f, box, strides, out);
  };
  std::sort(live.begin(), live.end(),
            [](const Neighbour& a, const Neighbour& b) { return a.direction < b.direction; });
  for (const auto& nb : live) {
    auto& m = byRank[nb.rank];
    m.rank = nb.rank;
    m.sends = m.receives = true;
    faces(nb, false, m.send);
  }
  std::sort(live.begin(), live.end(),
            [](const Neighbour& a, const Neighbour& b) { return a.opposite < b.opposite; });
  for (const auto& nb : live) faces(nb, true, byRank[nb.rank].recv);
  std::vector<NeighbourMessages> out;
  for (auto& [r, m] : byRank) out.push_back(std::move(m));
  return out;
}

}  // namespace commux::halo
