// halo/face_runs.hpp: the boxes of faces and ghost cells, and a box as runs of contiguous
// elements, against every cell enumerated on seeded shapes and strides.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "core/error.hpp"
#include "halo/face_runs.hpp"
#include "test_seed.hpp"

using namespace commux::halo;

TEST(FaceBox, FacesAndGhostCellsOfATwoDimensionalField) {
  // 6 x 8 cells with 1 ghost row and 2 ghost columns on each side: interior 4 x 4.
  const std::vector<std::int64_t> shape{6, 8}, widths{1, 2};
  const Box up = faceBox(shape, widths, {-1, 0}, false);
  EXPECT_EQ(up.start, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(up.extent, (std::vector<std::int64_t>{1, 4}));
  const Box upGhost = faceBox(shape, widths, {-1, 0}, true);
  EXPECT_EQ(upGhost.start, (std::vector<std::int64_t>{0, 2}));
  const Box right = faceBox(shape, widths, {0, 1}, false);
  EXPECT_EQ(right.start, (std::vector<std::int64_t>{1, 4}));
  EXPECT_EQ(right.extent, (std::vector<std::int64_t>{4, 2}));
  const Box corner = faceBox(shape, widths, {1, 1}, true);
  EXPECT_EQ(corner.start, (std::vector<std::int64_t>{5, 6}));
  EXPECT_EQ(corner.extent, (std::vector<std::int64_t>{1, 2}));
  // A trailing dimension that is not split stays whole.
  const Box withComponents = faceBox({6, 8, 3}, widths, {-1, 0}, false);
  EXPECT_EQ(withComponents.extent, (std::vector<std::int64_t>{1, 4, 3}));
}

TEST(FaceBox, RefusesAHaloWiderThanTheInterior) {
  EXPECT_NO_THROW(checkHalo({6}, {2}));                     // interior 2 = width
  EXPECT_THROW(checkHalo({5}, {2}), commux::core::Error);   // interior 1 < width
  EXPECT_THROW(checkHalo({5}, {-1}), commux::core::Error);
  EXPECT_THROW(checkHalo({5}, {1, 1}), commux::core::Error);
  EXPECT_THROW(faceBox({6, 6}, {1, 1}, {2, 0}, false), commux::core::Error);
  EXPECT_THROW(faceBox({6, 6}, {1, 1}, {1}, false), commux::core::Error);
}

TEST(ContiguousRuns, AWholeContiguousFieldIsOneRunAndARowFaceOnePerRow) {
  const std::vector<std::int64_t> strides{8, 1};  // 6 x 8, row-major
  EXPECT_EQ(contiguousRuns({{0, 0}, {6, 8}}, strides), (std::vector<ElementRun>{{0, 48}}));
  EXPECT_EQ(contiguousRuns({{1, 0}, {2, 8}}, strides), (std::vector<ElementRun>{{8, 16}}));
  EXPECT_EQ(contiguousRuns({{1, 2}, {2, 4}}, strides), (std::vector<ElementRun>{{10, 4}, {18, 4}}));
  // A column: one element per row.
  EXPECT_EQ(contiguousRuns({{0, 3}, {3, 1}}, strides), (std::vector<ElementRun>{{3, 1}, {11, 1}, {19, 1}}));
  EXPECT_TRUE(contiguousRuns({{0, 0}, {0, 8}}, strides).empty());
}

TEST(ContiguousRuns, MatchEveryCellOnRandomShapesAndStrides) {
  const unsigned seed = commux::testing::testSeed();
  std::mt19937 rng(seed);
  for (int round = 0; round < 500; ++round) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " round " + std::to_string(round));
    const int n = 1 + static_cast<int>(rng() % 4);
    std::vector<std::int64_t> shape(n);
    for (auto& s : shape) s = 1 + static_cast<std::int64_t>(rng() % 6);
    // Row-major strides, sometimes permuted (a transposed view) or padded.
    std::vector<std::int64_t> strides(n);
    std::int64_t step = 1 + static_cast<std::int64_t>(rng() % 2);
    std::vector<int> order(n);
    for (int d = 0; d < n; ++d) order[d] = n - 1 - d;
    if (rng() % 3 == 0) std::shuffle(order.begin(), order.end(), rng);
    for (int d : order) {
      strides[d] = step;
      step *= shape[d] + static_cast<std::int64_t>(rng() % 2);
    }
    Box box;
    for (int d = 0; d < n; ++d) {
      box.start.push_back(static_cast<std::int64_t>(rng() % shape[d]));
      box.extent.push_back(static_cast<std::int64_t>(rng() % (shape[d] - box.start[d] + 1)));
    }
    // Every cell's element, in row-major order of the box, enumerated recursively.
    std::vector<std::int64_t> cells;
    std::function<void(int, std::int64_t)> walk = [&](int d, std::int64_t at) {
      if (d == n) {
        cells.push_back(at);
        return;
      }
      for (std::int64_t i = 0; i < box.extent[d]; ++i) walk(d + 1, at + (box.start[d] + i) * strides[d]);
    };
    walk(0, 0);
    const std::vector<ElementRun> runs = contiguousRuns(box, strides);
    std::vector<std::int64_t> expanded;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      ASSERT_GT(runs[i].length, 0);
      for (std::int64_t k = 0; k < runs[i].length; ++k) expanded.push_back(runs[i].offset + k);
      // Maximal: a run never continues where the previous one ended.
      if (i > 0) EXPECT_NE(runs[i - 1].offset + runs[i - 1].length, runs[i].offset);
    }
    EXPECT_EQ(expanded, cells);
  }
}
