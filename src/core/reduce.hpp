#pragma once
// Elementwise folds over plain memory, one kernel per (dtype, operation), with torch's CPU
// semantics: integers wrap around, a NaN on either side of MIN/MAX wins, half and bfloat16
// are computed in float and rounded once per element, bool folds logically (SUM and MAX
// are OR, PRODUCT and MIN are AND), and complex numbers have SUM and PRODUCT only (the
// product as (ac - bd) + (ad + bc)i, as c10::complex computes it).
#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"

namespace commux::core {

enum class ReduceOp : std::uint8_t { Sum, Product, Min, Max, BitAnd, BitOr, BitXor };

const char* nameOf(ReduceOp op) noexcept;

/// Whether `op` is defined on `dtype` (the bitwise ones only on integers and bool; complex
/// numbers only SUM and PRODUCT).
bool reduces(Dtype dtype, ReduceOp op) noexcept;

/// out[i] = a[i] (op) b[i] for i < count; `out` may be `a` or `b` (exactly, or not at all:
/// partial overlap is not allowed). Returns false, touching nothing, when !reduces(dtype, op).
bool reduce(void* out, const void* a, const void* b, std::size_t count, Dtype dtype,
            ReduceOp op) noexcept;

/// acc[i] = acc[i] (op) in[i].
inline bool reduceInto(void* acc, const void* in, std::size_t count, Dtype dtype,
                       ReduceOp op) noexcept {
  return reduce(acc, acc, in, count, dtype, op);
}

}  // namespace commux::core
