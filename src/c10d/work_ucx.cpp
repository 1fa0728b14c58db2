#include "c10d/work_ucx.hpp"

#include <c10/util/Exception.h>

namespace commux {

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
