#pragma once
// The Work handed back for every commux operation: c10d's face of a TensorRequest, which
// holds the operation's state (the Op's completion callback keeps the request, not the
// Work, alive). Completion is published by whichever thread drives the engine's worker; a
// waiter waits through the engine's one wait (it drives the worker for a short while, then
// sleeps), so a rank blocked for seconds costs no CPU.
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "c10d/tensor_request.hpp"

namespace commux {

using group::kCancelWait;

/// A limit for Work::wait that is never 0: wait(0) means "no limit" (kNoTimeout), so a
/// spent deadline must still become a real, tiny one.
inline std::chrono::milliseconds spentAsTiny(std::chrono::milliseconds limit) {
  return std::max(limit, std::chrono::milliseconds(1));
}

class WorkUCX : public c10d::Work {
 public:
  /// `profilingTitle`: a span for the profiler (a literal), given only while one records;
  /// `completionKey`: the key completion hooks get (0: Work's own).
  WorkUCX(int rank, c10d::OpType type, std::shared_ptr<TensorRequest> request,
          const char* profilingTitle = nullptr,
          const std::optional<std::vector<at::Tensor>>& inputs = std::nullopt,
          std::uint64_t completionKey = 0);
  ~WorkUCX() override;

  TensorRequest& request() const noexcept { return *request_; }
  const std::shared_ptr<TensorRequest>& sharedRequest() const noexcept { return request_; }
  // What launching needs of the request, without spelling request() each time.
  void setPeer(int peer) noexcept { request_->setPeer(peer); }
  void addReads(std::initializer_list<at::Tensor> tensors) { request_->addReads(tensors); }
  const engine::Description& parts() const noexcept { return request_->parts(); }
  engine::Op::Done completer() { return request_->completer(); }
  std::string description() const { return request_->description(); }

  bool isCompleted() override { return request_->done(); }
  bool isSuccess() const override { return request_->succeeded(); }
  std::exception_ptr exception() const override { return request_->error(); }
  int sourceRank() const override;
  std::vector<at::Tensor> result() override { return request_->outputs(); }
  void synchronize() override { request_->synchronize(); }
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void abort() override { request_->abort(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return request_->future(); }
  // Not marked override: c10d::Work only declares getTimeout in newer torch (not 2.5).
  std::chrono::milliseconds getTimeout() const { return request_->timeout(); }
#ifdef COMMUX_TORCH_HAS_COMPLETION_HOOKS
  uint64_t getCompletionKey() const override {
    return completionKey_ != 0 ? completionKey_ : c10d::Work::getCompletionKey();
  }
#endif

 private:
  std::shared_ptr<TensorRequest> request_;
  std::uint64_t completionKey_ = 0;
};

}  // namespace commux
