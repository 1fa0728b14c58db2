#include "halo/face_runs.hpp"

#include "core/error.hpp"

namespace commux::halo {

std::int64_t Box::cells() const {
  // An empty box has no cells, however large its other extents (whose product may not fit).
  for (std::int64_t e : extent) {
    if (e == 0) return 0;
  }
  std::int64_t n = 1;
  for (std::int64_t e : extent) {
    COMMUX_CHECK(!__builtin_mul_overflow(n, e, &n), InvalidArgument,
                 "commux: a box of more cells than memory holds");
  }
  return n;
}

void checkHalo(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& widths) {
  COMMUX_CHECK(widths.size() <= shape.size(), InvalidArgument, "commux: ", widths.size(),
               " halo widths for a field of ", shape.size(), " dimensions");
  for (std::size_t d = 0; d < widths.size(); ++d) {
    const std::int64_t w = widths[d];
    COMMUX_CHECK(w >= 0, InvalidArgument, "commux: halo width ", w, " in dimension ", d);
    // shape - 2w >= w, without computing 2w or 3w: a caller's width may be near 2^63.
    if (w == 0 || (shape[d] >= 0 && w <= shape[d] / 3)) continue;
    std::int64_t interior = 0;
    const bool fits = !__builtin_sub_overflow(shape[d], w, &interior) &&
                      !__builtin_sub_overflow(interior, w, &interior);
    if (fits) {
      COMMUX_FAIL(InvalidArgument, "commux: dimension ", d, " holds ", shape[d],
                  " cells, of which ", interior, " interior, narrower than the halo (", w,
                  "): a face would send ghost cells");
    }
    COMMUX_FAIL(InvalidArgument, "commux: dimension ", d, " holds ", shape[d],
                " cells, narrower than the halo (", w, ") on both sides and an interior");
  }
}

Box faceBox(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& widths,
            const std::vector<int>& offset, bool ghost) {
  checkHalo(shape, widths);
  COMMUX_CHECK(offset.size() == widths.size(), InvalidArgument, "commux: an offset of ",
               offset.size(), " dimensions for ", widths.size(), " halo widths");
  Box box;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const std::int64_t n = shape[d];
    const std::int64_t w = d < widths.size() ? widths[d] : 0;
    const int o = d < offset.size() ? offset[d] : 0;
    COMMUX_CHECK(o >= -1 && o <= 1, InvalidArgument, "commux: offset ", o, " in dimension ", d,
                 " (-1, 0 or 1)");
    std::int64_t start = w;
    std::int64_t extent = n - 2 * w;
    if (o < 0) {
      start = ghost ? 0 : w;
      extent = w;
    } else if (o > 0) {
      start = ghost ? n - w : n - 2 * w;
      extent = w;
    }
    box.start.push_back(start);
    box.extent.push_back(extent);
  }
  return box;
}

std::vector<ElementRun> contiguousRuns(const Box& box, const std::vector<std::int64_t>& strides) {
  const std::size_t n = box.extent.size();
  COMMUX_CHECK(box.start.size() == n && strides.size() == n, InvalidArgument,
               "commux: a box of ", n, " dimensions with ", box.start.size(), " starts and ",
               strides.size(), " strides");
  std::vector<ElementRun> runs;
  for (std::size_t d = 0; d < n; ++d) {
    COMMUX_CHECK(strides[d] >= 0 && box.start[d] >= 0 && box.extent[d] >= 0, InvalidArgument,
                 "commux: dimension ", d, " of a box has a negative start, extent or stride");
  }
  if (box.cells() == 0) return runs;
  // The box's first cell and its last: every offset the walk below reaches lies between,
  // so once the last one fits in 64 bits no sum of the walk wraps.
  std::int64_t base = 0;
  std::int64_t last = 0;
  for (std::size_t d = 0; d < n; ++d) {
    std::int64_t at = 0;
    std::int64_t end = 0;  // the box's last index in dimension d (its extent is not 0)
    std::int64_t reach = 0;
    COMMUX_CHECK(!__builtin_mul_overflow(box.start[d], strides[d], &at) &&
                     !__builtin_add_overflow(base, at, &base) &&
                     !__builtin_add_overflow(box.start[d], box.extent[d] - 1, &end) &&
                     !__builtin_mul_overflow(end, strides[d], &reach) &&
                     !__builtin_add_overflow(last, reach, &last),
                 InvalidArgument, "commux: a box whose cells lie past what 64-bit offsets reach");
  }
  // Cells in row-major order of the box: an odometer over the dimensions, each cell one
  // element, merged into the previous run when it follows it in memory.
  std::vector<std::int64_t> index(n, 0);
  std::int64_t at = base;
  for (;;) {
    if (!runs.empty() && runs.back().offset + runs.back().length == at) {
      ++runs.back().length;
    } else {
      runs.push_back({at, 1});
    }
    std::size_t d = n;
    while (d > 0) {
      --d;
      if (++index[d] < box.extent[d]) {
        at += strides[d];
        break;
      }
      at -= (box.extent[d] - 1) * strides[d];
      index[d] = 0;
      if (d == 0) return runs;
    }
    if (n == 0) return runs;
  }
}

}  // namespace commux::halo
