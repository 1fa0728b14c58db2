#include "engine/reduce_kernels.hpp"

#include <ATen/core/grad_mode.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <type_traits>

namespace commux::engine {
namespace {

// Above this, ATen's vectorised kernels win over a plain loop.
constexpr std::size_t kRawMaxBytes = 64 * 1024;

template <typename T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wraps, like ATen, without signed overflow
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename T>
T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename T>
bool isNan(T a) {
  if constexpr (std::is_integral_v<T>) {
    return false;
  } else {
    return a != a;
  }
}

template <typename T, typename F>
void fold(void* acc, const void* in, std::size_t count, F f) {
  T* a = static_cast<T*>(acc);
  const T* b = static_cast<const T*>(in);
  for (std::size_t i = 0; i < count; ++i) a[i] = f(a[i], b[i]);
}

template <typename T>
bool foldAs(void* acc, const void* in, std::size_t count, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::Sum: fold<T>(acc, in, count, add<T>); return true;
    case ReduceKind::Product: fold<T>(acc, in, count, mul<T>); return true;
    // at::minimum / at::maximum: a NaN on either side wins.
    case ReduceKind::Min:
      fold<T>(acc, in, count, [](T a, T b) { return (isNan(a) || a < b) ? a : b; });
      return true;
    case ReduceKind::Max:
      fold<T>(acc, in, count, [](T a, T b) { return (isNan(a) || a > b) ? a : b; });
      return true;
    case ReduceKind::BitAnd:
    case ReduceKind::BitOr:
    case ReduceKind::BitXor:
      if constexpr (std::is_integral_v<T>) {
        if (kind == ReduceKind::BitAnd) fold<T>(acc, in, count, [](T a, T b) { return T(a & b); });
        if (kind == ReduceKind::BitOr) fold<T>(acc, in, count, [](T a, T b) { return T(a | b); });
        if (kind == ReduceKind::BitXor) fold<T>(acc, in, count, [](T a, T b) { return T(a ^ b); });
        return true;
      }
      return false;
  }
  return false;
}

}  // namespace

bool reduceRaw(void* acc, const void* in, std::size_t count, at::ScalarType dtype, ReduceKind kind) {
  if (count * c10::elementSize(dtype) > kRawMaxBytes) return false;
  switch (dtype) {
    case at::kFloat: return foldAs<float>(acc, in, count, kind);
    case at::kDouble: return foldAs<double>(acc, in, count, kind);
    case at::kInt: return foldAs<std::int32_t>(acc, in, count, kind);
    case at::kLong: return foldAs<std::int64_t>(acc, in, count, kind);
    case at::kShort: return foldAs<std::int16_t>(acc, in, count, kind);
    case at::kChar: return foldAs<std::int8_t>(acc, in, count, kind);
    case at::kByte: return foldAs<std::uint8_t>(acc, in, count, kind);
    // Computed in float and rounded once per element, as ATen's CPU kernels do.
    case at::kBFloat16: return kind != ReduceKind::Min && kind != ReduceKind::Max &&
                               foldAs<c10::BFloat16>(acc, in, count, kind);
    case at::kHalf: return kind != ReduceKind::Min && kind != ReduceKind::Max &&
                           foldAs<c10::Half>(acc, in, count, kind);
    default: return false;
  }
}

void reduceInto(const at::Tensor& acc, const at::Tensor& in, ReduceKind kind) {
  reduceOut(acc, acc, in, kind);
}

void reduceOut(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, ReduceKind kind) {
  // Buffers may alias gradients that require grad (create_graph=True); folding them is
  // not part of any graph.
  const at::NoGradGuard noGrad;
  at::Tensor result = out;  // the *_out ops take a mutable reference
  switch (kind) {
    case ReduceKind::Sum:
      at::add_out(result, a, b);
      break;
    case ReduceKind::Product:
      at::mul_out(result, a, b);
      break;
    case ReduceKind::Min:
      at::minimum_out(result, a, b);
      break;
    case ReduceKind::Max:
      at::maximum_out(result, a, b);
      break;
    case ReduceKind::BitAnd:
      at::bitwise_and_out(result, a, b);
      break;
    case ReduceKind::BitOr:
      at::bitwise_or_out(result, a, b);
      break;
    case ReduceKind::BitXor:
      at::bitwise_xor_out(result, a, b);
      break;
  }
}

const char* reduceKindName(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::Sum: return "SUM";
    case ReduceKind::Product: return "PRODUCT";
    case ReduceKind::Min: return "MIN";
    case ReduceKind::Max: return "MAX";
    case ReduceKind::BitAnd: return "BAND";
    case ReduceKind::BitOr: return "BOR";
    case ReduceKind::BitXor: return "BXOR";
  }
  return "?";
}

}  // namespace commux::engine
