#include "group/hierarchical_op.hpp"

#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "shm/channel.hpp"
#include "shm/channel_op.hpp"

namespace commux::group {

HierarchicalOp::HierarchicalOp(engine::Description description, Done done)
    : Op(std::move(description), std::move(done)) {}

std::shared_ptr<HierarchicalOp> HierarchicalOp::make(std::weak_ptr<shm::Channel> channel, Plan plan,
                                                     engine::Description description, Done done) {
  std::shared_ptr<HierarchicalOp> op(new HierarchicalOp(description, std::move(done)));
  op->channel_ = channel;
  const std::weak_ptr<HierarchicalOp> self = op;
  // The parts report to the whole; they hold it weakly (it holds them).
  const auto reporter = [self](std::size_t index) {
    return [self, index](std::exception_ptr error, int) {
      if (auto whole = self.lock()) whole->partDone(index, std::move(error));
    };
  };
  if (plan.cross) {
    // The crossing starts when the lane reaches it and the lane goes on when it is over.
    shm::Job hold;
    hold.kind = shm::Kind::Hold;
    if (plan.before.empty()) plan.before.push_back(hold);
    if (plan.after.empty()) plan.after.push_back(hold);
    op->gate_ = std::make_shared<engine::DoneFlag>();
    plan.after.front().gate = op->gate_;
  }
  op->firstAfter_ = plan.before.size();
  const std::size_t parts = plan.before.size() + plan.after.size();
  for (auto* jobs : {&plan.before, &plan.after}) {
    for (auto& job : *jobs) {
      const std::size_t index = op->shm_.size();
      auto part = std::make_shared<shm::ChannelOp>(
          channel, std::move(job), index + 1 == parts ? std::move(plan.finalize) : nullptr,
          description, reporter(index));
      part->setWhole(op.get(), index == 0 ? std::move(plan.prepare) : nullptr);
      op->shm_.push_back(std::move(part));
    }
  }
  if (plan.cross) {
    op->beforeCross_ = std::move(plan.cross->before);
    op->refused_ = plan.cross->refused;
    if (!op->refused_) {
      try {
        op->cross_ = std::make_shared<engine::ScheduleOp>(std::move(plan.cross->setup),
                                                            description, reporter(kCross));
      } catch (...) {
        // Fails where the part would start, so this host's channel is abandoned.
        op->refused_ = std::current_exception();
      }
    }
  }
  op->remaining_ = op->shm_.size() + (plan.cross ? 1 : 0);
  return op;
}

void HierarchicalOp::start(engine::Engine& engine) {
  engine_ = &engine;
  // Every shared-memory part takes its place in the channel's order now.
  for (const auto& part : shm_) engine.startPart(part);
  if (remaining_ == 0) succeed();  // nothing to do (cannot happen with a real plan)
}

void HierarchicalOp::startCross() {
  if (refused_) {
    fail(*engine_, refused_);
    return;
  }
  try {
    if (beforeCross_) beforeCross_();
  } catch (...) {
    fail(*engine_, std::current_exception());
    return;
  }
  engine_->startPart(cross_);
}

void HierarchicalOp::partDone(std::size_t index, std::exception_ptr error) {
  if (finished()) return;
  if (error) {
    fail(*engine_, std::move(error));
    return;
  }
  --remaining_;
  if (index == kCross) {
    if (gate_) engine_->setDone(*gate_);
  } else if (index + 1 == firstAfter_ && (cross_ || refused_)) {
    startCross();
    if (finished()) return;
  }
  if (remaining_ == 0) succeed();
}

void HierarchicalOp::assist(std::chrono::steady_clock::time_point deadline) {
  // The last shared-memory part: the lane runs the parts before it first, in order.
  if (!shm_.empty()) shm_.back()->assist(deadline);
}

void HierarchicalOp::withdraw() noexcept {
  // As ChannelOp::withdraw: a member that left before its part fails it everywhere alike.
  if (auto channel = channel_.lock(); channel && channel->leftBefore(sequence()) < 0) {
    channel->abandon();
  }
}

void HierarchicalOp::onFailed() {
  withdraw();
  if (engine_ == nullptr) return;  // never started: no part was either
  const auto error = engine::commError("commux: " + description() +
                                       ": abandoned with the collective it is part of");
  for (const auto& part : shm_) part->fail(*engine_, error);
  if (cross_) cross_->fail(*engine_, error);
  // A part waiting at the gate sees its own failure at once instead of at its next look.
  if (gate_) engine_->setDone(*gate_);
}

}  // namespace commux::group
