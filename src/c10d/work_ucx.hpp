#pragma once
// The Work handed back for every commux operation. Completion is published by whichever
// thread drives the engine's worker; a waiter waits through Engine::wait (it drives the
// worker itself for a short while, then sleeps), so a rank blocked for seconds costs no CPU.
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "engine/description.hpp"
#include "engine/done_flag.hpp"
#include "engine/op.hpp"

namespace commux {

/// How long a timed-out or failed wait waits for its cancellation to be run (at once, unless
/// another thread drives the worker and was preempted).
inline constexpr std::chrono::seconds kCancelWait{10};

namespace engine {
class Engine;
}

/// A limit for Work::wait that is never 0: wait(0) means "no limit" (kNoTimeout), so a
/// spent deadline must still become a real, tiny one.
inline std::chrono::milliseconds spentAsTiny(std::chrono::milliseconds limit) {
  return std::max(limit, std::chrono::milliseconds(1));
}

class WorkUCX : public c10d::Work {
 public:
  WorkUCX(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
          std::chrono::milliseconds timeout, engine::Description description,
          std::shared_ptr<engine::Engine> engine);
  ~WorkUCX() override;

  /// Connects the operation this Work tracks (for cancel on timeout or abort).
  void attach(std::shared_ptr<engine::Op> op);
  /// The one peer the operation talks to, or kAllRanks (collectives, any-source receives):
  /// whose death fails it.
  static constexpr int kAllRanks = -1;
  void setPeer(int peer) noexcept { peer_ = peer; }
  int peer() const noexcept { return peer_; }
  bool involves(int rank) const noexcept { return peer_ == kAllRanks || peer_ == rank; }
  /// A collective of the group (not a point-to-point or any-source receive).
  bool collective() const noexcept;
  /// Runs (on the completing thread) when the operation fails; set before launch.
  void setOnFailure(std::function<void(std::exception_ptr)> onFailure) {
    onFailure_ = std::move(onFailure);
  }
  /// Any thread: fail the operation with `error` without driving the worker.
  void failQuietly(std::exception_ptr error);
  /// Any thread: a peer died; fail the operation unless what already arrived completes it.
  void failAfterDraining(std::exception_ptr error);
  /// A completion callback for the Op; it keeps this Work alive until it runs.
  engine::Op::Done completer();

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // Not marked override: c10d::Work only declares getTimeout in newer torch (not 2.5).
  std::chrono::milliseconds getTimeout() const { return timeout_; }

  /// For messages: formatted on each call.
  std::string description() const { return description_.str(); }
  /// The tensors the operation writes or sends (its result, once complete).
  const std::vector<at::Tensor>& tensors() const noexcept { return outputs_; }
  /// Tensors it also reads or works in (a collective's input, its work buffer; undefined
  /// ones are skipped), for as long as the Work lives: a window registration must not move
  /// their memory while the operation may still read it (set before launch).
  void addReads(std::initializer_list<at::Tensor> tensors);
  const std::vector<at::Tensor>& reads() const noexcept { return reads_; }
  /// What the Op of this Work is given.
  const engine::Description& parts() const noexcept { return description_; }
  /// Set while the operation waits for endCoalescing to be posted (COMMUX_GROUP): waiting
  /// then could never finish, so wait() raises instead.
  void setDeferred(bool deferred) { deferred_.store(deferred, std::memory_order_release); }
  /// The GPU of its output tensors, if they are on one.
  std::optional<c10::Device> cudaDevice() const;
  /// The caller's CUDA stream, for operations on CUDA tensors (set before launch).
  void setStream(c10::Stream stream) { stream_ = stream; }

 private:
  void complete(std::exception_ptr error, int sourceRank);
  /// Completes `future` with this (completed) Work's outcome.
  void completeFuture(c10::ivalue::Future& future);
  bool waitUntil(std::chrono::steady_clock::time_point deadline);
  std::shared_ptr<engine::Op> op() const;

  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> reads_;
  const std::chrono::milliseconds timeout_;
  const engine::Description description_;
  std::shared_ptr<engine::Engine> engine_;
  std::shared_ptr<engine::Op> op_;  // until it completes; under mutex_
  bool assists_ = false;            // op_ has work a waiter can do (Op::assist)
  engine::DoneFlag done_;
  std::atomic<bool> deferred_{false};
  std::atomic<int> sourceRank_{-1};
  int peer_ = kAllRanks;
  std::function<void(std::exception_ptr)> onFailure_;
  std::optional<c10::Stream> stream_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // built by getFuture; under mutex_
};

}  // namespace commux
