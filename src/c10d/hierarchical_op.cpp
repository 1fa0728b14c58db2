#include "c10d/hierarchical_op.hpp"

#include <ATen/core/grad_mode.h>

#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "shm/collective_op.hpp"

namespace commux {

HierarchicalOp::HierarchicalOp(engine::Description description, Done done)
    : Op(std::move(description), std::move(done)) {}

std::shared_ptr<HierarchicalOp> HierarchicalOp::make(std::weak_ptr<shm::Channel> channel, Plan plan,
                                                     engine::Description description, Done done) {
  std::shared_ptr<HierarchicalOp> op(new HierarchicalOp(description, std::move(done)));
  const std::weak_ptr<HierarchicalOp> self = op;
  // The parts report to the whole; they hold it weakly (it holds them).
  const auto reporter = [self](std::size_t index) {
    return [self, index](std::exception_ptr error, int) {
      if (auto whole = self.lock()) whole->partDone(index, std::move(error));
    };
  };
  if (plan.cross && !plan.after.empty()) {
    op->gate_ = std::make_shared<engine::DoneFlag>();
    plan.after.front().gate = op->gate_;
  }
  op->firstAfter_ = plan.before.size();
  for (auto* jobs : {&plan.before, &plan.after}) {
    for (auto& job : *jobs) {
      const std::size_t index = op->shm_.size();
      op->shm_.push_back(std::make_shared<shm::CollectiveOp>(channel, std::move(job), nullptr,
                                                             description, reporter(index)));
    }
  }
  if (plan.cross) {
    op->beforeCross_ = std::move(plan.cross->before);
    op->refused_ = plan.cross->refused;
    if (!op->refused_) {
      op->cross_ = std::make_shared<engine::CollectiveOp>(std::move(plan.cross->setup), description,
                                                          reporter(kCross));
    }
  }
  op->finalize_ = std::move(plan.finalize);
  op->remaining_ = op->shm_.size() + (plan.cross ? 1 : 0);
  return op;
}

void HierarchicalOp::start(engine::Engine& engine) {
  engine_ = &engine;
  // Every shared-memory part takes its place in the channel's order now.
  for (const auto& part : shm_) engine.startPart(part);
  if (firstAfter_ == 0 && (cross_ || refused_) && !finished()) startCross();
  if (remaining_ == 0) succeed();  // nothing to do (cannot happen with a real plan)
}

void HierarchicalOp::startCross() {
  if (refused_) {
    fail(*engine_, refused_);
    return;
  }
  try {
    if (beforeCross_) {
      const at::NoGradGuard noGrad;
      beforeCross_();
    }
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
  if (remaining_ != 0) return;
  try {
    if (finalize_) {
      const at::NoGradGuard noGrad;
      finalize_();
    }
  } catch (...) {
    fail(*engine_, std::current_exception());
    return;
  }
  succeed();
}

void HierarchicalOp::assist(std::chrono::steady_clock::time_point deadline) {
  // The last shared-memory part: the lane runs the parts before it first, in order.
  if (!shm_.empty()) shm_.back()->assist(deadline);
}

void HierarchicalOp::onFailed() {
  if (engine_ == nullptr) return;  // never started: no part was either
  const auto error = engine::commError("commux: " + description() +
                                       ": abandoned with the collective it is part of");
  for (const auto& part : shm_) part->fail(*engine_, error);
  if (cross_) cross_->fail(*engine_, error);
  // A part waiting at the gate sees its own failure at once instead of at its next look.
  if (gate_) engine_->setDone(*gate_);
}

}  // namespace commux
