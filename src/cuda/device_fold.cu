// commux's own fold kernels: out[i] = a[i] (op) b[i], element by element, computed exactly
// as the host fold computes them (core/reduce.cpp): integer sums and products wrap in the
// unsigned type, a NaN wins MIN and MAX, half and bfloat16 go through float and round once,
// complex products without C99's infinity recovery, bool as logic. So a collective gives the
// same bits whether its folds ran on the host or on a GPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/half_float.hpp"
#include "cuda/fold_kernels.hpp"

namespace commux::cuda {
namespace {

using core::Dtype;
using core::ReduceOp;

template <typename T, typename F>
__global__ void foldKernel(T* out, const T* a, const T* b, std::size_t n, F f) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = f(a[i], b[i]);
  }
}

template <typename T, typename F>
int launch(void* out, const void* a, const void* b, std::size_t n, cudaStream_t stream, F f) {
  constexpr unsigned kThreads = 256;
  // Enough blocks to fill a large GPU; the grid-stride loop covers the rest.
  const std::size_t wanted = (n + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < 4096 ? wanted : 4096);
  foldKernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(a),
                                                 static_cast<const T*>(b), n, f);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
__device__ T minOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return (isnan(a) || a < b) ? a : b;
  } else {
    return a < b ? a : b;
  }
}

template <typename T>
__device__ T maxOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return (isnan(a) || a > b) ? a : b;
  } else {
    return a > b ? a : b;
  }
}

template <typename T>
int floats(void* out, const void* a, const void* b, std::size_t n, ReduceOp op, cudaStream_t s,
           bool& unsupported) {
  switch (op) {
    case ReduceOp::Sum:
      return launch<T>(out, a, b, n, s, [] __device__(T x, T y) { return x + y; });
    case ReduceOp::Product:
      return launch<T>(out, a, b, n, s, [] __device__(T x, T y) { return x * y; });
    case ReduceOp::Min:
      return launch<T>(out, a, b, n, s, [] __device__(T x, T y) { return minOf(x, y); });
    case ReduceOp::Max:
      return launch<T>(out, a, b, n, s, [] __device__(T x, T y) { return maxOf(x, y); });
    default:
      unsupported = true;
      return 0;
  }
}

template <typename T>
int integers(void* out, const void* a, const void* b, std::size_t n, ReduceOp op, cudaStream_t s) {
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  switch (op) {
    case ReduceOp::Sum:
      return launch<T>(out, a, b, n, s, [] __device__(T x, T y) {
        return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
      });
    case ReduceOp::Product:
      return launch<T>(out, a, b, n, s, [] __device__(T x, T y) {
        return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
      });
    case ReduceOp::Min:
      return launch<T>(out, a, b, n, s, [] __device__(T x, T y) { return minOf(x, y); });
    case ReduceOp::Max:
      return launch<T>(out, a, b, n, s, [] __device__(T x, T y) { return maxOf(x, y); });
    case ReduceOp::BitAnd:
      return launch<T>(out, a, b, n, s, [] __device__(T x, T y) { return static_cast<T>(x & y); });
    case ReduceOp::BitOr:
      return launch<T>(out, a, b, n, s, [] __device__(T x, T y) { return static_cast<T>(x | y); });
    case ReduceOp::BitXor:
      return launch<T>(out, a, b, n, s, [] __device__(T x, T y) { return static_cast<T>(x ^ y); });
  }
  return 0;
}

// Half and bfloat16 through the host fold's own conversions (core/half_float.hpp), so the
// rounding is the same bit for bit.
template <bool kHalf>
__device__ float widen(std::uint16_t x) {
  return kHalf ? core::halfToFloat(x) : core::bfloat16ToFloat(x);
}
template <bool kHalf>
__device__ std::uint16_t narrow(float x) {
  return kHalf ? core::floatToHalf(x) : core::floatToBfloat16(x);
}

template <bool kHalf>
int narrowFloats(void* out, const void* a, const void* b, std::size_t n, ReduceOp op,
                 cudaStream_t s, bool& unsupported) {
  using H = std::uint16_t;
  switch (op) {
    case ReduceOp::Sum:
      return launch<H>(out, a, b, n, s, [] __device__(H x, H y) {
        return narrow<kHalf>(widen<kHalf>(x) + widen<kHalf>(y));
      });
    case ReduceOp::Product:
      return launch<H>(out, a, b, n, s, [] __device__(H x, H y) {
        return narrow<kHalf>(widen<kHalf>(x) * widen<kHalf>(y));
      });
    case ReduceOp::Min:
    case ReduceOp::Max: {
      // One of the two, unchanged (a NaN on either side wins).
      const bool wantMin = op == ReduceOp::Min;
      return launch<H>(out, a, b, n, s, [wantMin] __device__(H x, H y) {
        const float fx = widen<kHalf>(x);
        const float fy = widen<kHalf>(y);
        if (isnan(fx)) return x;
        if (isnan(fy)) return y;
        return (wantMin ? fy < fx : fx < fy) ? y : x;
      });
    }
    default:
      unsupported = true;
      return 0;
  }
}

template <typename T>
struct Pair {
  T re, im;
};

template <typename T>
int complexes(void* out, const void* a, const void* b, std::size_t n, ReduceOp op, cudaStream_t s,
              bool& unsupported) {
  using P = Pair<T>;
  switch (op) {
    case ReduceOp::Sum:
      return launch<P>(out, a, b, n, s, [] __device__(P x, P y) {
        return P{x.re + y.re, x.im + y.im};
      });
    case ReduceOp::Product:
      return launch<P>(out, a, b, n, s, [] __device__(P x, P y) {
        return P{x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re};
      });
    default:
      unsupported = true;
      return 0;
  }
}

int booleans(void* out, const void* a, const void* b, std::size_t n, ReduceOp op, cudaStream_t s) {
  using B = std::uint8_t;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Max:
    case ReduceOp::BitOr:
      return launch<B>(out, a, b, n, s,
                       [] __device__(B x, B y) { return B((x != 0) || (y != 0)); });
    case ReduceOp::Product:
    case ReduceOp::Min:
    case ReduceOp::BitAnd:
      return launch<B>(out, a, b, n, s,
                       [] __device__(B x, B y) { return B((x != 0) && (y != 0)); });
    case ReduceOp::BitXor:
      return launch<B>(out, a, b, n, s,
                       [] __device__(B x, B y) { return B((x != 0) != (y != 0)); });
  }
  return 0;
}

}  // namespace

int launchFold(void* out, const void* a, const void* b, std::size_t count, Dtype dtype, ReduceOp op,
               void* stream, bool& unsupported) {
  unsupported = false;
  if (count == 0) return 0;
  auto* s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case Dtype::UInt8:
      return integers<std::uint8_t>(out, a, b, count, op, s);
    case Dtype::Int8:
      return integers<std::int8_t>(out, a, b, count, op, s);
    case Dtype::Int16:
      return integers<std::int16_t>(out, a, b, count, op, s);
    case Dtype::Int32:
      return integers<std::int32_t>(out, a, b, count, op, s);
    case Dtype::Int64:
      return integers<std::int64_t>(out, a, b, count, op, s);
    case Dtype::Float16:
      return narrowFloats<true>(out, a, b, count, op, s, unsupported);
    case Dtype::BFloat16:
      return narrowFloats<false>(out, a, b, count, op, s, unsupported);
    case Dtype::Float32:
      return floats<float>(out, a, b, count, op, s, unsupported);
    case Dtype::Float64:
      return floats<double>(out, a, b, count, op, s, unsupported);
    case Dtype::Bool:
      return booleans(out, a, b, count, op, s);
    case Dtype::Complex64:
      return complexes<float>(out, a, b, count, op, s, unsupported);
    case Dtype::Complex128:
      return complexes<double>(out, a, b, count, op, s, unsupported);
    case Dtype::Opaque:
      break;
  }
  unsupported = true;
  return 0;
}

}  // namespace commux::cuda
