#pragma once
// Folding host memory for the collectives: out = a (op) b. The core's own kernels
// (core/reduce.hpp) unless a front end installed a fold of its own: torch's adapter folds
// large buffers with ATen's vectorised, multi-threaded kernels, and the types only torch
// knows (an Opaque Buffer) by their ScalarType.
#include <cstddef>

#include "core/buffer.hpp"
#include "core/reduce.hpp"

namespace commux::core {

/// Folds `count` elements of `like`'s type; false when it leaves them to the core's kernels.
using HostFold = bool (*)(void* out, const void* a, const void* b, std::size_t count,
                          const Buffer& like, ReduceOp op);
void setHostFold(HostFold fold) noexcept;  // nullptr: the core's kernels alone

/// `out` may be `a` or `b`. Raises InvalidArgument when nothing can fold `like`'s type
/// with `op`.
void fold(void* out, const void* a, const void* b, std::size_t count, const Buffer& like,
          ReduceOp op);

}  // namespace commux::core
