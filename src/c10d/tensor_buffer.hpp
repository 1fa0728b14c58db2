#pragma once
// A tensor as the core sees it: where its bytes are, how many, of which type, in which
// memory. The view owns nothing; whoever makes it keeps the tensor alive.
#include <ATen/ATen.h>

#include "core/buffer.hpp"

namespace commux {

/// A contiguous tensor's bytes (an undefined tensor: no buffer). A type the core does not
/// know is Opaque, compared and folded by torch's type number.
core::Buffer viewOf(const at::Tensor& tensor);

}  // namespace commux
