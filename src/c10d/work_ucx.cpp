#include "c10d/work_ucx.hpp"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "engine/engine.hpp"
#include "engine/errors.hpp"

namespace commux {
namespace {

// Built once: creating the type per Work was a measurable part of a small send.
const c10::TypePtr& tensorListType() {
  static const c10::TypePtr type = c10::ListType::create(c10::TensorType::get());
  return type;
}

// A future holding CUDA tensors must name their devices (torch checks it), and then
// orders its users after the stream it is completed on (see WorkUCX::complete).
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

}  // namespace

WorkUCX::WorkUCX(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                 std::chrono::milliseconds timeout, engine::Description description,
                 std::shared_ptr<engine::Engine> engine)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      timeout_(timeout),
      description_(std::move(description)),
      engine_(std::move(engine)) {}

WorkUCX::~WorkUCX() = default;

std::optional<c10::Device> WorkUCX::cudaDevice() const {
  for (const auto& t : outputs_) {
    if (t.defined() && t.is_cuda()) return t.device();
  }
  return std::nullopt;
}

void WorkUCX::attach(std::shared_ptr<engine::Op> op) {
  // Only operations that do their own work (shared memory) have anything to assist with;
  // the others spare every wait the lock that reading op_ takes.
  assists_ = op->assists();
  std::lock_guard<std::mutex> lock(mutex_);
  op_ = std::move(op);
}

std::shared_ptr<engine::Op> WorkUCX::op() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return op_;
}

engine::Op::Done WorkUCX::completer() {
  return [self = c10::intrusive_ptr<WorkUCX>::reclaim_copy(this)](
             std::exception_ptr error, int source) { self->complete(std::move(error), source); };
}

bool WorkUCX::collective() const noexcept {
  return peer_ == kAllRanks && opType_ != c10d::OpType::RECVANYSOURCE;
}

void WorkUCX::failQuietly(std::exception_ptr error) {
  if (done_.done()) return;
  if (auto op = this->op()) {
    op->withdraw();
    engine_->cancel(std::move(op), std::move(error), engine::Engine::Drive::Never);
  }
}

void WorkUCX::failAfterDraining(std::exception_ptr error) {
  if (done_.done()) return;
  if (auto op = this->op()) engine_->failAfterDraining(std::move(op), std::move(error));
}

void WorkUCX::complete(std::exception_ptr error, int sourceRank) {
  if (error && onFailure_) onFailure_(error);
  c10::intrusive_ptr<c10::ivalue::Future> future;
  // The op holds buffers and, through its completion callback, this Work; drop the link
  // so nothing outlives its use (released below, outside the lock).
  std::shared_ptr<engine::Op> op;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    op = std::move(op_);
    exception_ = error;
    sourceRank_.store(sourceRank, std::memory_order_relaxed);
    completed_ = true;
    future = future_;  // only when someone asked for it before now (see getFuture)
  }
  engine_->setDone(done_);
  op.reset();
  if (!future) return;
  // The future runs its callbacks (the user's, DDP's comm hooks) in markCompleted: not
  // under the worker lock, which this thread holds now.
  engine::Engine::afterRelease([self = c10::intrusive_ptr<WorkUCX>::reclaim_copy(this),
                                future = std::move(future)] { self->completeFuture(*future); });
}

void WorkUCX::completeFuture(c10::ivalue::Future& future) {
  // The future records its completion on the current stream: make that the caller's, on
  // which the operation's last copies were queued.
  const c10::OptionalStreamGuard onCallersStream(stream_);
  if (auto error = exception()) {
    future.setError(error);
  } else {
    future.markCompleted(c10::IValue(outputs_));
  }
}

bool WorkUCX::isCompleted() { return done_.done(); }

bool WorkUCX::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr WorkUCX::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

int WorkUCX::sourceRank() const {
  TORCH_CHECK(opType_ == c10d::OpType::RECV || opType_ == c10d::OpType::RECVANYSOURCE,
              "commux: sourceRank() is only defined for receives");
  TORCH_CHECK(done_.done(),
              "commux: sourceRank() called before the receive completed; wait() first");
  return sourceRank_.load(std::memory_order_relaxed);
}

std::vector<at::Tensor> WorkUCX::result() { return outputs_; }

void WorkUCX::addReads(std::initializer_list<at::Tensor> tensors) {
  for (const auto& t : tensors) {
    if (t.defined()) reads_.push_back(t);
  }
}

void WorkUCX::synchronize() {
  // CUDA: the last copies for the caller were queued on the stream current at launch; a
  // caller that waits from another stream must not overtake them.
  if (!stream_ || !done_.done()) return;
  const auto* impl = c10::impl::getDeviceGuardImpl(stream_->device_type());
  const c10::Stream current = impl->getStream(stream_->device());
  if (current == *stream_) return;
  c10::Event event(stream_->device_type());
  event.record(*stream_);
  event.block(current);
}

bool WorkUCX::waitUntil(std::chrono::steady_clock::time_point deadline) {
  if (done_.done()) return true;
  // Nothing in a forked child would ever complete it, and driving the parent's worker
  // from here would steal the parent's messages.
  TORCH_CHECK(!engine_->inherited(), "commux: ", description(),
              ": waited on in a child forked after the operation started; only the process "
              "that started it can wait for it");
  // Only operations that do their own work (shared memory) have anything to assist with;
  // the others spare every wait the lock that reading op_ takes.
  const auto op = assists_ ? this->op() : nullptr;
  // What the outputs hold sets how long the wait spins. Dense only: a sparse tensor has no
  // nbytes (its parts move as separate operations).
  std::uint64_t bytes = 0;
  for (const auto& t : outputs_) {
    if (t.defined() && t.layout() == at::kStrided) bytes += t.nbytes();
  }
  return engine_->wait(done_, deadline, op.get(), bytes);
}

bool WorkUCX::wait(std::chrono::milliseconds timeout) {
  TORCH_CHECK(!deferred_.load(std::memory_order_acquire), "commux: ", description(),
              ": waited on inside a coalescing window; with COMMUX_GROUP=1 operations start "
              "at endCoalescing, so end the window first (or wait on the Work it returns)");
  const auto limit = timeout == kNoTimeout ? timeout_ : timeout;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  if (!waitUntil(deadline)) {
    // "Timed out" in Gloo's words: torch's own tests and users' scripts match on it.
    const std::string what =
        "commux: " + description() + ": Timed out after " + std::to_string(limit.count()) + " ms";
    const std::string message =
        what + "; the operation was cancelled" +
        (collective() ? "; the group runs no more collectives (the ranks may be out of step), "
                        "point-to-point operations still work"
                      : " and the group stays usable");
    auto error = engine::commError(what);
    // Recorded now, not when the cancellation is processed: the caller's next collective
    // must already be refused.
    if (onFailure_) onFailure_(error);
    if (auto op = this->op()) {
      op->withdraw();
      engine_->cancel(std::move(op), error);
    }
    // The cancellation takes effect when the thread that drives the worker runs it; until
    // then a message that arrives still lands in this receive. The caller may tell the
    // sender that the receive is gone and have the same (peer, tag) sent again for a new
    // receive (the stress test's timeout probe does, and hung when the driver was
    // preempted between two rounds): that message must not land here. So a point-to-point
    // timeout is reported once the operation has ended, which is at once unless another
    // thread holds the worker; one that completed meanwhile did get its message and
    // succeeds. (A collective's tags are never reused: the group refuses collectives now.)
    if (collective() || !waitUntil(std::chrono::steady_clock::now() + kCancelWait) ||
        !isSuccess()) {
      C10_THROW_ERROR(DistBackendError, message);
    }
  }
  // The future completes just after, when the thread that completed us lets go of the
  // worker; whoever reads it after wait() must find it complete. (Not when this thread
  // holds the worker itself: its own release will complete it.)
  std::exception_ptr error;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = exception_;
    future = future_;
  }
  // Not from a future's callback either: the completion of our future may be queued on this
  // very thread behind the callback that waits (two Works completed in one round), and would
  // never run. It completes as soon as that callback returns.
  if (future && !future->completed() && !engine_->drivenByThisThread() &&
      !engine::Engine::inAfterRelease()) {
    future->wait();
  }
  if (error) std::rethrow_exception(error);
  synchronize();
  return true;
}

void WorkUCX::abort() {
  if (done_.done()) return;
  auto error = engine::commError("commux: " + description() + " was aborted");
  if (auto op = this->op()) {
    op->withdraw();
    engine_->cancel(std::move(op), error);
  }
}

c10::intrusive_ptr<c10::ivalue::Future> WorkUCX::getFuture() {
  // Built on first request: most operations are only waited on, and a future (with its
  // IValue list) per Work was a measurable part of a small send.
  c10::intrusive_ptr<c10::ivalue::Future> future;
  bool completeNow = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(tensorListType(), cudaDevicesOf(outputs_));
      // Completed before anyone asked: complete() left no callback for it, and no user
      // callback is attached yet, so completing it on this thread runs nothing of theirs.
      completeNow = completed_;
    }
    future = future_;
  }
  if (completeNow) {
    completeFuture(*future);
  } else if (!done_.done()) {
    // Whoever asks for the future may wait on it (or chain callbacks) instead of calling
    // wait(), so nobody would drive the worker until the deferred hand-off: hand off now.
    engine_->handOff();
  }
  return future;
}

}  // namespace commux
