// The ranks' agreement on a halo exchange (halo/cart_agreement.hpp): uneven decompositions
// agree, anything that would make a step's messages differ in size or never meet does
// not, and the message names the ranks and what differs.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "halo/cart_agreement.hpp"
#include "test_seed.hpp"

using commux::halo::CartDescription;
using commux::halo::CartTopology;

namespace {

std::string typeName(std::int64_t code) { return "t" + std::to_string(code); }

// Through both records and back, as the ranks see each other.
std::vector<CartDescription> swapped(const std::vector<CartDescription>& all, std::string& why) {
  std::vector<std::int64_t> headers;
  for (const auto& d : all) {
    auto h = commux::halo::cartHeader(&d);
    headers.insert(headers.end(), h.begin(), h.end());
  }
  why = commux::halo::headerDisagreement(headers, "test");
  if (!why.empty()) return {};
  std::vector<CartDescription> out;
  for (const auto& d : all) {
    const auto body = commux::halo::cartBody(d);
    EXPECT_EQ(body.size(), commux::halo::cartBodyWords(headers.data()));
    out.push_back(commux::halo::cartFromBody(body.data(), headers.data()));
  }
  return out;
}

std::string verdict(const std::vector<CartDescription>& all) {
  std::string why;
  const auto seen = swapped(all, why);
  if (!why.empty()) return why;
  return commux::halo::cartDisagreement(seen, "test", typeName);
}

// Rank r of a grid whose rows (dimension 0) hold rows[x] interior cells at coordinate x,
// every other dimension `cells` interior cells.
std::vector<CartDescription> uneven(const std::vector<int>& dims, std::vector<std::int64_t> rows,
                                    std::int64_t cells, std::vector<std::int64_t> widths) {
  const CartTopology grid(dims, std::vector<bool>(dims.size(), false), false);
  std::vector<CartDescription> all;
  for (int r = 0; r < grid.size(); ++r) {
    CartDescription d{dims, std::vector<bool>(dims.size(), false), false, 5, widths, {7}, {}};
    const auto c = grid.coords(r);
    for (std::size_t k = 0; k < dims.size(); ++k) {
      d.shape.push_back((k == 0 ? rows[static_cast<std::size_t>(c[0])] : cells) + 2 * widths[k]);
    }
    all.push_back(d);
  }
  return all;
}

}  // namespace

TEST(CartAgreement, UnevenDecompositionsAgree) {
  EXPECT_EQ(verdict(uneven({2, 2}, {5, 7}, 4, {1, 1})), "");
  EXPECT_EQ(verdict(uneven({3, 1}, {2, 9, 4}, 4, {2, 1})), "");
  EXPECT_EQ(verdict(uneven({1}, {3}, 0, {1})), "");
}

TEST(CartAgreement, ASharedFaceOfAnotherExtentIsRefusedNamingBothRanks) {
  auto all = uneven({2, 2}, {5, 7}, 4, {1, 1});
  all[1].shape[0] = 8;  // rank 1 sits beside rank 0 along dimension 1: their rows must agree
  EXPECT_EQ(verdict(all),
            "commux: test: the fields of rank 0 hold 7 cells in dimension 0, those of its "
            "neighbour at offset [0, 1] (rank 1) 8: the faces they share differ");
}

TEST(CartAgreement, NoFaceIsSharedAcrossADimensionOfWidthZero) {
  auto all = uneven({1, 2}, {5}, 4, {1, 0});
  all[1].shape[0] = 9;  // ranks 0 and 1 neighbour along dimension 1, which carries nothing
  EXPECT_EQ(verdict(all), "");
  all = uneven({1, 2}, {5}, 4, {1, 1});
  all[1].shape[0] = 9;  // with a width there, their faces along it must agree
  EXPECT_NE(verdict(all), "");
}

TEST(CartAgreement, TrailingDimensionsTravelWhole) {
  auto all = uneven({2}, {5, 6}, 0, {1});
  for (auto& d : all) d.shape.push_back(3);
  EXPECT_EQ(verdict(all), "");
  all[1].shape[1] = 4;
  EXPECT_NE(verdict(all).find("hold 3 cells in dimension 1, those of its neighbour at offset [1] "
                              "(rank 1) 4"),
            std::string::npos);
}

TEST(CartAgreement, WhatEveryRankMustShareIsComparedWithRankZeros) {
  const auto base = uneven({2, 2}, {5, 5}, 4, {1, 1});
  auto all = base;
  all[3].dims = {4, 1};
  EXPECT_EQ(verdict(all),
            "commux: test: rank 3 gives the grid [4, 1], rank 0 [2, 2]: every rank "
            "must build the same exchange");
  all = base;
  all[2].periodic = {true, false};
  EXPECT_NE(verdict(all).find("rank 2 gives periodic [1, 0], rank 0 [0, 0]"), std::string::npos);
  all = base;
  all[1].diagonals = true;
  EXPECT_NE(verdict(all).find("rank 1 gives diagonals, rank 0 none"), std::string::npos);
  all = base;
  all[1].tag = 6;
  EXPECT_NE(verdict(all).find("rank 1 gives tag 6, rank 0 5"), std::string::npos);
  all = base;
  all[2].widths = {1, 2};
  EXPECT_NE(verdict(all).find("rank 2 gives widths [1, 2], rank 0 [1, 1]"), std::string::npos);
  all = base;
  all[3].fieldTypes = {8};
  EXPECT_NE(verdict(all).find("rank 3 gives field 0 of t8, rank 0 t7"), std::string::npos);
}

TEST(CartAgreement, TheHeadersSayWhoRefusedItsArgumentsAndWhichLengthsDiffer) {
  auto all = uneven({2, 2}, {5, 5}, 4, {1, 1});
  std::vector<std::int64_t> headers;
  for (std::size_t r = 0; r < all.size(); ++r) {
    auto h = commux::halo::cartHeader(r == 2 ? nullptr : &all[r]);
    headers.insert(headers.end(), h.begin(), h.end());
  }
  EXPECT_EQ(commux::halo::headerDisagreement(headers, "test"),
            "commux: test: rank 2 refused its own arguments (its error says why), so no rank "
            "builds the exchange");
  all[1].fieldTypes = {7, 7};
  EXPECT_EQ(verdict(all),
            "commux: test: rank 1 gives 2 fields, rank 0 1 field: every rank must "
            "build the same exchange");
  all = uneven({2, 2}, {5, 5}, 4, {1, 1});
  all[3].shape.push_back(2);
  EXPECT_NE(verdict(all).find("rank 3 gives fields of 3 dimensions, rank 0 fields of 2"),
            std::string::npos);
}

// Random grids and uneven decompositions agree through the records; one rank changed in any
// one thing every rank must share is named.
TEST(CartAgreement, SeededGridsAgreeAndOneChangedRankIsNamed) {
  const unsigned seed = commux::testing::testSeed();
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int round = 0; round < 300; ++round) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " round " + std::to_string(round));
    const int n = pick(1, 3);
    std::vector<int> dims;
    std::vector<bool> periodic;
    std::vector<std::int64_t> widths;
    for (int d = 0; d < n; ++d) {
      dims.push_back(pick(1, 3));
      periodic.push_back(pick(0, 1) == 1);
      widths.push_back(pick(0, 2));
    }
    const bool diagonals = pick(0, 1) == 1;
    const int trailing = pick(0, 1);
    const CartTopology grid(dims, periodic, diagonals);
    // Interior extents per dimension and coordinate: every rank of a slab shares them.
    std::vector<std::vector<std::int64_t>> extent(static_cast<std::size_t>(n));
    for (int d = 0; d < n; ++d) {
      for (int c = 0; c < dims[static_cast<std::size_t>(d)]; ++c) {
        extent[static_cast<std::size_t>(d)].push_back(pick(2, 6));
      }
    }
    std::vector<CartDescription> all;
    for (int r = 0; r < grid.size(); ++r) {
      CartDescription d{dims, periodic, diagonals, 3, widths, {1, 2}, {}};
      const auto c = grid.coords(r);
      for (std::size_t k = 0; k < static_cast<std::size_t>(n); ++k) {
        d.shape.push_back(extent[k][static_cast<std::size_t>(c[k])] + 2 * widths[k]);
      }
      if (trailing) d.shape.push_back(4);
      all.push_back(d);
    }
    ASSERT_EQ(verdict(all), "");
    if (grid.size() < 2) continue;
    const int r = pick(1, grid.size() - 1);
    auto& d = all[static_cast<std::size_t>(r)];
    switch (pick(0, 3)) {
      case 0:
        d.tag += 1;
        break;
      case 1:
        d.widths[static_cast<std::size_t>(pick(0, n - 1))] += 1;
        break;
      case 2:
        d.fieldTypes[1] = 9;
        break;
      default:
        d.diagonals = !d.diagonals;
        break;
    }
    const std::string why = verdict(all);
    EXPECT_NE(why.find("rank " + std::to_string(r) + " gives"), std::string::npos) << why;
  }
}
