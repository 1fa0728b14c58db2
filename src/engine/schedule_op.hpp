#pragma once
// Executes a collectives::Schedule on a flat work buffer: does each step's local copies,
// posts its sends and receives, waits for all of them, folds Reduce-mode receives into the
// work buffer, and moves on. A finalizer (copy back to the user's tensors, AVG division)
// runs at the end, still under the worker lock, before the operation reports success.
// Host memory is folded here (core::fold); a front end whose buffers live on a GPU
// subclasses it to fold them there (c10d/tensor_schedule_op.hpp).
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "collectives/schedule.hpp"
#include "core/buffer.hpp"
#include "core/reduce.hpp"
#include "engine/op.hpp"
#include "engine/route.hpp"

namespace commux::engine {

class ScheduleOp : public Op {
 public:
  struct Setup {
    collectives::Schedule schedule;
    core::Buffer work;  // contiguous; its owner (or the subclass) keeps it alive
    /// When present (contiguous, work's type), sends read from here instead of from
    /// work: an all-to-all then sends from the user's input and receives into the user's
    /// output with no staging copy. Copies and steps that say Source::Work read work.
    core::Buffer sendBuffer;
    /// Where Reduce-mode receives land before they are folded: at least
    /// schedule.scratchElements of work's type, in work's memory. When absent the
    /// operation allocates host memory for it (device memory must come with the Setup).
    core::Buffer scratch;
    std::optional<core::ReduceOp> reduce;
    /// Routes by group rank; only the schedule's peers need to be filled in.
    std::vector<std::shared_ptr<const Route>> routes;
    std::uint32_t myContext = 0;
    int myRank = 0;
    std::uint32_t sequence = 0;
    /// Rounds wrap in the tag at this power of two (COMMUX_ROUND_WRAP; tests only).
    std::uint32_t roundWrap = 1u << 12;
    std::function<void()> finalize;
  };

  ScheduleOp(Setup setup, Description description, Done done);
  void start(Engine& engine) override;

 protected:
  void onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) override;
  /// Device memory: fold the step's Reduce-mode receives (receive j landed in scratch at
  /// element `scratchOffsets[j]`) into work. Return false when they are folded on return;
  /// true when the subclass goes on with nextStep(engine) itself once they are (the
  /// folds run on a GPU stream, and the worker is not held while the GPU works).
  virtual bool foldOnDevice(Engine& engine, const collectives::Step& step,
                            const std::vector<std::size_t>& scratchOffsets);
  /// Runs Setup::finalize (a subclass may run it in a context of its own).
  virtual void runFinalize() { s_.finalize(); }
  /// The current step is over: post the next one, or finish.
  void nextStep(Engine& engine);
  /// The fold of a reducing schedule.
  core::ReduceOp reduceKind() const { return *s_.reduce; }

 private:
  /// Runs the current step's copies and posts its transfers; steps of copies alone end at
  /// once, and the operation finishes after the last step.
  void postStep(Engine& engine);
  void copyStep(const collectives::Step& step);
  void finish();
  /// Folds the current step's Reduce-mode receives into the host work buffer.
  void foldOnHost(const collectives::Step& step);
  char* addressIn(const core::Buffer& buffer, std::size_t elementOffset) const;
  char* at(std::size_t elementOffset) const;
  char* sendAt(std::size_t elementOffset, collectives::Source source) const;

  Setup s_;
  std::unique_ptr<char[]> hostScratch_;  // when the Setup brought none
  std::size_t elementSize_;
  ucs_memory_type_t memory_;
  /// Rounds go into the tag modulo COMMUX_ROUND_WRAP (the launch checked that no step
  /// needs more; collectives/round_fit.hpp).
  std::uint32_t roundMask_;
  std::size_t step_ = 0;
  std::vector<std::size_t> scratchOffsets_;  // per receive of the current step
};

}  // namespace commux::engine
