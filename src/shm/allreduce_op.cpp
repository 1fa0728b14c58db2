#include "shm/allreduce_op.hpp"

#include <ATen/core/grad_mode.h>

#include <stdexcept>

#include "shm/channel.hpp"

namespace commux::shm {

AllreduceOp::AllreduceOp(std::weak_ptr<Channel> channel, at::Tensor work,
                         engine::ReduceKind kind, std::function<void()> finalize,
                         std::string description, Done done)
    : Op(std::move(description), std::move(done)),
      channel_(std::move(channel)),
      work_(std::move(work)),
      kind_(kind),
      finalize_(std::move(finalize)) {}

void AllreduceOp::start(engine::Engine& engine) {
  auto channel = channel_.lock();
  if (!channel) throw std::runtime_error("commux: " + description() + ": the process group is gone");
  channel->enqueue(std::static_pointer_cast<AllreduceOp>(shared_from_this()));
}

void AllreduceOp::assist(std::chrono::steady_clock::time_point deadline) {
  if (auto channel = channel_.lock()) {
    channel->runFromWaiter(std::static_pointer_cast<AllreduceOp>(shared_from_this()), deadline);
  }
}

void AllreduceOp::onFailed() {
  if (ran_.load(std::memory_order_acquire)) return;
  if (auto channel = channel_.lock()) channel->abandon();
}

void AllreduceOp::finalize() {
  // The user's tensors may require grad; writing results into them is not autograd's.
  const at::NoGradGuard noGrad;
  if (finalize_) finalize_();
}

}  // namespace commux::shm
