#include "group/device_schedule_op.hpp"

#include "engine/engine.hpp"
#include "group/device_memory.hpp"

namespace commux::group {

namespace detail {

DeviceScratch::DeviceScratch(const core::Buffer& work_, std::size_t scratchElements) : work(work_) {
  if (scratchElements > 0) scratch = bufferLike(work, scratchElements);
}

engine::ScheduleOp::Setup DeviceScratch::with(engine::ScheduleOp::Setup setup) const {
  if (scratch.present()) setup.scratch = scratch;
  return setup;
}

}  // namespace detail

DeviceScheduleOp::DeviceScheduleOp(Setup setup, const core::Stream& caller,
                                   engine::Description description, Done done)
    : DeviceScratch(setup.work, setup.schedule.scratchElements),
      ScheduleOp(with(std::move(setup)), std::move(description), std::move(done)) {
  setUserStream(caller);
}

bool DeviceScheduleOp::foldOnDevice(engine::Engine& engine, const collectives::Step& step,
                                    const std::vector<std::size_t>& scratchOffsets) {
  if (!foldStream) foldStream.emplace(work.device);
  const std::size_t es = work.elementSize;
  for (std::size_t j = 0; j < step.recvs.size(); ++j) {
    const auto& t = step.recvs[j];
    if (t.count == 0) continue;
    char* acc = work.bytePointer() + t.offset * es;
    cuda::foldOnStream(acc, acc, scratch.bytePointer() + scratchOffsets[j] * es, t.count,
                       work.dtype, reduceKind(), foldStream->stream());
  }
  // The next step's sends read the folded buffer: go on once the fold stream got there,
  // without holding the worker while the GPU works.
  engine.continueAfter(foldStream->stream(), shared_from_this(),
                       [self = std::static_pointer_cast<DeviceScheduleOp>(shared_from_this())](
                           engine::Engine& e) { self->nextStep(e); });
  return true;
}

}  // namespace commux::group
