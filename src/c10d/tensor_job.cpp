#include "c10d/tensor_job.hpp"

#include <ATen/core/grad_mode.h>

#include <utility>

#include "engine/reduce_kernels.hpp"

namespace commux {

core::Buffer coreBuffer(const at::Tensor& tensor) {
  core::Buffer buffer;
  if (!tensor.defined()) return buffer;
  const auto dtype = engine::coreDtype(tensor.scalar_type());
  buffer.data = tensor.data_ptr();
  buffer.count = static_cast<std::size_t>(tensor.numel());
  buffer.dtype = dtype ? *dtype : core::Dtype::Opaque;
  buffer.elementSize = static_cast<std::uint16_t>(tensor.element_size());
  buffer.frontEndType = static_cast<std::int16_t>(tensor.scalar_type());
  buffer.owner = std::make_shared<at::Tensor>(tensor);
  return buffer;
}

shm::Job toCore(TensorJob&& job) {
  shm::Job core;
  core.kind = job.kind;
  core.root = job.root;
  core.reduce = job.reduce;
  core.buffer = coreBuffer(job.buffer);
  core.input = coreBuffer(job.input);
  core.output = coreBuffer(job.output);
  core.sendCounts = std::move(job.sendCounts);
  core.recvCounts = std::move(job.recvCounts);
  core.gate = std::move(job.gate);
  return core;
}

std::function<void()> withoutGrad(std::function<void()> f) {
  if (!f) return f;
  return [f = std::move(f)] {
    const at::NoGradGuard noGrad;
    f();
  };
}

}  // namespace commux
