#include "c10d/work_ucx.hpp"

#include <c10/util/Exception.h>

namespace commux {

WorkUCX::WorkUCX(int rank, c10d::OpType type, std::shared_ptr<TensorRequest> request,
                 const char* profilingTitle,
                 const std::optional<std::vector<at::Tensor>>& inputs,
                 std::uint64_t completionKey)
    : c10d::Work(rank, type, profilingTitle, inputs),
      request_(std::move(request)),
      completionKey_(completionKey) {
  // c10d::Work opened the span; it ends where the operation does, whoever waits.
  if (recordFunctionEndCallback_) {
    request_->addOnFinished(
        [end = std::move(recordFunctionEndCallback_)](bool) { end(); });
    recordFunctionEndCallback_ = nullptr;
  }
}

WorkUCX::~WorkUCX() = default;

int WorkUCX::sourceRank() const {
  TORCH_CHECK(opType_ == c10d::OpType::RECV || opType_ == c10d::OpType::RECVANYSOURCE,
              "commux: sourceRank() is only defined for receives");
  TORCH_CHECK(request_->done(),
              "commux: sourceRank() called before the receive completed; wait() first");
  return request_->sourceRank();
}

bool WorkUCX::wait(std::chrono::milliseconds timeout) {
  request_->wait(timeout == kNoTimeout ? request_->timeout() : timeout);
  request_->awaitFuture();
  if (auto error = request_->error()) std::rethrow_exception(error);
  request_->synchronize();
  return true;
}

}  // namespace commux
