// core::InlineVector: inline up to N elements, then on the heap, with the order and values
// kept across the move; a moved-from vector is empty and usable.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "core/inline_vector.hpp"

namespace {

using commux::core::InlineVector;

TEST(InlineVector, KeepsItsElementsInlineThenOnTheHeap) {
  InlineVector<std::string, 2> v;
  EXPECT_TRUE(v.empty());
  for (int i = 0; i < 5; ++i) v.push_back(std::to_string(i));
  ASSERT_EQ(v.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(v[i], std::to_string(i));
  std::string all;
  for (const auto& s : v) all += s;
  EXPECT_EQ(all, "01234");
}

TEST(InlineVector, ResizesWithAValueBothWays) {
  InlineVector<int*, 4> v;
  int x = 0;
  v.resize(3, &x);
  EXPECT_EQ(v.size(), 3u);
  EXPECT_EQ(v[2], &x);
  v.resize(1, nullptr);
  EXPECT_EQ(v.size(), 1u);
  v.resize(6, nullptr);  // past the inline room
  EXPECT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0], &x);
  EXPECT_EQ(v[5], nullptr);
}

TEST(InlineVector, AMovedFromVectorIsEmptyAndUsable) {
  for (int n : {1, 3}) {  // inline, then on the heap
    InlineVector<std::shared_ptr<int>, 2> a;
    for (int i = 0; i < n; ++i) a.push_back(std::make_shared<int>(i));
    const std::weak_ptr<int> first = a[0];
    InlineVector<std::shared_ptr<int>, 2> b(std::move(a));
    EXPECT_TRUE(a.empty()) << n;
    ASSERT_EQ(b.size(), static_cast<std::size_t>(n));
    EXPECT_EQ(*b[0], 0);
    a.push_back(std::make_shared<int>(7));
    EXPECT_EQ(*a.front(), 7);
    InlineVector<std::shared_ptr<int>, 2> c;
    c = std::move(b);
    EXPECT_TRUE(b.empty());
    EXPECT_EQ(c.size(), static_cast<std::size_t>(n));
    c.clear();
    EXPECT_TRUE(first.expired()) << "clear() let go of its elements";
  }
}

}  // namespace
