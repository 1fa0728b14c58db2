#include "engine/p2p_op.hpp"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include "engine/engine.hpp"

namespace commux::engine {

P2POp::P2POp(Kind kind, std::vector<at::Tensor> tensors, Route route, wire::Tag tag,
             wire::Tag mask, std::string description, Done done)
    : Op(std::move(description), std::move(done)),
      kind_(kind),
      route_(std::move(route)),
      tag_(tag),
      mask_(mask) {
  buffers_.reserve(tensors.size());
  for (auto& t : tensors) {
    at::Tensor staged = t.is_contiguous() ? t : (kind == Kind::Send ? t.contiguous() : at::empty_like(t, at::MemoryFormat::Contiguous));
    const std::size_t bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
    buffers_.push_back(Buffer{std::move(t), std::move(staged), bytes});
  }
}

void* P2POp::address(const Buffer& b) {
  // An empty tensor may have no storage at all; zero-length messages need no address.
  return b.bytes == 0 ? nullptr : b.staged.data_ptr();
}

void P2POp::start(Engine& engine) {
  if (kind_ == Kind::Send) {
    ucp_ep_h ep = engine.endpoint(route_.address);
    for (std::uint32_t i = 0; i < buffers_.size(); ++i) {
      postSend(engine, ep, address(buffers_[i]), buffers_[i].bytes, tag_, i);
    }
  } else {
    for (std::uint32_t i = 0; i < buffers_.size(); ++i) {
      postRecv(engine, address(buffers_[i]), buffers_[i].bytes, tag_, mask_, i);
    }
  }
  if (buffers_.empty()) succeed();
}

void P2POp::onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) {
  if (kind_ == Kind::Recv) {
    const Buffer& b = buffers_[slot];
    const int source = static_cast<int>(wire::sourceOf(info.senderTag));
    if (wire::isPacked(info.senderTag)) {
      TORCH_CHECK_VALUE(false, "commux: ", description(), ": rank ", source,
                        " sent a coalesced (IOV-packed) message; set COMMUX_COALESCE the "
                        "same way on every rank");
    }
    TORCH_CHECK_VALUE(info.length == b.bytes, "commux: ", description(),
                      ": message size mismatch: the matching message from rank ", source,
                      " has ", info.length, " bytes but the receive tensor holds ", b.bytes,
                      " bytes");
    if (!b.staged.is_same(b.target)) {
      const at::NoGradGuard noGrad;  // the target may require grad; the copy is not autograd's
      b.target.copy_(b.staged);
    }
    sourceRank_ = source;
  }
  if (outstanding() == 0) succeed(sourceRank_);
}

std::string P2POp::describeFailure(std::uint32_t slot, ucs_status_t status,
                                   const RecvInfo& info) const {
  if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    return "commux: " + description() + ": message size mismatch: the matching message is " +
           "larger than the receive tensor (" + std::to_string(buffers_[slot].bytes) +
           " bytes); it was truncated and dropped";
  }
  return Op::describeFailure(slot, status, info);
}

}  // namespace commux::engine
