#pragma once
// The c10d adapter's Request: the tensors an operation writes and reads (kept alive, and
// checked by a window registration that would move their memory), the caller's CUDA stream,
// and the future torch asks for, completed when the Request is done.
#include <ATen/core/ivalue.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>  // c10d::OpType (in Work.hpp up to torch 2.5)

#include <atomic>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "group/request.hpp"

namespace commux {

class TensorRequest final : public group::Request {
 public:
  TensorRequest(c10d::OpType type, std::vector<at::Tensor> outputs,
                std::chrono::milliseconds timeout, engine::Description description,
                std::shared_ptr<engine::Engine> engine);

  /// The tensors the operation writes or sends (its result, once complete).
  const std::vector<at::Tensor>& outputs() const noexcept { return outputs_; }
  /// Tensors it also reads or works in (a collective's input, its work buffer; undefined
  /// ones are skipped), for as long as the request lives: a window registration must not
  /// move their memory while the operation may still read it (set before launch).
  void addReads(std::initializer_list<at::Tensor> tensors);
  c10::ArrayRef<at::Tensor> reads() const noexcept { return reads_; }
  /// The GPU of its output tensors, if they are on one.
  std::optional<c10::Device> cudaDevice() const;
  /// The caller's CUDA stream, for operations on CUDA tensors (set before launch).
  void setStream(c10::Stream stream) { stream_ = stream; }

  /// CUDA: a caller that waits from another stream must not overtake the last copies,
  /// queued on the stream current at launch.
  void synchronize();
  /// Built on first request (most operations are only waited on).
  c10::intrusive_ptr<c10::ivalue::Future> future();
  /// After a successful wait: the future completes when the thread that completed the
  /// request lets go of the worker; whoever reads it after wait() must find it complete.
  void awaitFuture();
  /// Runs `fn(succeeded)` as the request completes (under the worker lock: it must be
  /// short and must not take the GIL); set before launch. A second one runs after the first.
  void addOnFinished(std::function<void(bool succeeded)> fn);

 private:
  void onDone() override;
  /// Bytes its dense outputs hold: how long a wait spins.
  std::uint64_t waitBytes() const override;
  /// Completes `future` with this (done) request's outcome.
  void completeFuture(c10::ivalue::Future& future);

  std::vector<at::Tensor> outputs_;
  // Most calls read up to three buffers (job.buffer/input/output): held inline, no
  // allocation on the small-message path.
  c10::SmallVector<at::Tensor, 3> reads_;
  std::optional<c10::Stream> stream_;
  std::function<void(bool)> onFinished_;  // hooks, the profiler's span end
  std::mutex futureMutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // under futureMutex_
  bool futureClaimed_ = false;  // its completion is someone's (onDone's or future()'s)
  // Set (before future() looks at done()) once a future was asked for: onDone and
  // awaitFuture skip the lock in the usual case, where nobody asks.
  std::atomic<bool> futureAsked_{false};
};

}  // namespace commux
