// The core's reduction kernels (no torch): torch's CPU semantics on the edges that differ
// between plausible implementations. tests/python/test_core_reduce.py compares every
// (dtype, operation) with ATen itself on random data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/half_float.hpp"
#include "core/reduce.hpp"

using commux::core::Dtype;
using commux::core::reduce;
using commux::core::reduceInto;
using commux::core::ReduceOp;

namespace {

template <typename T>
std::vector<T> fold(std::vector<T> acc, const std::vector<T>& in, Dtype dtype, ReduceOp op) {
  EXPECT_TRUE(reduceInto(acc.data(), in.data(), acc.size(), dtype, op));
  return acc;
}

std::uint16_t half(float f) { return commux::core::floatToHalf(f); }
float fromHalf(std::uint16_t h) { return commux::core::halfToFloat(h); }

}  // namespace

TEST(CoreReduce, IntegersWrapAround) {
  EXPECT_EQ(fold<std::int8_t>({127, -128}, {1, -1}, Dtype::Int8, ReduceOp::Sum),
            (std::vector<std::int8_t>{-128, 127}));
  EXPECT_EQ(fold<std::uint8_t>({16, 255}, {16, 2}, Dtype::UInt8, ReduceOp::Product),
            (std::vector<std::uint8_t>{0, 254}));
  const auto big = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(fold<std::int64_t>({big}, {1}, Dtype::Int64, ReduceOp::Sum),
            (std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min()}));
  EXPECT_EQ(fold<std::int16_t>({-300, 7}, {200, -9}, Dtype::Int16, ReduceOp::Min),
            (std::vector<std::int16_t>{-300, -9}));
  EXPECT_EQ(fold<std::int32_t>({0b1100}, {0b1010}, Dtype::Int32, ReduceOp::BitXor),
            (std::vector<std::int32_t>{0b0110}));
}

TEST(CoreReduce, NanWinsMinAndMaxOnEitherSide) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::Min, ReduceOp::Max}) {
    const auto r = fold<float>({nan, 1.0f, 2.0f}, {1.0f, nan, -3.0f}, Dtype::Float32, op);
    EXPECT_TRUE(std::isnan(r[0]) && std::isnan(r[1]));
    EXPECT_EQ(r[2], op == ReduceOp::Min ? -3.0f : 2.0f);
    const std::uint16_t hnan = 0x7e00;
    const auto h = fold<std::uint16_t>({hnan, half(1.0f)}, {half(5.0f), hnan}, Dtype::Float16, op);
    EXPECT_TRUE(std::isnan(fromHalf(h[0])) && std::isnan(fromHalf(h[1])));
  }
}

TEST(CoreReduce, HalfRoundsOnceToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and the next half (1 + 2^-10): even wins, 1.
  EXPECT_EQ(
      fold<std::uint16_t>({half(1.0f)}, {half(0.00048828125f)}, Dtype::Float16, ReduceOp::Sum)[0],
      half(1.0f));
  // 65504 (the largest half) + 16 = 65520, halfway to 65536: rounds to inf.
  EXPECT_TRUE(std::isinf(fromHalf(
      fold<std::uint16_t>({half(65504.0f)}, {half(16.0f)}, Dtype::Float16, ReduceOp::Sum)[0])));
  // Every half survives the trip through float, subnormals and infinities included.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fromHalf(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(half(f), h) << std::hex << h;
  }
  // The smallest subnormal, and halfway below it (rounds to zero, the even side).
  EXPECT_EQ(half(5.9604644775390625e-8f), 1u);
  EXPECT_EQ(half(2.98023223876953125e-8f), 0u);
  EXPECT_EQ(half(-2.98023223876953125e-8f), 0x8000u);
}

TEST(CoreReduce, BFloat16RoundsToNearestEven) {
  using commux::core::bfloat16ToFloat;
  using commux::core::floatToBfloat16;
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even wins.
  const std::uint16_t one = floatToBfloat16(1.0f);
  const std::uint16_t step = floatToBfloat16(0.00390625f);
  EXPECT_EQ(fold<std::uint16_t>({one}, {step}, Dtype::BFloat16, ReduceOp::Sum)[0], one);
  EXPECT_EQ(bfloat16ToFloat(floatToBfloat16(3.0f)), 3.0f);
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::quiet_NaN()), 0x7fc0u);
}

TEST(CoreReduce, BoolFoldsLogically) {
  const std::vector<std::uint8_t> a{0, 1, 1, 0}, b{0, 0, 1, 1};
  EXPECT_EQ(fold(a, b, Dtype::Bool, ReduceOp::Sum), (std::vector<std::uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(fold(a, b, Dtype::Bool, ReduceOp::Product), (std::vector<std::uint8_t>{0, 0, 1, 0}));
  EXPECT_EQ(fold(a, b, Dtype::Bool, ReduceOp::BitXor), (std::vector<std::uint8_t>{0, 1, 0, 1}));
  // Any nonzero byte is true; the result is 0 or 1.
  EXPECT_EQ(fold<std::uint8_t>({7}, {0}, Dtype::Bool, ReduceOp::Max)[0], 1);
}

TEST(CoreReduce, OutputMayBeEitherInput) {
  std::vector<double> a{1, 2, 3}, b{10, 20, 30};
  ASSERT_TRUE(reduce(b.data(), a.data(), b.data(), 3, Dtype::Float64, ReduceOp::Product));
  EXPECT_EQ(b, (std::vector<double>{10, 40, 90}));
}

TEST(CoreReduce, ComplexNumbersSumAndMultiplyAsPairs) {
  // (1 + 2i) + (3 - 1i) = 4 + 1i; (1 + 2i)(3 - 1i) = 3 + 2 + (-1 + 6)i = 5 + 5i.
  std::vector<float> a{1.f, 2.f, -0.f, 0.f}, b{3.f, -1.f, 0.f, -0.f};
  std::vector<float> sum(4), product(4);
  ASSERT_TRUE(reduce(sum.data(), a.data(), b.data(), 2, Dtype::Complex64, ReduceOp::Sum));
  ASSERT_TRUE(reduce(product.data(), a.data(), b.data(), 2, Dtype::Complex64, ReduceOp::Product));
  EXPECT_EQ(sum, (std::vector<float>{4.f, 1.f, 0.f, 0.f}));
  EXPECT_EQ(product[0], 5.f);
  EXPECT_EQ(product[1], 5.f);
  std::vector<double> x{0.5, -4.0}, y{2.0, 0.25};
  ASSERT_TRUE(reduceInto(x.data(), y.data(), 1, Dtype::Complex128, ReduceOp::Product));
  EXPECT_EQ(x, (std::vector<double>{0.5 * 2.0 + 4.0 * 0.25, 0.5 * 0.25 - 4.0 * 2.0}));
  EXPECT_EQ(commux::core::sizeOf(Dtype::Complex128), 16u);
}

TEST(CoreReduce, ComplexNumbersHaveNoOrderOrBits) {
  std::vector<float> a{1.f, 2.f}, b{3.f, 4.f};
  for (const auto op : {ReduceOp::Min, ReduceOp::Max, ReduceOp::BitAnd, ReduceOp::BitXor}) {
    EXPECT_FALSE(reduceInto(a.data(), b.data(), 1, Dtype::Complex64, op));
  }
  EXPECT_EQ(a, (std::vector<float>{1.f, 2.f}));
}

TEST(CoreReduce, BitwiseOnFloatsIsRefusedAndTouchesNothing) {
  std::vector<float> a{1.5f}, b{2.5f};
  EXPECT_FALSE(reduceInto(a.data(), b.data(), 1, Dtype::Float32, ReduceOp::BitAnd));
  EXPECT_EQ(a[0], 1.5f);
  EXPECT_FALSE(commux::core::reduces(Dtype::BFloat16, ReduceOp::BitOr));
  EXPECT_TRUE(commux::core::reduces(Dtype::Bool, ReduceOp::BitOr));
}
