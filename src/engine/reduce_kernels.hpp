#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace commux::engine {

enum class ReduceKind : std::uint8_t { Sum, Product, Min, Max, BitAnd, BitOr, BitXor };

/// acc = acc (op) in, elementwise, in place. Both tensors are contiguous and alike.
void reduceInto(const at::Tensor& acc, const at::Tensor& in, ReduceKind kind);
/// out = a (op) b, elementwise; out may alias a or b. All three are contiguous and alike.
void reduceOut(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, ReduceKind kind);

/// acc[i] = acc[i] (op) in[i] over raw memory, for the common dtypes and small counts, where
/// building tensor views and a TensorIterator costs more than the arithmetic. Returns false
/// (touching nothing) when it does not handle the dtype or the count; use reduceInto then.
/// Results match ATen's (NaN propagation of MIN/MAX, wrap-around of integers).
bool reduceRaw(void* acc, const void* in, std::size_t count, at::ScalarType dtype, ReduceKind kind);

const char* reduceKindName(ReduceKind kind);

}  // namespace commux::engine
