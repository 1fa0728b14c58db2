#include <gtest/gtest.h>

#include "wire/tag.hpp"

using namespace commux::wire;

TEST(Tag, P2PRoundTrip) {
  const Tag t = p2pTag(123, 4567, 0x12345678);
  EXPECT_FALSE(isCollective(t));
  EXPECT_EQ(contextOf(t), 123u);
  EXPECT_EQ(sourceOf(t), 4567u);
  EXPECT_EQ(userTagOf(t), 0x12345678u);
  EXPECT_FALSE(isPacked(t));
  EXPECT_TRUE(isPacked(p2pTag(1, 2, 3, true)));
}

TEST(Tag, ExtremesStayInTheirFields) {
  const Tag t = p2pTag(kMaxContexts - 1, kMaxRanks - 1, static_cast<std::uint32_t>(kMaxUserTag));
  EXPECT_EQ(contextOf(t), kMaxContexts - 1);
  EXPECT_EQ(sourceOf(t), kMaxRanks - 1);
  EXPECT_EQ(userTagOf(t), static_cast<std::uint32_t>(kMaxUserTag));
  EXPECT_FALSE(isCollective(t));
  EXPECT_FALSE(isPacked(t));
}

TEST(Tag, CollectiveNeverEqualsP2P) {
  for (std::uint32_t v : {0u, 1u, 0x7fffffffu}) {
    EXPECT_NE(collectiveTag(5, 1, v >> 12, v & 0xfff), p2pTag(5, 1, v));
  }
}

TEST(Tag, ConsecutiveCollectivesDiffer) {
  EXPECT_NE(collectiveTag(1, 2, 7, 0), collectiveTag(1, 2, 8, 0));
  EXPECT_NE(collectiveTag(1, 2, 7, 0), collectiveTag(1, 2, 7, 1));
  // The sequence field wraps at 2^20 without touching the source or context.
  const Tag wrapped = collectiveTag(1, 2, 1u << kSequenceBits, 0);
  EXPECT_EQ(wrapped, collectiveTag(1, 2, 0, 0));
  EXPECT_EQ(sourceOf(wrapped), 2u);
}

TEST(Tag, AnySourceMaskIgnoresOnlyTheSource) {
  const Tag posted = p2pTag(9, 0, 42);
  EXPECT_EQ(p2pTag(9, 3, 42) & kAnySourceMask, posted & kAnySourceMask);
  EXPECT_NE(p2pTag(9, 3, 43) & kAnySourceMask, posted & kAnySourceMask);
  EXPECT_NE(p2pTag(8, 3, 42) & kAnySourceMask, posted & kAnySourceMask);
  EXPECT_NE(collectiveTag(9, 3, 0, 42) & kAnySourceMask, posted & kAnySourceMask);
}

TEST(Tag, ExactMaskToleratesPackingOnly) {
  EXPECT_EQ(p2pTag(1, 2, 3, true) & kExactMask, p2pTag(1, 2, 3) & kExactMask);
  EXPECT_NE(p2pTag(1, 2, 4) & kExactMask, p2pTag(1, 2, 3) & kExactMask);
}

TEST(Tag, DifferentContextsNeverMatch) {
  EXPECT_NE(p2pTag(1, 0, 5) & kExactMask, p2pTag(2, 0, 5) & kExactMask);
  EXPECT_NE(collectiveTag(1, 0, 5, 0), collectiveTag(2, 0, 5, 0));
}
