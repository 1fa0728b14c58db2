#include "core/reduce.hpp"

#include <cmath>
#include <type_traits>

#include "core/half_float.hpp"

namespace commux::core {
namespace {

// Loops over plain arrays: the compiler vectorizes those of native types. `out` may equal
// `a` or `b`, so no restrict; the loads happen before the store of each element.
template <typename T, typename F>
void each(void* out, const void* a, const void* b, std::size_t n, F f) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
}

// A NaN on either side wins (at::minimum / at::maximum); one test per element, so the
// loop still vectorises.
template <typename T>
T minOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return (std::isnan(a) || a < b) ? a : b;
  } else {
    return a < b ? a : b;
  }
}

template <typename T>
T maxOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return (std::isnan(a) || a > b) ? a : b;
  } else {
    return a > b ? a : b;
  }
}

template <typename T>
bool floats(void* out, const void* a, const void* b, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: each<T>(out, a, b, n, [](T x, T y) { return x + y; }); return true;
    case ReduceOp::Product: each<T>(out, a, b, n, [](T x, T y) { return x * y; }); return true;
    case ReduceOp::Min: each<T>(out, a, b, n, minOf<T>); return true;
    case ReduceOp::Max: each<T>(out, a, b, n, maxOf<T>); return true;
    default: return false;
  }
}

// Integers: sums and products in the unsigned type of at least int's width, so that they
// wrap around as torch's do instead of overflowing (undefined for signed types).
template <typename T>
bool integers(void* out, const void* a, const void* b, std::size_t n, ReduceOp op) {
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  switch (op) {
    case ReduceOp::Sum:
      each<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(static_cast<U>(x) + static_cast<U>(y)); });
      return true;
    case ReduceOp::Product:
      each<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(static_cast<U>(x) * static_cast<U>(y)); });
      return true;
    case ReduceOp::Min: each<T>(out, a, b, n, minOf<T>); return true;
    case ReduceOp::Max: each<T>(out, a, b, n, maxOf<T>); return true;
    case ReduceOp::BitAnd: each<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(x & y); }); return true;
    case ReduceOp::BitOr: each<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(x | y); }); return true;
    case ReduceOp::BitXor: each<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(x ^ y); }); return true;
  }
  return false;
}

// Half and bfloat16: each element in float, rounded once, as torch computes them.
template <float (*toFloat)(std::uint16_t), std::uint16_t (*fromFloat)(float)>
bool narrowFloats(void* out, const void* a, const void* b, std::size_t n, ReduceOp op) {
  const auto via = [&](auto f) {
    each<std::uint16_t>(out, a, b, n, [f](std::uint16_t x, std::uint16_t y) {
      return fromFloat(f(toFloat(x), toFloat(y)));
    });
  };
  // MIN and MAX pick one of the two, unchanged (a NaN on either side wins).
  const auto pick = [&](bool wantMin) {
    each<std::uint16_t>(out, a, b, n, [wantMin](std::uint16_t x, std::uint16_t y) {
      const float fx = toFloat(x);
      const float fy = toFloat(y);
      if (std::isnan(fx)) return x;
      if (std::isnan(fy)) return y;
      return (wantMin ? fy < fx : fx < fy) ? y : x;
    });
  };
  switch (op) {
    case ReduceOp::Sum: via([](float x, float y) { return x + y; }); return true;
    case ReduceOp::Product: via([](float x, float y) { return x * y; }); return true;
    case ReduceOp::Min: pick(true); return true;
    case ReduceOp::Max: pick(false); return true;
    default: return false;
  }
}

// Complex numbers as pairs of T (no std::complex: its operator* recovers infinities from
// NaN products, C99 Annex G, which torch's does not).
template <typename T>
bool complexes(void* out, const void* a, const void* b, std::size_t n, ReduceOp op) {
  struct Pair {
    T re, im;
  };
  switch (op) {
    case ReduceOp::Sum:
      each<Pair>(out, a, b, n, [](Pair x, Pair y) { return Pair{x.re + y.re, x.im + y.im}; });
      return true;
    case ReduceOp::Product:
      each<Pair>(out, a, b, n, [](Pair x, Pair y) {
        return Pair{x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re};
      });
      return true;
    default:
      return false;
  }
}

bool booleans(void* out, const void* a, const void* b, std::size_t n, ReduceOp op) {
  const auto fold = [&](auto f) {
    each<std::uint8_t>(out, a, b, n, [f](std::uint8_t x, std::uint8_t y) {
      return static_cast<std::uint8_t>(f(x != 0, y != 0) ? 1 : 0);
    });
  };
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Max:
    case ReduceOp::BitOr: fold([](bool x, bool y) { return x || y; }); return true;
    case ReduceOp::Product:
    case ReduceOp::Min:
    case ReduceOp::BitAnd: fold([](bool x, bool y) { return x && y; }); return true;
    case ReduceOp::BitXor: fold([](bool x, bool y) { return x != y; }); return true;
  }
  return false;
}

}  // namespace

const char* nameOf(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::Sum: return "SUM";
    case ReduceOp::Product: return "PRODUCT";
    case ReduceOp::Min: return "MIN";
    case ReduceOp::Max: return "MAX";
    case ReduceOp::BitAnd: return "BAND";
    case ReduceOp::BitOr: return "BOR";
    case ReduceOp::BitXor: return "BXOR";
  }
  return "?";
}

bool reduces(Dtype dtype, ReduceOp op) noexcept {
  const bool bitwise = op == ReduceOp::BitAnd || op == ReduceOp::BitOr || op == ReduceOp::BitXor;
  switch (dtype) {
    case Dtype::Float16:
    case Dtype::BFloat16:
    case Dtype::Float32:
    case Dtype::Float64: return !bitwise;
    case Dtype::Complex64:
    case Dtype::Complex128:
      return op == ReduceOp::Sum || op == ReduceOp::Product;
    default: return true;
  }
}

bool reduce(void* out, const void* a, const void* b, std::size_t count, Dtype dtype,
            ReduceOp op) noexcept {
  if (!reduces(dtype, op)) return false;
  switch (dtype) {
    case Dtype::UInt8: return integers<std::uint8_t>(out, a, b, count, op);
    case Dtype::Int8: return integers<std::int8_t>(out, a, b, count, op);
    case Dtype::Int16: return integers<std::int16_t>(out, a, b, count, op);
    case Dtype::Int32: return integers<std::int32_t>(out, a, b, count, op);
    case Dtype::Int64: return integers<std::int64_t>(out, a, b, count, op);
    case Dtype::Float16: return narrowFloats<halfToFloat, floatToHalf>(out, a, b, count, op);
    case Dtype::BFloat16:
      return narrowFloats<bfloat16ToFloat, floatToBfloat16>(out, a, b, count, op);
    case Dtype::Float32: return floats<float>(out, a, b, count, op);
    case Dtype::Float64: return floats<double>(out, a, b, count, op);
    case Dtype::Bool: return booleans(out, a, b, count, op);
    case Dtype::Complex64:
      return complexes<float>(out, a, b, count, op);
    case Dtype::Complex128:
      return complexes<double>(out, a, b, count, op);
  }
  return false;
}

}  // namespace commux::core
