#include "c10d/validation.hpp"

#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include "cuda/cuda_support.hpp"
#include "wire/tag.hpp"

namespace commux {

void checkTensors(const char* op, const std::vector<at::Tensor>& tensors, bool sameShape) {
  TORCH_CHECK_VALUE(!tensors.empty(), "commux: ", op, " needs at least one tensor");
  const at::Tensor& first = tensors.front();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    TORCH_CHECK_VALUE(t.defined(), "commux: ", op, ": tensor ", i, " is undefined");
    TORCH_CHECK_VALUE(t.layout() == at::kStrided, "commux: ", op, ": tensor ", i, " is ",
                      t.layout(), "; sparse and other non-strided tensors are not supported, "
                      "send the dense values and indices instead");
    TORCH_CHECK_VALUE(!t.is_meta(), "commux: ", op, ": tensor ", i,
                      " is a meta tensor and has no data to communicate");
    TORCH_CHECK_VALUE(t.device() == first.device(), "commux: ", op,
                      ": all tensors must be on one device, got ", first.device(), " and ",
                      t.device());
    TORCH_CHECK_NOT_IMPLEMENTED(t.device().is_cpu() || (t.device().is_cuda() && cuda::compiled()),
                                "commux: ", op, ": tensor ", i, " is on ", t.device(),
                                "; commux moves CPU", cuda::compiled() ? " and CUDA" : "",
                                " tensors only");
    if (sameShape) {
      TORCH_CHECK_VALUE(t.sizes() == first.sizes() && t.scalar_type() == first.scalar_type(),
                        "commux: ", op, ": all tensors in the list must have the same size "
                        "and dtype, got ", first.sizes(), " ", first.scalar_type(), " and ",
                        t.sizes(), " ", t.scalar_type());
    }
  }
}

void checkSameDevice(const char* op, const at::Tensor& input, const at::Tensor& output) {
  TORCH_CHECK_VALUE(input.device() == output.device(), "commux: ", op,
                    ": input and output tensors must be on one device, got ", input.device(),
                    " and ", output.device());
}

void checkSameKind(const char* op, const at::Tensor& input, const at::Tensor& output) {
  checkSameDevice(op, input, output);
  TORCH_CHECK_VALUE(input.scalar_type() == output.scalar_type(), "commux: ", op,
                    ": input and output dtypes differ (", input.scalar_type(), " vs ",
                    output.scalar_type(), ")");
}

void checkWritable(const char* op, const std::vector<at::Tensor>& tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    // A contiguous tensor's elements are distinct: the full test only for the others.
    TORCH_CHECK_VALUE(tensors[i].is_contiguous() ||
                          at::has_internal_overlap(tensors[i]) != at::MemOverlap::Yes,
                      "commux: ", op,
                      ": output tensor ", i, " has elements that share memory (an expanded or "
                      "stride-0 view, strides ", tensors[i].strides(), "); the result cannot be "
                      "written into it: pass a tensor with distinct elements (e.g. clone() it)");
  }
}

void checkTag(const char* op, int tag) {
  TORCH_CHECK_VALUE(tag >= 0, "commux: ", op, ": tag must be in [0, ", wire::kMaxUserTag,
                    "], got ", tag);
}

void checkPeer(const char* op, const char* role, int peer, int size) {
  TORCH_CHECK_VALUE(peer >= 0 && peer < size, "commux: ", op, ": invalid ", role, " rank ",
                    peer, " for a group of size ", size);
}

}  // namespace commux
