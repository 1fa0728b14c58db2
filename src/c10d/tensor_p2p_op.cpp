#include "c10d/tensor_p2p_op.hpp"

#include <ATen/core/grad_mode.h>
#include <c10/core/StreamGuard.h>

#include "c10d/streams.hpp"
#include "c10d/tensor_buffer.hpp"

namespace commux {

namespace detail {

P2PTensors::P2PTensors(engine::P2POp::Kind kind, const std::vector<at::Tensor>& tensors) {
  staged.reserve(tensors.size());
  for (const auto& t : tensors) {
    if (t.is_contiguous()) {
      staged.push_back(t);
    } else {
      anyStaged = true;
      staged.push_back(kind == engine::P2POp::Kind::Send
                           ? t.contiguous()
                           : at::empty_like(t, at::MemoryFormat::Contiguous));
    }
  }
  if (anyStaged) targets.assign(tensors.begin(), tensors.end());
}

engine::P2POp::Buffers P2PTensors::views() const {
  engine::P2POp::Buffers buffers;
  buffers.reserve(staged.size());
  for (const auto& t : staged) buffers.push_back(viewOf(t));
  return buffers;
}

}  // namespace detail

TensorP2POp::TensorP2POp(Kind kind, const std::vector<at::Tensor>& tensors,
                         std::shared_ptr<const engine::Route> route, wire::Tag tag,
                         wire::Tag mask, bool pack, engine::Description description, Done done)
    : P2PTensors(kind, tensors),
      P2POp(kind, views(), std::move(route), tag, mask, pack, std::move(description),
            std::move(done)) {}

void TensorP2POp::received(std::size_t index) {
  if (!anyStaged || staged[index].is_same(targets[index])) return;  // nothing was staged
  const at::NoGradGuard noGrad;  // the target may require grad; the copy is not autograd's
  const c10::OptionalStreamGuard onCallersStream(toC10(userStream()));
  targets[index].copy_(staged[index]);
}

}  // namespace commux
