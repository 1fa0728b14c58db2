// The Cartesian process grid of halo/cart_topology.hpp: MPI_Dims_create's balanced grids,
// coordinates, shifts, and neighbours whose directions pair up on every grid, the periodic
// dimensions of size 1 and 2 among them.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <tuple>

#include "core/error.hpp"
#include "halo/cart_topology.hpp"
#include "test_seed.hpp"

using commux::halo::CartTopology;
using commux::halo::dimsCreate;
using commux::halo::kNoRank;

TEST(DimsCreate, BalancedGridsAsMpiMakesThem) {
  EXPECT_EQ(dimsCreate(6, {0, 0}), (std::vector<int>{3, 2}));
  EXPECT_EQ(dimsCreate(7, {0, 0}), (std::vector<int>{7, 1}));
  EXPECT_EQ(dimsCreate(16, {0, 0}), (std::vector<int>{4, 4}));
  EXPECT_EQ(dimsCreate(24, {0, 0}), (std::vector<int>{6, 4}));
  EXPECT_EQ(dimsCreate(12, {0, 0, 0}), (std::vector<int>{3, 2, 2}));
  EXPECT_EQ(dimsCreate(8, {0, 0, 0}), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(dimsCreate(1, {0, 0, 0}), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(dimsCreate(6, {0, 3}), (std::vector<int>{2, 3}));
  EXPECT_EQ(dimsCreate(12, {0, 3, 0}), (std::vector<int>{2, 3, 2}));
  EXPECT_EQ(dimsCreate(4, {2, 2}), (std::vector<int>{2, 2}));
  EXPECT_EQ(dimsCreate(5, {0}), (std::vector<int>{5}));
}

TEST(DimsCreate, RefusesWhatCannotBeAGrid) {
  EXPECT_THROW(dimsCreate(0, {0}), commux::core::Error);
  EXPECT_THROW(dimsCreate(4, {}), commux::core::Error);
  EXPECT_THROW(dimsCreate(4, {-1, 0}), commux::core::Error);
  EXPECT_THROW(dimsCreate(6, {4, 0}), commux::core::Error);
  EXPECT_THROW(dimsCreate(6, {2, 2}), commux::core::Error);
  EXPECT_THROW(dimsCreate(4, {2, 1}), commux::core::Error);
}

TEST(CartTopology, CoordinatesShiftsAndEdges) {
  const CartTopology t({3, 4}, {false, true}, false);
  EXPECT_EQ(t.size(), 12);
  EXPECT_EQ(t.coords(7), (std::vector<int>{1, 3}));  // row-major: 7 = 1 * 4 + 3
  EXPECT_EQ(t.rankAt({1, 3}), 7);
  EXPECT_EQ(t.rankAt({1, 4}), 4);         // periodic: wraps to column 0
  EXPECT_EQ(t.rankAt({3, 0}), kNoRank);   // past a non-periodic edge
  EXPECT_EQ(t.shift(7, 1, 1), std::make_pair(6, 4));
  EXPECT_EQ(t.shift(1, 0, 1), std::make_pair(kNoRank, 5));
  EXPECT_EQ(t.directions().size(), 4u);
  const auto n = t.neighbours(0);
  // MPI's order: dimension 0 negative, positive, then dimension 1.
  EXPECT_EQ(n[0].rank, kNoRank);
  EXPECT_EQ(n[1].rank, 4);
  EXPECT_EQ(n[2].rank, 3);
  EXPECT_EQ(n[3].rank, 1);
  EXPECT_EQ(n[0].opposite, 1);
  EXPECT_EQ(n[3].opposite, 2);
  EXPECT_EQ(CartTopology({3, 3, 3}, {true, true, true}, true).directions().size(), 26u);
  EXPECT_THROW(t.coords(12), commux::core::Error);
  EXPECT_THROW(t.rankAt({1}), commux::core::Error);
  EXPECT_THROW(CartTopology({2, 0}, {false, false}, false), commux::core::Error);
  EXPECT_THROW(CartTopology({2, 2}, {false}, false), commux::core::Error);
}

TEST(CartTopology, PeriodicSizesOneAndTwoKeepTheirDirectionsApart) {
  // Size 1: the rank is both of its neighbours; size 2: one rank is both. The two
  // directions still carry different numbers, and each receive names the direction its
  // sender sent in.
  const CartTopology one({1}, {true}, false);
  const auto self = one.neighbours(0);
  ASSERT_EQ(self.size(), 2u);
  EXPECT_EQ(self[0].rank, 0);
  EXPECT_EQ(self[1].rank, 0);
  EXPECT_NE(self[0].direction, self[1].direction);
  EXPECT_EQ(self[0].opposite, self[1].direction);
  const CartTopology two({2}, {true}, false);
  const auto pair = two.neighbours(0);
  EXPECT_EQ(pair[0].rank, 1);
  EXPECT_EQ(pair[1].rank, 1);
  EXPECT_EQ(pair[0].opposite, 1);  // what arrives from the negative side went positive
  EXPECT_EQ(pair[1].opposite, 0);
}

TEST(CartTopology, EveryMessageHasExactlyOneReceiveOnRandomGrids) {
  const unsigned seed = commux::testing::testSeed();
  std::mt19937 rng(seed);
  for (int round = 0; round < 300; ++round) {
    const int n = 1 + static_cast<int>(rng() % 3);
    std::vector<int> dims(n);
    std::vector<bool> periodic(n);
    for (int d = 0; d < n; ++d) {
      dims[d] = 1 + static_cast<int>(rng() % 4);
      periodic[d] = rng() % 2 == 0;
    }
    const bool diagonals = rng() % 2 == 0;
    SCOPED_TRACE("seed " + std::to_string(seed) + " round " + std::to_string(round));
    const CartTopology t(dims, periodic, diagonals);
    // (sender, receiver, direction) of every message sent, and of every receive posted.
    std::multiset<std::tuple<int, int, int>> sent, expected;
    for (int r = 0; r < t.size(); ++r) {
      for (const auto& nb : t.neighbours(r)) {
        ASSERT_EQ(t.directions()[nb.direction], nb.offset);
        if (nb.rank == kNoRank) {
          // Only past a non-periodic edge.
          const auto c = t.coords(r);
          bool edge = false;
          for (int d = 0; d < n; ++d) {
            const int x = c[d] + nb.offset[d];
            edge = edge || (!periodic[d] && (x < 0 || x >= dims[d]));
          }
          EXPECT_TRUE(edge);
          continue;
        }
        sent.insert({r, nb.rank, nb.direction});
        expected.insert({nb.rank, r, nb.opposite});
        // The sender's opposite direction leads back here.
        std::vector<int> back = nb.offset;
        for (int& o : back) o = -o;
        EXPECT_EQ(t.directions()[nb.opposite], back);
      }
    }
    EXPECT_EQ(sent, expected);
  }
}
