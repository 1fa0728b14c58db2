#include "engine/schedule_op.hpp"

#include <cstring>

#include "core/error.hpp"
#include "core/fold.hpp"
#include "engine/engine.hpp"

namespace commux::engine {

ScheduleOp::ScheduleOp(Setup setup, Description description, Done done)
    : Op(std::move(description), std::move(done)),
      s_(std::move(setup)),
      elementSize_(s_.work.elementSize),
      memory_(s_.work.memory == core::MemoryType::Cuda ? UCS_MEMORY_TYPE_CUDA
                                                       : UCS_MEMORY_TYPE_HOST),
      roundMask_(s_.roundWrap - 1) {
  COMMUX_CHECK(s_.work.present(), Runtime, "commux: ", Op::description(),
               ": a collective needs a work buffer");
  if (memory_ == UCS_MEMORY_TYPE_CUDA) placeOnCudaDevice(s_.work.device);
  COMMUX_CHECK(s_.work.count >= s_.schedule.workElements, Runtime, "commux: ", Op::description(),
               ": the work buffer holds ", s_.work.count, " elements, the schedule needs ",
               s_.schedule.workElements);
  if (memory_ != UCS_MEMORY_TYPE_HOST) {
    for (const auto& step : s_.schedule.steps) {
      // Copies run as memcpy under the worker lock; on a GPU they would need a stream of
      // their own, as the folds have. The selection plans none for GPU buffers.
      COMMUX_CHECK(step.copies.empty(), Runtime, "commux: ", Op::description(),
                   ": this schedule copies locally, which needs host memory");
    }
  }
  if (s_.sendBuffer.present()) {
    COMMUX_CHECK(
        s_.sendBuffer.elementSize == elementSize_ && s_.sendBuffer.memory == s_.work.memory,
        Runtime, "commux: ", Op::description(),
        ": the send buffer differs from the work buffer in type or memory");
  }
  const std::size_t scratch = s_.schedule.scratchElements;
  if (scratch > 0 && !s_.scratch.present()) {
    COMMUX_CHECK(memory_ == UCS_MEMORY_TYPE_HOST, Runtime, "commux: ", Op::description(),
                 ": a collective on device memory needs scratch memory from its front end");
    // Not value-initialised: every byte is received before it is read.
    hostScratch_.reset(new char[scratch * elementSize_]);
    s_.scratch = s_.work;
    s_.scratch.data = hostScratch_.get();
    s_.scratch.count = scratch;
    s_.scratch.owner = nullptr;
  }
  COMMUX_CHECK(
      scratch == 0 || (s_.scratch.count >= scratch && s_.scratch.elementSize == elementSize_ &&
                       s_.scratch.memory == s_.work.memory),
      Runtime, "commux: ", Op::description(), ": the scratch buffer holds ", s_.scratch.count,
      " elements, the schedule needs ", scratch, " of the work buffer's type and memory");
}

char* ScheduleOp::addressIn(const core::Buffer& buffer, std::size_t elementOffset) const {
  // An empty buffer may have no storage at all; zero-length transfers need no address.
  if (buffer.count == 0) return nullptr;
  return buffer.bytePointer() + elementOffset * elementSize_;
}

char* ScheduleOp::at(std::size_t elementOffset) const { return addressIn(s_.work, elementOffset); }

char* ScheduleOp::sendAt(std::size_t elementOffset, collectives::Source source) const {
  const bool send = source == collectives::Source::Send && s_.sendBuffer.present();
  return addressIn(send ? s_.sendBuffer : s_.work, elementOffset);
}

void ScheduleOp::start(Engine& engine) { postStep(engine); }

void ScheduleOp::finish() {
  if (s_.finalize) runFinalize();
  succeed();
}

void ScheduleOp::copyStep(const collectives::Step& step) {
  for (const auto& c : step.copies) {
    if (c.count == 0) continue;  // the buffers may have no storage at all
    std::memcpy(at(c.to), sendAt(c.from, c.source), c.count * elementSize_);
  }
}

void ScheduleOp::postStep(Engine& engine) {
  for (;; ++step_) {
    if (step_ == s_.schedule.steps.size()) {
      finish();
      return;
    }
    const collectives::Step& step = s_.schedule.steps[step_];
    copyStep(step);
    if (!step.sends.empty() || !step.recvs.empty()) break;
  }
  const collectives::Step& step = s_.schedule.steps[step_];
  const auto sends = static_cast<std::uint32_t>(step.sends.size());
  for (std::uint32_t i = 0; i < sends; ++i) {
    const auto& t = step.sends[i];
    const Route& route = *s_.routes.at(t.peer);
    postSend(engine, engine.endpoint(route), sendAt(t.offset, step.sendSource),
             t.count * elementSize_,
             wire::collectiveTag(route.context, s_.myRank, s_.sequence, t.round & roundMask_), i,
             memory_);
  }
  scratchOffsets_.clear();
  std::size_t scratchOffset = 0;
  for (std::uint32_t j = 0; j < step.recvs.size(); ++j) {
    const auto& t = step.recvs[j];
    void* dest = at(t.offset);
    if (step.recvMode == collectives::RecvMode::Reduce) {
      dest = addressIn(s_.scratch, scratchOffset);
      scratchOffsets_.push_back(scratchOffset);
      scratchOffset += t.count;
    }
    postRecv(engine, dest, t.count * elementSize_,
             wire::collectiveTag(s_.myContext, static_cast<std::uint32_t>(t.peer), s_.sequence,
                                 t.round & roundMask_),
             wire::kCollectiveMask, sends + j, memory_);
  }
}

void ScheduleOp::onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) {
  const collectives::Step& step = s_.schedule.steps[step_];
  if (slot >= step.sends.size()) {
    const auto& t = step.recvs[slot - step.sends.size()];
    COMMUX_CHECK(info.length == t.count * elementSize_, InvalidArgument, "commux: ", description(),
                 ": message size mismatch: rank ", t.peer, " sent ", info.length, " bytes where ",
                 t.count * elementSize_,
                 " were expected; do all ranks pass tensors of the same size and dtype?");
  }
  if (outstanding() != 0) return;
  if (step.recvMode == collectives::RecvMode::Reduce) {
    if (memory_ == UCS_MEMORY_TYPE_HOST) {
      foldOnHost(step);
    } else if (foldOnDevice(engine, step, scratchOffsets_)) {
      return;  // the subclass goes on once the GPU folded
    }
  }
  nextStep(engine);
}

void ScheduleOp::nextStep(Engine& engine) {
  if (finished()) return;  // failed (timeout, abort, dead peer) while the GPU folded
  ++step_;
  postStep(engine);
}

void ScheduleOp::foldOnHost(const collectives::Step& step) {
  for (std::size_t j = 0; j < step.recvs.size(); ++j) {
    const auto& t = step.recvs[j];
    if (t.count == 0) continue;
    char* acc = at(t.offset);
    core::fold(acc, acc, addressIn(s_.scratch, scratchOffsets_[j]), t.count, s_.work, *s_.reduce);
  }
}

bool ScheduleOp::foldOnDevice(Engine& engine, const collectives::Step& step,
                              const std::vector<std::size_t>& scratchOffsets) {
  COMMUX_FAIL(Unsupported, "commux: ", description(),
              ": folding device memory needs a front end that folds on the device");
}

}  // namespace commux::engine
