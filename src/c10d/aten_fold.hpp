#pragma once
// Reductions of tensors: the core's kernels (core/reduce.hpp) over raw memory for CPU
// buffers small enough that a TensorIterator would cost more than the arithmetic, ATen's
// vectorised (and CUDA) kernels otherwise. Both give the same results.
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include "core/buffer.hpp"
#include "core/dtype.hpp"
#include "core/reduce.hpp"

namespace commux {


/// acc = acc (op) in, elementwise, in place. Both tensors are contiguous and alike.
void reduceInto(const at::Tensor& acc, const at::Tensor& in, core::ReduceOp kind);
/// out = a (op) b, elementwise; out may alias a or b. All three are contiguous and alike.
void reduceOut(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, core::ReduceOp kind);

/// acc[i] = acc[i] (op) in[i] over raw CPU memory with the core's kernels, for small
/// counts. Returns false (touching nothing) when the dtype is not one of the core's or the
/// buffer is large; use reduceInto then.
bool reduceRaw(void* acc, const void* in, std::size_t count, at::ScalarType dtype, core::ReduceOp kind);

/// The torch adapter's core::HostFold (installed by c10d/torch_hooks.cpp): what reduceRaw
/// takes, else ATen's kernels on views of the memory, by the buffer's ScalarType.
bool atenHostFold(void* out, const void* a, const void* b, std::size_t count,
                  const core::Buffer& like, core::ReduceOp kind);

/// The core's name for a torch dtype, if it has one.
std::optional<core::Dtype> coreDtype(at::ScalarType dtype);

}  // namespace commux
