#pragma once
// Executes a collectives::Schedule on a flat work buffer: does each step's local copies,
// posts its sends and receives, waits for all of them, folds Reduce-mode receives into the
// work buffer, and moves on. A finalizer (copy back to the user's tensors, AVG division)
// runs at the end, still under the worker lock, before the operation reports success.
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "collectives/schedule.hpp"
#include "engine/op.hpp"
#include "engine/reduce_kernels.hpp"
#include "engine/route.hpp"

namespace commux::engine {

class CollectiveOp final : public Op {
 public:
  struct Setup {
    collectives::Schedule schedule;
    at::Tensor work;  // 1-D contiguous
    /// When defined (1-D contiguous, work's dtype), sends read from here instead of from
    /// work: an all-to-all then sends from the user's input and receives into the user's
    /// output with no staging copy. Copies and steps that say Source::Work read work.
    at::Tensor sendBuffer;
    std::optional<ReduceKind> reduce;
    /// Routes by group rank; only the schedule's peers need to be filled in.
    std::vector<std::shared_ptr<const Route>> routes;
    std::uint32_t myContext = 0;
    int myRank = 0;
    std::uint32_t sequence = 0;
    /// Rounds wrap in the tag at this power of two (COMMUX_ROUND_WRAP; tests only).
    std::uint32_t roundWrap = 1u << 12;
    std::function<void()> finalize;
  };

  CollectiveOp(Setup setup, Description description, Done done);
  void start(Engine& engine) override;

 protected:
  void onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) override;

 private:
  /// Runs the current step's copies and posts its transfers; steps of copies alone end at
  /// once, and the operation finishes after the last step.
  void postStep(Engine& engine);
  void copyStep(const collectives::Step& step);
  void finish();
  /// Folds the current step's Reduce-mode receives into the work buffer. True when the
  /// folds were queued on a CUDA stream (the step is over once that stream gets there).
  bool foldStep();
  /// The current step is over: post the next one, or finish.
  void nextStep(Engine& engine);
  /// Finalizers copy into user tensors that may require grad; that is not autograd's.
  void finalizeOutsideAutograd();
  char* addressIn(const at::Tensor& buffer, std::size_t elementOffset) const;
  char* at(std::size_t elementOffset) const;
  char* sendAt(std::size_t elementOffset, collectives::Source source) const;

  Setup s_;
  at::Tensor scratch_;
  std::size_t elementSize_;
  ucs_memory_type_t memory_;
  /// Rounds go into the tag modulo COMMUX_ROUND_WRAP (the launch checked that no step
  /// needs more; collectives/round_fit.hpp).
  std::uint32_t roundMask_;
  std::optional<c10::Stream> foldStream_;  // CUDA work buffers only
  std::size_t step_ = 0;
  std::vector<std::size_t> scratchOffsets_;  // per receive of the current step
};

}  // namespace commux::engine
