#include "shm/collective_op.hpp"

#include <stdexcept>

#include "shm/channel.hpp"

namespace commux::shm {

CollectiveOp::CollectiveOp(std::weak_ptr<Channel> channel, Job job, std::function<void()> finalize,
                           engine::Description description, Done done)
    : Op(std::move(description), std::move(done)),
      channel_(std::move(channel)),
      job_(std::move(job)),
      finalize_(std::move(finalize)) {}

void CollectiveOp::start(engine::Engine& engine) {
  auto channel = channel_.lock();
  if (!channel)
    throw std::runtime_error("commux: " + description() + ": the process group is gone");
  channel->enqueue(std::static_pointer_cast<CollectiveOp>(shared_from_this()));
}

void CollectiveOp::assist(std::chrono::steady_clock::time_point deadline) {
  if (auto channel = channel_.lock()) {
    channel->runFromWaiter(std::static_pointer_cast<CollectiveOp>(shared_from_this()), deadline);
  }
}

void CollectiveOp::onFailed() { withdraw(); }

void CollectiveOp::withdraw() noexcept {
  if (ran_.load(std::memory_order_acquire)) return;
  if (auto channel = channel_.lock()) channel->abandon();
}

void CollectiveOp::prepare() {
  if (prepare_) prepare_();
}

void CollectiveOp::finalize() {
  if (finalize_) finalize_();
}

}  // namespace commux::shm
