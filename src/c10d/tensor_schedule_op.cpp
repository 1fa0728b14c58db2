#include "c10d/tensor_schedule_op.hpp"

#include <ATen/core/grad_mode.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "c10d/aten_fold.hpp"
#include "c10d/streams.hpp"
#include "c10d/tensor_buffer.hpp"
#include "engine/engine.hpp"

namespace commux {

namespace detail {

CollectiveTensors::CollectiveTensors(at::Tensor work_, at::Tensor sendBuffer_,
                                     std::size_t scratchElements)
    : work(std::move(work_)), sendBuffer(std::move(sendBuffer_)) {
  // On the caller's thread (and so on its stream, for the caching allocator).
  if (scratchElements > 0) {
    scratch = at::empty({static_cast<int64_t>(scratchElements)}, work.options());
  }
}

engine::ScheduleOp::Setup CollectiveTensors::views(engine::ScheduleOp::Setup setup) const {
  setup.work = viewOf(work);
  setup.sendBuffer = viewOf(sendBuffer);
  setup.scratch = viewOf(scratch);
  return setup;
}

}  // namespace detail

namespace {
std::size_t scratchOf(const engine::ScheduleOp::Setup& setup) {
  return setup.schedule.scratchElements;
}
}  // namespace

TensorScheduleOp::TensorScheduleOp(Setup setup, at::Tensor work, at::Tensor sendBuffer,
                                   engine::Description description, Done done)
    : CollectiveTensors(std::move(work), std::move(sendBuffer), scratchOf(setup)),
      ScheduleOp(views(std::move(setup)), std::move(description), std::move(done)) {}

bool TensorScheduleOp::foldOnDevice(engine::Engine& engine, const collectives::Step& step,
                                    const std::vector<std::size_t>& scratchOffsets) {
  // The folds run on a stream of their own, and finish before the next step's sends read
  // the buffer (UCX copies on its own streams). The caller's stream would also order them,
  // but would make this thread wait for whatever the caller queued since.
  if (!foldStream_) {
    foldStream_ =
        c10::impl::getDeviceGuardImpl(work.device().type())->getStreamFromGlobalPool(work.device());
  }
  {
    const c10::StreamGuard onFoldStream(*foldStream_);
    for (std::size_t j = 0; j < step.recvs.size(); ++j) {
      const auto& t = step.recvs[j];
      if (t.count == 0) continue;
      const auto count = static_cast<int64_t>(t.count);
      reduceInto(work.narrow(0, static_cast<int64_t>(t.offset), count),
                 scratch.narrow(0, static_cast<int64_t>(scratchOffsets[j]), count), reduceKind());
    }
  }
  // The next step's sends read the folded buffer, so go on once the fold stream got
  // there, without holding the worker (and every other operation of the process) while
  // the GPU works.
  engine.continueAfter(toCore(*foldStream_), shared_from_this(),
                       [self = std::static_pointer_cast<TensorScheduleOp>(shared_from_this())](
                           engine::Engine& e) { self->nextStep(e); });
  return true;
}

void TensorScheduleOp::runFinalize() {
  const at::NoGradGuard noGrad;
  const c10::OptionalStreamGuard onCallersStream(toC10(userStream()));
  ScheduleOp::runFinalize();
}

}  // namespace commux
