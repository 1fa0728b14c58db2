// core::fold and core::Buffer's type code, with and without a front end's fold.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/buffer.hpp"
#include "core/error.hpp"
#include "core/fold.hpp"

namespace commux::core {
namespace {

int installedCalls = 0;

TEST(CoreFold, TheCoresKernelsFoldItsTypes) {
  std::vector<std::int32_t> acc{1, 2, 3}, in{10, 20, 30};
  const Buffer like = bufferOf(acc.data(), acc.size(), Dtype::Int32);
  fold(acc.data(), acc.data(), in.data(), acc.size(), like, ReduceOp::Sum);
  EXPECT_EQ(acc, (std::vector<std::int32_t>{11, 22, 33}));
}

TEST(CoreFold, ATypeNoKernelFoldsIsAnArgumentErrorNamingIt) {
  std::vector<std::uint8_t> acc{1}, in{2};
  Buffer like{acc.data(), 1, Dtype::Opaque, 1, 23, nullptr};
  try {
    fold(acc.data(), acc.data(), in.data(), 1, like, ReduceOp::Max);
    FAIL() << "folded an opaque type";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("MAX is not defined on front-end type 23"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(acc[0], 1);
}

TEST(CoreFold, AnInstalledFoldGoesFirstAndMayLeaveATypeToTheCore) {
  setHostFold([](void* out, const void* a, const void* b, std::size_t count, const Buffer& like,
                 ReduceOp op) {
    ++installedCalls;
    if (like.dtype != Dtype::Opaque) return false;
    auto* o = static_cast<std::uint8_t*>(out);
    for (std::size_t i = 0; i < count; ++i) {
      o[i] = static_cast<std::uint8_t>(static_cast<const std::uint8_t*>(a)[i] * 10 +
                                       static_cast<const std::uint8_t*>(b)[i]);
    }
    return true;
  });
  std::vector<std::uint8_t> x{1, 2}, y{3, 4};
  Buffer opaque{x.data(), 2, Dtype::Opaque, 1, 7, nullptr};
  fold(x.data(), x.data(), y.data(), 2, opaque, ReduceOp::Sum);
  EXPECT_EQ(x, (std::vector<std::uint8_t>{13, 24}));
  fold(x.data(), x.data(), y.data(), 2, bufferOf(x.data(), 2, Dtype::UInt8), ReduceOp::Sum);
  EXPECT_EQ(x, (std::vector<std::uint8_t>{16, 28}));
  EXPECT_EQ(installedCalls, 2);
  setHostFold(nullptr);
}

TEST(CoreBuffer, RanksCompareTheCoresTypeOrTheFrontEndsForAnOpaqueOne) {
  float f = 0;
  const Buffer a = bufferOf(&f, 1, Dtype::Float32);
  Buffer b = a;
  b.frontEndType = 6;  // a front end's number for the same type changes nothing
  EXPECT_EQ(typeCode(a), typeCode(b));
  EXPECT_EQ(typeCodeName(typeCode(a)), "float32");
  const Buffer opaque1{&f, 1, Dtype::Opaque, 1, 23, nullptr};
  const Buffer opaque2{&f, 1, Dtype::Opaque, 1, 24, nullptr};
  EXPECT_NE(typeCode(opaque1), typeCode(opaque2));
  EXPECT_NE(typeCode(opaque1), typeCode(a));
  EXPECT_EQ(typeCodeName(typeCode(opaque1)), "front-end type 23");
  EXPECT_FALSE(Buffer{}.present());
  EXPECT_EQ(a.bytes(), 4u);
}

}  // namespace
}  // namespace commux::core
