#include "group/request.hpp"

#include "core/error.hpp"
#include "core/group_health.hpp"
#include "engine/engine.hpp"
#include "engine/errors.hpp"

namespace commux::group {

Request::Request(Kind kind, engine::Description description, std::chrono::milliseconds timeout,
                 std::shared_ptr<engine::Engine> engine)
    : kind_(kind),
      timeout_(timeout),
      description_(std::move(description)),
      engine_(std::move(engine)) {}

Request::~Request() = default;

void Request::attach(std::shared_ptr<engine::Op> op) {
  // Only operations that do their own work (shared memory) have anything to assist with;
  // the others spare every wait the lock that reading op_ takes.
  assists_ = op->assists();
  // No lock: attached before the Request is published (Group::launch lists it under its
  // tracking lock, and the op's completion cannot run before the op is submitted), so every
  // other reader of op_ sees this write.
  op_ = std::move(op);
}

std::shared_ptr<engine::Op> Request::op() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return op_;
}

engine::Op::Done Request::completer() {
  return [self = shared_from_this()](std::exception_ptr error, int source) {
    self->complete(std::move(error), source);
  };
}

void Request::failQuietly(std::exception_ptr error) {
  if (done_.done()) return;
  if (auto op = this->op()) {
    op->withdraw();
    engine_->submit(
        engine::Submission::cancel(std::move(op), std::move(error)).drive(engine::Drive::Never));
  }
}

void Request::failAfterDraining(std::exception_ptr error, int dead) {
  if (done_.done()) return;
  if (auto op = this->op()) {
    engine_->submit(engine::Submission::failAfterDraining(std::move(op), std::move(error), dead));
  }
}

void Request::abort() {
  if (done_.done()) return;
  auto error = engine::commError("commux: " + description() + " was aborted");
  if (auto op = this->op()) {
    op->withdraw();
    engine_->submit(engine::Submission::cancel(std::move(op), error));
  }
}

void Request::complete(std::exception_ptr error, int sourceRank) {
  if (error && health_) health_->collectiveFailed(error);
  // The op holds buffers and, through its completion callback, this Request; drop the link
  // so nothing outlives its use (released below, outside the lock).
  std::shared_ptr<engine::Op> op;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    op = std::move(op_);
    error_ = std::move(error);
    sourceRank_.store(sourceRank, std::memory_order_relaxed);
  }
  engine_->setDone(done_);
  op.reset();
  onDone();
}

bool Request::succeeded() const {
  if (!done_.done()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return !error_;
}

std::exception_ptr Request::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

bool Request::waitUntil(std::chrono::steady_clock::time_point deadline) {
  if (done_.done()) return true;
  // Nothing in a forked child would ever complete it, and driving the parent's worker
  // from here would steal the parent's messages.
  COMMUX_CHECK(!engine_->inherited(), Runtime, "commux: ", description(),
               ": waited on in a child forked after the operation started; only the process "
               "that started it can wait for it");
  const auto op = assists_ ? this->op() : nullptr;
  return engine_->wait(done_, deadline, op.get(), waitBytes());
}

void Request::wait(std::chrono::milliseconds limit) {
  COMMUX_CHECK(!deferred_.load(std::memory_order_acquire), Runtime, "commux: ", description(),
               ": waited on inside a coalescing window; with COMMUX_GROUP=1 operations start "
               "at endCoalescing, so end the window first (or wait on the Work it returns)");
  if (done_.done() || waitUntil(std::chrono::steady_clock::now() + limit)) return;
  // Both of gloo's phrasings ("Timed out waiting", "timed out after"): torch's own tests,
  // torchft and users' scripts match on them.
  const std::string what = "commux: " + description() +
                           ": Timed out waiting for it to complete (timed out after " +
                           std::to_string(limit.count()) + " ms)";
  const std::string message =
      what + "; the operation was cancelled" +
      (collective() ? "; the group runs no more collectives (the ranks may be out of step), "
                      "point-to-point operations still work"
                    : " and the group stays usable");
  auto error = engine::commError(what);
  // Recorded now, not when the cancellation is processed: the caller's next collective
  // must already be refused.
  if (health_) health_->collectiveFailed(error);
  if (auto op = this->op()) {
    op->withdraw();
    engine_->submit(engine::Submission::cancel(std::move(op), error));
  }
  // The cancellation takes effect when the thread that drives the worker runs it; until
  // then a message that arrives still lands in this receive. The caller may tell the
  // sender that the receive is gone and have the same (peer, tag) sent again for a new
  // receive (the stress test's timeout probe does, and hung when the driver was
  // preempted between two rounds): that message must not land here. And a receive UCX
  // already matched writes the buffer until its transfer ends (the op reports its end only
  // then). So a timeout is reported once the operation has ended, which is at once unless
  // another thread holds the worker or a transfer is under way; a point-to-point one that
  // completed meanwhile did get its message and succeeds. (A collective fails anyway: its
  // tags are never reused and the group refuses collectives now.)
  const bool ended = waitUntil(std::chrono::steady_clock::now() + kCancelWait);
  if (!ended) {
    COMMUX_FAIL(Backend, message, "; ", stillUnderWay("its buffers"));
  }
  if (collective() || !succeeded()) COMMUX_FAIL(Backend, message);
}

}  // namespace commux::group
