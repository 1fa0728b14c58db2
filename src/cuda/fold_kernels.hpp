#pragma once
// The fold kernels (device_fold.cu) as the runtime unit launches them: no CUDA types, so
// that only the .cu file is compiled by nvcc.
#include <cstddef>

#include "core/dtype.hpp"
#include "core/reduce.hpp"

namespace commux::cuda {

/// Queues out = a (op) b on `stream` (a cudaStream_t). Returns the launch's cudaError_t (0:
/// queued); `unsupported` is set, and nothing queued, when core::reduces(dtype, op) is false.
int launchFold(void* out, const void* a, const void* b, std::size_t count, core::Dtype dtype,
               core::ReduceOp op, void* stream, bool& unsupported);

}  // namespace commux::cuda
