#pragma once
// Where a tensor's bytes live, in UCX's terms.
#include <ATen/ATen.h>
#include <ucs/memory/memory_type.h>

namespace commux::engine {

inline ucs_memory_type_t memoryTypeOf(const at::Tensor& t) {
  return t.defined() && t.is_cuda() ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

}  // namespace commux::engine
