// ProcessGroupUCX::sendBlocking / recvBlocking: point-to-point with no Work, for callers
// that wait at once (group/blocking_p2p.hpp: the core's path, on the caller's thread).
#include "c10d/validation.hpp"
#include "c10d/work_ucx.hpp"
#include "commux/process_group_ucx.hpp"
#include "group/blocking_p2p.hpp"
#include "group/group.hpp"

namespace commux {
namespace {

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
    if (group::sendBlocking(*group_, dataOf(tensor), tensor.nbytes(), dstRank, tag, timeout_)) {
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
    if (group::recvBlocking(*group_, dataOf(tensor), tensor.nbytes(), srcRank, tag, timeout_)) {
      return;
    }
  }
  std::vector<at::Tensor> tensors{tensor};
  recv(tensors, srcRank, tag)->wait();
}

}  // namespace commux
