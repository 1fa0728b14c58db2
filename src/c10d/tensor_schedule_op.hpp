#pragma once
// A UCX collective over tensors: the engine's ScheduleOp over their bytes, holding the
// tensors (and its scratch, from torch's allocator) for as long as it lives. On a GPU it
// folds with ATen on a pool stream of its own; its finalizer runs outside autograd, on the
// caller's stream.
#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include <optional>

#include "engine/schedule_op.hpp"

namespace commux {

namespace detail {
// Constructed before the ScheduleOp base, which takes views of its tensors.
struct CollectiveTensors {
  CollectiveTensors(at::Tensor work, at::Tensor sendBuffer, std::size_t scratchElements);
  /// `setup` with views of the tensors as its work, send and scratch buffers.
  engine::ScheduleOp::Setup views(engine::ScheduleOp::Setup setup) const;

  at::Tensor work;        // 1-D contiguous
  at::Tensor sendBuffer;  // undefined, or 1-D contiguous of work's dtype
  at::Tensor scratch;     // undefined when the schedule folds nothing
};
}  // namespace detail

class TensorScheduleOp final : private detail::CollectiveTensors, public engine::ScheduleOp {
 public:
  /// `setup`'s buffers are filled in from `work` and `sendBuffer`.
  TensorScheduleOp(Setup setup, at::Tensor work, at::Tensor sendBuffer,
                   engine::Description description, Done done);

 protected:
  bool foldOnDevice(engine::Engine& engine, const collectives::Step& step,
                    const std::vector<std::size_t>& scratchOffsets) override;
  /// Finalizers copy into user tensors that may require grad; that is not autograd's.
  void runFinalize() override;

 private:
  std::optional<c10::Stream> foldStream_;
};

}  // namespace commux
