#include "shm/channel_op.hpp"

#include <stdexcept>

#include "shm/channel.hpp"

namespace commux::shm {

ChannelOp::ChannelOp(std::weak_ptr<Channel> channel, Job job, std::function<void()> finalize,
                     engine::Description description, Done done)
    : Op(std::move(description), std::move(done)),
      channel_(std::move(channel)),
      job_(std::move(job)),
      finalize_(std::move(finalize)) {}

void ChannelOp::start(engine::Engine& engine) {
  auto channel = channel_.lock();
  if (!channel)
    throw std::runtime_error("commux: " + description() + ": the process group is gone");
  channel->enqueue(std::static_pointer_cast<ChannelOp>(shared_from_this()));
}

void ChannelOp::assist(std::chrono::steady_clock::time_point deadline) {
  if (auto channel = channel_.lock()) {
    channel->runFromWaiter(std::static_pointer_cast<ChannelOp>(shared_from_this()), deadline);
  }
}

void ChannelOp::onFailed() { withdraw(); }

void ChannelOp::withdraw() noexcept {
  if (ran_.load(std::memory_order_acquire)) return;
  // Failed because a member left before its part in it: every member fails it alike (the
  // channel's mark), and the collectives before it still complete; abandoning would break
  // those for the members still in them.
  if (auto channel = channel_.lock(); channel && channel->leftBefore(sequence()) < 0) {
    channel->abandon();
  }
}

void ChannelOp::prepare() {
  if (prepare_) prepare_();
}

void ChannelOp::finalize() {
  if (finalize_) finalize_();
}

}  // namespace commux::shm
