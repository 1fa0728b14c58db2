#include "c10d/tensor_job.hpp"

#include <ATen/core/grad_mode.h>

#include <utility>

#include "engine/reduce_kernels.hpp"

namespace commux {

namespace {

// What a job's buffers point into, kept alive together: one allocation per job.
struct JobTensors {
  at::Tensor buffer;
  at::Tensor input;
  at::Tensor output;
};

core::Buffer describe(const at::Tensor& tensor) {
  core::Buffer buffer;
  if (!tensor.defined()) return buffer;
  const auto dtype = engine::coreDtype(tensor.scalar_type());
  buffer.data = tensor.data_ptr();
  buffer.count = static_cast<std::size_t>(tensor.numel());
  buffer.dtype = dtype ? *dtype : core::Dtype::Opaque;
  buffer.elementSize = static_cast<std::uint16_t>(tensor.element_size());
  buffer.frontEndType = static_cast<std::int16_t>(tensor.scalar_type());
  return buffer;
}

}  // namespace

shm::Job toCore(TensorJob&& job) {
  shm::Job core;
  core.kind = job.kind;
  core.root = job.root;
  core.reduce = job.reduce;
  core.buffer = describe(job.buffer);
  core.input = describe(job.input);
  core.output = describe(job.output);
  if (core.buffer.present() || core.input.present() || core.output.present()) {
    // Each buffer's owner shares the one allocation (aliasing shared_ptrs).
    auto tensors = std::make_shared<JobTensors>(
        JobTensors{std::move(job.buffer), std::move(job.input), std::move(job.output)});
    core.buffer.owner = std::shared_ptr<const void>(tensors, &tensors->buffer);
    core.input.owner = std::shared_ptr<const void>(tensors, &tensors->input);
    core.output.owner = std::shared_ptr<const void>(tensors, &tensors->output);
  }
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
