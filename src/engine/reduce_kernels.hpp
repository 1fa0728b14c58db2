#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace commux::engine {

enum class ReduceKind : std::uint8_t { Sum, Product, Min, Max, BitAnd, BitOr, BitXor };

/// acc = acc (op) in, elementwise, in place. Both tensors are contiguous and alike.
void reduceInto(const at::Tensor& acc, const at::Tensor& in, ReduceKind kind);

const char* reduceKindName(ReduceKind kind);

}  // namespace commux::engine
