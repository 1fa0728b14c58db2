#include "c10d/tensor_request.hpp"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>

#include "engine/engine.hpp"

namespace commux {
namespace {

// Built once: creating the type per Work was a measurable part of a small send.
const c10::TypePtr& tensorListType() {
  static const c10::TypePtr type = c10::ListType::create(c10::TensorType::get());
  return type;
}

// A future holding CUDA tensors must name their devices (torch checks it), and then
// orders its users after the stream it is completed on (see completeFuture).
std::vector<c10::Device> cudaDevicesOf(const std::vector<at::Tensor>& tensors) {
  std::vector<c10::Device> devices;
  for (const auto& t : tensors) {
    if (t.defined() && t.is_cuda() &&
        std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
  return devices;
}

group::Request::Kind kindOf(c10d::OpType type) {
  switch (type) {
    case c10d::OpType::SEND: return group::Request::Kind::Send;
    case c10d::OpType::RECV: return group::Request::Kind::Recv;
    case c10d::OpType::RECVANYSOURCE: return group::Request::Kind::RecvAnySource;
    default: return group::Request::Kind::Other;
  }
}

}  // namespace

TensorRequest::TensorRequest(c10d::OpType type, std::vector<at::Tensor> outputs,
                             std::chrono::milliseconds timeout, engine::Description description,
                             std::shared_ptr<engine::Engine> engine)
    : group::Request(kindOf(type), std::move(description), timeout, std::move(engine)),
      outputs_(std::move(outputs)) {}

std::optional<c10::Device> TensorRequest::cudaDevice() const {
  for (const auto& t : outputs_) {
    if (t.defined() && t.is_cuda()) return t.device();
  }
  return std::nullopt;
}

void TensorRequest::addReads(std::initializer_list<at::Tensor> tensors) {
  for (const auto& t : tensors) {
    if (t.defined()) reads_.push_back(t);
  }
}

std::uint64_t TensorRequest::waitBytes() const {
  // Dense only: a sparse tensor has no nbytes (its parts move as separate operations).
  std::uint64_t bytes = 0;
  for (const auto& t : outputs_) {
    if (t.defined() && t.layout() == at::kStrided) bytes += t.nbytes();
  }
  return bytes;
}

void TensorRequest::addOnFinished(std::function<void(bool succeeded)> fn) {
  if (!onFinished_) {
    onFinished_ = std::move(fn);
    return;
  }
  onFinished_ = [first = std::move(onFinished_), second = std::move(fn)](bool succeeded) {
    first(succeeded);
    second(succeeded);
  };
}

void TensorRequest::onDone() {
  if (onFinished_) onFinished_(error() == nullptr);
  // done() was set before this runs, and future() sets futureAsked_ before it reads done():
  // with a full fence on both sides, one of the two sees the other's write.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!futureAsked_.load(std::memory_order_relaxed)) return;  // future() completes it
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(futureMutex_);
    if (!future_ || futureClaimed_) return;  // nobody asked for one before now
    futureClaimed_ = true;
    future = future_;
  }
  // The future runs its callbacks (the user's, DDP's comm hooks) in markCompleted: not
  // under the worker lock, which this thread holds now.
  engine::Engine::afterRelease(
      [self = std::static_pointer_cast<TensorRequest>(shared_from_this()),
       future = std::move(future)] { self->completeFuture(*future); });
}

void TensorRequest::completeFuture(c10::ivalue::Future& future) {
  // The future records its completion on the current stream: make that the caller's, on
  // which the operation's last copies were queued.
  const c10::OptionalStreamGuard onCallersStream(stream_);
  if (auto error = this->error()) {
    future.setError(error);
  } else {
    future.markCompleted(c10::IValue(outputs_));
  }
}

c10::intrusive_ptr<c10::ivalue::Future> TensorRequest::future() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  bool completeNow = false;
  {
    std::lock_guard<std::mutex> lock(futureMutex_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(tensorListType(), cudaDevicesOf(outputs_));
      futureAsked_.store(true, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      // Done before anyone asked: onDone may already have passed (then it left no callback
      // for it) or may still come (then it finds the future claimed). No user callback is
      // attached yet, so completing it on this thread runs nothing of theirs.
      if (done()) {
        futureClaimed_ = true;
        completeNow = true;
      }
    }
    future = future_;
  }
  if (completeNow) {
    completeFuture(*future);
  } else if (!done()) {
    // Whoever asks for the future may wait on it (or chain callbacks) instead of calling
    // wait(), so nobody would drive the worker until the deferred hand-off: hand off now.
    engine().handOff();
  }
  return future;
}

void TensorRequest::awaitFuture() {
  if (!futureAsked_.load(std::memory_order_acquire)) return;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(futureMutex_);
    future = future_;
  }
  // Not when this thread holds the worker itself (its own release will complete it), nor
  // from a future's callback: the completion of our future may be queued on this very
  // thread behind the callback that waits (two Works completed in one round), and would
  // never run. It completes as soon as that callback returns.
  if (future && !future->completed() && !engine().drivenByThisThread() &&
      !engine::Engine::inAfterRelease()) {
    future->wait();
  }
}

void TensorRequest::synchronize() {
  if (!stream_ || !done()) return;
  const auto* impl = c10::impl::getDeviceGuardImpl(stream_->device_type());
  const c10::Stream current = impl->getStream(stream_->device());
  if (current == *stream_) return;
  c10::Event event(stream_->device_type());
  event.record(*stream_);
  event.block(current);
}

}  // namespace commux
