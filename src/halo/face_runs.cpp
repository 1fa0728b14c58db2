#include "halo/face_runs.hpp"

#include "core/error.hpp"

namespace commux::halo {

std::int64_t Box::cells() const {
  std::int64_t n = 1;
  for (std::int64_t e : extent) n *= e;
  return n;
}

void checkHalo(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& widths) {
  COMMUX_CHECK(widths.size() <= shape.size(), InvalidArgument, "commux: ", widths.size(),
               " halo widths for a field of ", shape.size(), " dimensions");
  for (std::size_t d = 0; d < widths.size(); ++d) {
    const std::int64_t w = widths[d];
    COMMUX_CHECK(w >= 0, InvalidArgument, "commux: halo width ", w, " in dimension ", d);
    COMMUX_CHECK(w == 0 || shape[d] - 2 * w >= w, InvalidArgument, "commux: dimension ", d,
                 " holds ", shape[d], " cells, of which ", shape[d] - 2 * w,
                 " interior, narrower than the halo (", w, "): a face would send ghost cells");
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
  if (box.cells() == 0) return runs;
  std::int64_t base = 0;
  for (std::size_t d = 0; d < n; ++d) {
    COMMUX_CHECK(strides[d] >= 0 && box.start[d] >= 0 && box.extent[d] >= 0, InvalidArgument,
                 "commux: dimension ", d, " of a box has a negative start, extent or stride");
    base += box.start[d] * strides[d];
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
