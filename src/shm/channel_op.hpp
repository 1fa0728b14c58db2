#pragma once
// A collective that runs through the group's shared-memory channel instead of UCX. To the
// engine it is an ordinary Op (so timeouts, abort and coalescing windows treat it like any
// other); starting it only queues it on the channel's lane, which runs the group's
// shared-memory collectives one after another, in issue order, and reports back through
// a finish submission (Submission::finish).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/op.hpp"
#include "shm/job.hpp"

namespace commux::shm {

class Channel;

class ChannelOp final : public engine::Op {
 public:
  ChannelOp(std::weak_ptr<Channel> channel, Job job, std::function<void()> finalize,
            engine::Description description, Done done);

  void start(engine::Engine& engine) override;
  /// Runs the collective on the waiting thread when it is next in line and the lane idles.
  void assist(std::chrono::steady_clock::time_point deadline) override;
  bool assists() const noexcept override { return true; }
  bool usesWorker() const noexcept override { return false; }
  void withdraw() noexcept override;
  /// Nobody, to a death notice: the channel fails the collective itself when a member dies
  /// (the death breaks the channel, and every wait of its steps looks), and lets it finish
  /// when what it waits for was done before the death. A peer that finished the same
  /// collective and then died must not fail it here: a barrier whose last step this rank
  /// had not yet seen failed so, under load (in CI, and 2 of 10 runs of CApi.shrink).
  bool awaits(int rank) const override { return false; }

  const Job& job() const noexcept { return job_; }
  /// A part of an operation made of parts (the group's HierarchicalOp): `whole` names it, so a
  /// waiter running the parts of its own collective treats them as its own; `prepare` runs
  /// on the lane before the steps (after the gate), in the channel's order.
  void setWhole(const void* whole, std::function<void()> prepare) {
    whole_ = whole;
    prepare_ = std::move(prepare);
  }
  const void* whole() const noexcept { return whole_; }
  /// Lane, before the steps.
  void prepare();
  /// Copies the result out to the user's tensors (lane thread, after the collective).
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
  Job job_;
  std::function<void()> finalize_;
  const void* whole_ = nullptr;
  std::function<void()> prepare_;
  std::atomic<bool> ran_{false};
};

}  // namespace commux::shm
