// ProcessGroupUCX::sendBlocking / recvBlocking: point-to-point with no Work, for callers
// that wait at once (engine/blocking_transfer.hpp says how it moves).
#include <c10/util/Exception.h>

#include <algorithm>

#include "group/peer_table.hpp"
#include "c10d/validation.hpp"
#include "c10d/work_ucx.hpp"
#include "commux/process_group_ucx.hpp"
#include "group/group.hpp"
#include "core/group_health.hpp"
#include "engine/blocking_transfer.hpp"
#include "engine/description.hpp"
#include "engine/engine.hpp"
#include "engine/p2p_op.hpp"
#include "wire/tag.hpp"

namespace commux {
namespace {

// A blocked caller's wait looks at the group this often: an abort or a peer's death ends it
// within this (an ordinary Work is failed by the group itself, which knows no blocking call).
constexpr std::chrono::milliseconds kLookEvery{100};

// What the path on the caller's thread can move: contiguous host memory, one message. The
// rest (CUDA stream ordering, staging of strided tensors, validation errors) is the
// ordinary path's.
bool onCallersThread(const at::Tensor& t) {
  return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() && t.is_contiguous();
}

void* dataOf(const at::Tensor& t) { return t.numel() == 0 ? nullptr : t.data_ptr(); }

}  // namespace

void ProcessGroupUCX::sendBlocking(const at::Tensor& tensor, int dstRank, int tag) {
  if (onCallersThread(tensor) && !group_->batching()) {
    checkUsable();
    checkTag("send", tag);
    checkPeer("send", "destination", dstRank, size_);
    const auto route = group_->peers().get(dstRank, "a send to it");
    const std::size_t bytes = tensor.nbytes();
    {
      // As the ordinary path: a dead peer receives nothing, so a send to it fails now.
      const std::string why = group_->deadWhy(dstRank);
      if (!why.empty()) {
        C10_THROW_ERROR(
            DistBackendError,
            "commux: " + engine::Description::p2p("send", "to", dstRank, tag, bytes, 1).str() +
                ": rank " + std::to_string(dstRank) + " died (" + why +
                "); operations with it fail from now on");
      }
    }
    engine::BlockingTransfer transfer(group_->engine());
    if (transfer.sendIfFree(*route, dataOf(tensor), bytes,
                            wire::p2pTag(route->context, static_cast<std::uint32_t>(rank_),
                                         static_cast<std::uint32_t>(tag)))) {
      finishBlocking(transfer, true, dstRank, tag, bytes);
      return;
    }
  }
  std::vector<at::Tensor> tensors{tensor};
  send(tensors, dstRank, tag)->wait();
}

void ProcessGroupUCX::recvBlocking(const at::Tensor& tensor, int srcRank, int tag) {
  if (onCallersThread(tensor) && !group_->batching()) {
    checkUsable();
    checkTag("recv", tag);
    checkPeer("recv", "source", srcRank, size_);
    group_->peers().get(srcRank, "a receive from it");  // watched from now on
    const std::size_t bytes = tensor.nbytes();
    engine::BlockingTransfer transfer(group_->engine());
    if (transfer.recvIfFree(dataOf(tensor), bytes,
                            wire::p2pTag(group_->context(), static_cast<std::uint32_t>(srcRank),
                                         static_cast<std::uint32_t>(tag)),
                            wire::kExactMask)) {
      finishBlocking(transfer, false, srcRank, tag, bytes);
      return;
    }
  }
  std::vector<at::Tensor> tensors{tensor};
  recv(tensors, srcRank, tag)->wait();
}

void ProcessGroupUCX::finishBlocking(engine::BlockingTransfer& transfer, bool isSend, int peer,
                                     int tag, std::size_t bytes) {
  // Formatted only for an error.
  const auto describe = [&] {
    return engine::Description::p2p(isSend ? "send" : "recv", isSend ? "to" : "from", peer, tag,
                                    bytes, 1)
        .str();
  };
  const auto deadWhy = [&]() -> std::string {
    return group_->deadWhy(peer);
  };
  if (!transfer.ended()) {
    const auto limit = timeout_;
    std::string stopped;  // why the wait ended before the transfer did
    const auto interrupted = [&] {
      using State = group::Group::State;
      const State s = group_->state();
      if (s != State::Running) {
        stopped = std::string("the group was ") + (s == State::Aborted ? "aborted" : "shut down");
      } else if (std::string why = deadWhy(); !why.empty()) {
        stopped = "rank " + std::to_string(peer) + " died (" + why + ")";
      }
      return !stopped.empty();
    };
    const auto end = transfer.waitUnless(std::chrono::steady_clock::now() + limit, interrupted,
                                         kLookEvery);
    if (end != engine::Engine::WaitEnd::Done) {
      if (stopped.empty()) {
        // "Timed out" in Gloo's words, as WorkUCX::wait says it.
        stopped = "Timed out after " + std::to_string(limit.count()) +
                  " ms; the operation was cancelled and the group stays usable";
      }
      // What arrived before the cancel still completes it, as a Work's failAfterDraining.
      if (!transfer.cancel(kCancelWait) || transfer.status() != UCS_OK) {
        C10_THROW_ERROR(DistBackendError, "commux: " + describe() + ": " + stopped);
      }
    }
  }
  const ucs_status_t status = transfer.status();
  const engine::RecvInfo& info = transfer.info();
  if (status == UCS_OK) {
    if (isSend || (info.length == bytes && !wire::isPacked(info.senderTag))) return;
    std::string mismatch = engine::packingMismatch(describe(), false, info);
    if (mismatch.empty()) mismatch = engine::sizeMismatch(describe(), false, bytes, info);
    C10_THROW_ERROR(ValueError, mismatch);
  }
  if (status == UCS_ERR_CANCELED) {
    // Only the engine's teardown cancels without this wait's knowing (at process exit).
    C10_THROW_ERROR(DistBackendError, "commux: " + describe() +
                                          ": the process group was shut down with this "
                                          "operation in flight");
  }
  if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    C10_THROW_ERROR(DistBackendError, engine::truncatedMessage(describe(), false, bytes, info));
  }
  if (std::string why = deadWhy(); !why.empty()) {
    C10_THROW_ERROR(DistBackendError, "commux: " + describe() + ": rank " + std::to_string(peer) +
                                          " died (" + why + ")");
  }
  C10_THROW_ERROR(DistBackendError,
                  "commux: " + describe() + " failed: " + ucs_status_string(status));
}

}  // namespace commux
