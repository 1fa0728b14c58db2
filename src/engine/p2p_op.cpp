#include "engine/p2p_op.hpp"

#include "core/error.hpp"
#include "engine/engine.hpp"

namespace commux::engine {

P2POp::P2POp(Kind kind, Buffers buffers, std::shared_ptr<const Route> route, wire::Tag tag,
             wire::Tag mask, bool pack, Description description, Done done)
    : Op(std::move(description), std::move(done)),
      kind_(kind),
      buffers_(std::move(buffers)),
      route_(std::move(route)),
      tag_(tag),
      mask_(mask),
      pack_(pack),
      memory_(UCS_MEMORY_TYPE_HOST) {
  if (!buffers_.empty() && buffers_.front().memory == core::MemoryType::Cuda) {
    memory_ = UCS_MEMORY_TYPE_CUDA;
    placeOnCudaDevice(buffers_.front().device);
  }
  if (pack_) {
    for (const auto& b : buffers_) {
      packedBytes_ += b.bytes();
      // Empty pieces carry nothing (and may have no storage).
      if (b.bytes() != 0) iov_.push_back(ucp_dt_iov_t{address(b), b.bytes()});
    }
  }
}

void* P2POp::address(const core::Buffer& b) {
  // An empty buffer may have no storage at all; zero-length messages need no address.
  return b.bytes() == 0 ? nullptr : b.data;
}

void P2POp::start(Engine& engine) {
  if (pack_ && !iov_.empty()) {
    if (kind_ == Kind::Send) {
      postSend(engine, engine.endpoint(*route_), iov_.data(), iov_.size(), tag_, 0,
               memory_, ucp_dt_make_iov());
    } else {
      postRecv(engine, iov_.data(), iov_.size(), tag_, mask_, 0, memory_, ucp_dt_make_iov());
    }
    return;
  }
  if (pack_) {
    // Nothing to carry: UCX refuses an iov of no pieces, so the (equally packed) message
    // goes as zero contiguous bytes; the receiving side's iov of nothing takes it alike.
    if (kind_ == Kind::Send) {
      postSend(engine, engine.endpoint(*route_), nullptr, 0, tag_, 0, memory_);
    } else {
      postRecv(engine, nullptr, 0, tag_, mask_, 0, memory_);
    }
    return;
  }
  if (kind_ == Kind::Send) {
    ucp_ep_h ep = engine.endpoint(*route_);
    for (std::uint32_t i = 0; i < buffers_.size(); ++i) {
      postSend(engine, ep, address(buffers_[i]), buffers_[i].bytes(), tag_, i, memory_);
    }
  } else {
    for (std::uint32_t i = 0; i < buffers_.size(); ++i) {
      postRecv(engine, address(buffers_[i]), buffers_[i].bytes(), tag_, mask_, i, memory_);
    }
  }
  if (buffers_.empty()) succeed();
}

void P2POp::onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) {
  if (kind_ == Kind::Recv) {
    const std::size_t expected = pack_ ? packedBytes_ : buffers_[slot].bytes();
    if (info.length != expected || wire::isPacked(info.senderTag) != pack_) {
      std::string mismatch = packingMismatch(description(), pack_, info);
      if (mismatch.empty()) mismatch = sizeMismatch(description(), pack_, expected, info);
      COMMUX_FAIL(InvalidArgument, mismatch);
    }
    if (pack_) {
      for (std::size_t i = 0; i < buffers_.size(); ++i) received(i);
    } else {
      received(slot);
    }
    sourceRank_ = static_cast<int>(wire::sourceOf(info.senderTag));
  }
  if (outstanding() == 0) succeed(sourceRank_);
}

std::string P2POp::describeFailure(std::uint32_t slot, ucs_status_t status,
                                   const RecvInfo& info) const {
  if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    return truncatedMessage(description(), pack_, pack_ ? packedBytes_ : buffers_[slot].bytes(),
                            info);
  }
  return Op::describeFailure(slot, status, info);
}

std::string packingMismatch(const std::string& description, bool expectPacked,
                            const RecvInfo& info) {
  if (wire::isPacked(info.senderTag) == expectPacked) return {};
  const char* packed = "one coalesced (IOV-packed) message";
  const char* separate = "its tensors as separate messages";
  return "commux: " + description + ": rank " + std::to_string(wire::sourceOf(info.senderTag)) +
         " sent " + (expectPacked ? separate : packed) + " but this rank expects " +
         (expectPacked ? packed : "separate messages") +
         "; set COMMUX_COALESCE the same way on every rank";
}

std::string sizeMismatch(const std::string& description, bool expectPacked, std::size_t capacity,
                         const RecvInfo& info) {
  return "commux: " + description + ": message size mismatch: the matching message from rank " +
         std::to_string(wire::sourceOf(info.senderTag)) + " has " + std::to_string(info.length) +
         " bytes but the receive " + (expectPacked ? "tensors hold " : "tensor holds ") +
         std::to_string(capacity) + " bytes";
}

std::string truncatedMessage(const std::string& description, bool expectPacked,
                             std::size_t capacity, const RecvInfo& info) {
  // UCX reports the sender's tag with a truncated message, so a format mismatch (the likely
  // cause when a packed message meets a single tensor) is named as such.
  if (info.senderTag != 0) {
    std::string mismatch = packingMismatch(description, expectPacked, info);
    if (!mismatch.empty()) return mismatch;
  }
  // UCX reports the incoming message's whole length with the truncation.
  const std::string sent =
      info.length > capacity ? " (" + std::to_string(info.length) + " bytes)" : "";
  return "commux: " + description + ": message size mismatch: the matching message" + sent +
         " is larger than the receive " + (expectPacked ? "tensors (" : "tensor (") +
         std::to_string(capacity) + " bytes); it was truncated and dropped";
}

}  // namespace commux::engine
