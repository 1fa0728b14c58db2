#include "c10d/tensor_buffer.hpp"

#include "c10d/aten_fold.hpp"

namespace commux {

core::Buffer viewOf(const at::Tensor& tensor) {
  core::Buffer buffer;
  if (!tensor.defined()) return buffer;
  const auto dtype = coreDtype(tensor.scalar_type());
  buffer.data = tensor.data_ptr();
  buffer.count = static_cast<std::size_t>(tensor.numel());
  buffer.dtype = dtype ? *dtype : core::Dtype::Opaque;
  buffer.elementSize = static_cast<std::uint16_t>(tensor.element_size());
  buffer.frontEndType = static_cast<std::int16_t>(tensor.scalar_type());
  if (tensor.is_cuda()) {
    buffer.memory = core::MemoryType::Cuda;
    buffer.device = tensor.device().index();
  }
  return buffer;
}

}  // namespace commux
