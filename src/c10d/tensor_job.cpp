#include "c10d/tensor_job.hpp"

#include <ATen/core/grad_mode.h>

#include <utility>

#include "c10d/tensor_buffer.hpp"

namespace commux {

namespace {

// What a job's buffers point into, kept alive together: one allocation per job.
struct JobTensors {
  at::Tensor buffer;
  at::Tensor input;
  at::Tensor output;
};

}  // namespace

shm::Job toCore(TensorJob&& job) {
  shm::Job core;
  core.kind = job.kind;
  core.root = job.root;
  core.reduce = job.reduce;
  core.buffer = viewOf(job.buffer);
  core.input = viewOf(job.input);
  core.output = viewOf(job.output);
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
