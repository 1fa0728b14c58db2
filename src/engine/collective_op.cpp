#include "engine/collective_op.hpp"

#include <ATen/core/grad_mode.h>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstring>

#include "core/error.hpp"
#include "engine/engine.hpp"
#include "engine/memory.hpp"

namespace commux::engine {

CollectiveOp::CollectiveOp(Setup setup, Description description, Done done)
    : Op(std::move(description), std::move(done)),
      s_(std::move(setup)),
      elementSize_(static_cast<std::size_t>(s_.work.element_size())),
      memory_(memoryTypeOf(s_.work)),
      roundMask_(s_.roundWrap - 1) {
  if (memory_ == UCS_MEMORY_TYPE_CUDA) cudaDevice_ = s_.work.device();
  COMMUX_CHECK(static_cast<std::size_t>(s_.work.numel()) >= s_.schedule.workElements, Runtime,
               "commux: ", Op::description(), ": the work buffer holds ", s_.work.numel(),
               " elements, the schedule needs ", s_.schedule.workElements);
  if (memory_ != UCS_MEMORY_TYPE_HOST) {
    for (const auto& step : s_.schedule.steps) {
      // Copies run as memcpy under the worker lock; on a GPU they would need a stream of
      // their own, as the folds have. The selection plans none for GPU buffers.
      COMMUX_CHECK(step.copies.empty(), Runtime, "commux: ", Op::description(),
                   ": this schedule copies locally, which needs host memory");
    }
  }
  if (s_.schedule.scratchElements > 0) {
    scratch_ = at::empty({static_cast<int64_t>(s_.schedule.scratchElements)}, s_.work.options());
  }
}

char* CollectiveOp::addressIn(const at::Tensor& buffer, std::size_t elementOffset) const {
  // An empty tensor may have no storage at all; zero-length transfers need no address.
  if (buffer.numel() == 0) return nullptr;
  return static_cast<char*>(buffer.data_ptr()) + elementOffset * elementSize_;
}

char* CollectiveOp::at(std::size_t elementOffset) const { return addressIn(s_.work, elementOffset); }

char* CollectiveOp::sendAt(std::size_t elementOffset, collectives::Source source) const {
  const bool send = source == collectives::Source::Send && s_.sendBuffer.defined();
  return addressIn(send ? s_.sendBuffer : s_.work, elementOffset);
}

void CollectiveOp::start(Engine& engine) { postStep(engine); }

void CollectiveOp::finish() {
  if (s_.finalize) finalizeOutsideAutograd();
  succeed();
}

void CollectiveOp::copyStep(const collectives::Step& step) {
  for (const auto& c : step.copies) {
    if (c.count == 0) continue;  // the buffers may have no storage at all
    std::memcpy(at(c.to), sendAt(c.from, c.source), c.count * elementSize_);
  }
}

void CollectiveOp::postStep(Engine& engine) {
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
      dest = scratch_.defined() && scratch_.numel() > 0
                 ? static_cast<char*>(scratch_.data_ptr()) + scratchOffset * elementSize_
                 : nullptr;
      scratchOffsets_.push_back(scratchOffset);
      scratchOffset += t.count;
    }
    postRecv(engine, dest, t.count * elementSize_,
             wire::collectiveTag(s_.myContext, static_cast<std::uint32_t>(t.peer), s_.sequence,
                                 t.round & roundMask_),
             wire::kCollectiveMask, sends + j, memory_);
  }
}

void CollectiveOp::onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) {
  const collectives::Step& step = s_.schedule.steps[step_];
  if (slot >= step.sends.size()) {
    const auto& t = step.recvs[slot - step.sends.size()];
    COMMUX_CHECK(info.length == t.count * elementSize_, InvalidArgument, "commux: ", description(),
                 ": message size mismatch: rank ", t.peer, " sent ", info.length, " bytes where ",
                 t.count * elementSize_,
                 " were expected; do all ranks pass tensors of the same size and dtype?");
  }
  if (outstanding() != 0) return;
  if (foldStep()) {
    // The GPU folds on a stream of our own; the next step's sends read the folded buffer
    // (UCX copies on its own streams), so go on once that stream got there, without
    // holding the worker (and every other operation of the process) while the GPU works.
    engine.continueAfter(*foldStream_, shared_from_this(),
                         [self = std::static_pointer_cast<CollectiveOp>(shared_from_this())](
                             Engine& e) { self->nextStep(e); });
    return;
  }
  nextStep(engine);
}

void CollectiveOp::nextStep(Engine& engine) {
  if (finished()) return;  // failed (timeout, abort, dead peer) while the GPU folded
  ++step_;
  postStep(engine);
}

void CollectiveOp::finalizeOutsideAutograd() {
  const at::NoGradGuard noGrad;
  const c10::OptionalStreamGuard onCallersStream(userStream());
  s_.finalize();
}

bool CollectiveOp::foldStep() {
  const collectives::Step& step = s_.schedule.steps[step_];
  if (step.recvMode != collectives::RecvMode::Reduce) return false;
  // On a GPU the folds run on a stream of their own, and finish before the next step's
  // sends read the buffer (UCX copies on its own streams). The caller's stream would also
  // order them, but would make this thread wait for whatever the caller queued since.
  std::optional<c10::StreamGuard> onFoldStream;
  if (s_.work.is_cuda()) {
    if (!foldStream_) {
      foldStream_ = c10::impl::getDeviceGuardImpl(s_.work.device().type())
                        ->getStreamFromGlobalPool(s_.work.device());
    }
    onFoldStream.emplace(*foldStream_);
  }
  for (std::size_t j = 0; j < step.recvs.size(); ++j) {
    const auto& t = step.recvs[j];
    if (t.count == 0) continue;
    const auto count = static_cast<int64_t>(t.count);
    if (!s_.work.is_cuda()) {
      const std::size_t es = s_.work.element_size();
      char* acc = static_cast<char*>(s_.work.data_ptr()) + t.offset * es;
      char* in = static_cast<char*>(scratch_.data_ptr()) + scratchOffsets_[j] * es;
      if (reduceRaw(acc, in, t.count, s_.work.scalar_type(), *s_.reduce)) continue;
    }
    reduceInto(s_.work.narrow(0, static_cast<int64_t>(t.offset), count),
               scratch_.narrow(0, static_cast<int64_t>(scratchOffsets_[j]), count), *s_.reduce);
  }
  return foldStream_.has_value();
}

}  // namespace commux::engine
