#pragma once
// The c10d side of a shared-memory job: the same fields as shm::Job, holding tensors, which
// the collectives' entry points fill; toCore() makes the channel's job of them at launch,
// each buffer keeping its tensor alive (peers may read it in place, through CMA, until the
// lane is done with it).
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <vector>

#include "shm/job.hpp"

namespace commux {

struct TensorJob {
  shm::Kind kind = shm::Kind::Barrier;
  int root = 0;
  core::ReduceOp reduce = core::ReduceOp::Sum;
  at::Tensor buffer;
  at::Tensor input;
  at::Tensor output;
  std::vector<std::size_t> sendCounts;
  std::vector<std::size_t> recvCounts;
  std::shared_ptr<engine::DoneFlag> gate;
};

/// The channel's job: each tensor (contiguous, CPU) as a core buffer, an undefined one as
/// no buffer; the buffers' owners keep the tensors alive together.
shm::Job toCore(TensorJob&& job);

/// `f` run under a NoGradGuard (null stays null): the channel runs closures of the adapter's
/// on its lane, whose tensors may require grad; communication is not autograd's business.
std::function<void()> withoutGrad(std::function<void()> f);

}  // namespace commux
