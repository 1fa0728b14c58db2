#pragma once
// An allreduce that runs through the group's shared-memory channel instead of UCX. To the
// engine it is an ordinary Op (so timeouts, abort and coalescing windows treat it like any
// other); starting it only queues it on the channel's lane, which runs the group's
// shared-memory collectives one after another, in issue order, and reports back through
// Engine::finish.
#include <ATen/ATen.h>

#include <atomic>
#include <functional>
#include <memory>

#include "engine/op.hpp"
#include "engine/reduce_kernels.hpp"

namespace commux::shm {

class Channel;

class AllreduceOp final : public engine::Op {
 public:
  AllreduceOp(std::weak_ptr<Channel> channel, at::Tensor work, engine::ReduceKind kind,
              std::function<void()> finalize, std::string description, Done done);

  void start(engine::Engine& engine) override;
  /// Runs the allreduce on the waiting thread when it is next in line and the lane idles.
  void assist(std::chrono::steady_clock::time_point deadline) override;

  /// 1-D contiguous CPU buffer, reduced in place.
  const at::Tensor& work() const noexcept { return work_; }
  engine::ReduceKind kind() const noexcept { return kind_; }
  /// Copies the result out to the user's tensors (lane thread, after the reduction).
  void finalize();
  /// The lane is done with it: a failure reported from now on needs no clean-up.
  void markRan() noexcept { ran_.store(true, std::memory_order_release); }

 protected:
  void onComplete(engine::Engine& engine, std::uint32_t slot,
                  const engine::RecvInfo& info) override {}
  /// Timed out or aborted before the lane finished it: the peers must stop waiting for
  /// this rank now, not when the lane next looks.
  void onFailed() override;

 private:
  std::weak_ptr<Channel> channel_;
  at::Tensor work_;
  engine::ReduceKind kind_;
  std::function<void()> finalize_;
  std::atomic<bool> ran_{false};
};

}  // namespace commux::shm
