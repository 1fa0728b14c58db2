#pragma once
// What goes into the engine: Engine::submit takes one of these, and nothing else gets in
// from outside the driver (ops themselves start their parts and continue after a stream
// through the worker-lock holders' calls, startPart and continueAfter). Every submission
// runs the same way: on the submitting thread, holding the worker lock, when the lock is
// free and the thread may drive (commands queued before it go first); otherwise it is
// queued for whoever drives next and the sleeper is woken, or refused or waited for when
// the submission says so. What a kind does differently is only what it runs, and whether
// it leaves UCX work behind (then the driver is told it left: see Waker::driverLeft).
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "core/stream.hpp"

namespace commux::engine {

class Engine;
class Op;

/// Whether a submission may run on the submitting thread.
enum class Drive {
  IfFree,  // when the worker lock is free: no thread hand-off (callers, waiters)
  Never,   // only queue it and wake the driver (threads that must never run user
           // callbacks: the peer watch, the shared-memory lane, completion callbacks)
};

class Submission {
 public:
  enum class Kind : std::uint8_t {
    Start,              // start one operation
    StartAll,           // start operations in order, in one pass
    Cancel,             // fail an operation (timeouts, aborts)
    FailAfterDraining,  // fail an operation unless what already arrived completes it
    Finish,             // report an operation done whose work was not UCX's
    Purge,              // drop a dead communicator's unreceived messages
    Call,               // run a function holding the worker (the blocking path)
  };
  /// What happens when another thread holds the worker lock.
  enum class Busy : std::uint8_t {
    Queue,   // queue it for the driver (every kind but Call)
    Refuse,  // run nothing; submit returns false (a Call: its caller goes another way)
    Wait,    // wait for the lock (a Call releasing a request; holders never block)
  };

  /// Start `op`. If the engine stops first, `op` fails (it never goes missing).
  static Submission start(std::shared_ptr<Op> op);
  /// Start `ops` in order, in one pass (a coalescing window's operations, a batch).
  static Submission start(std::vector<std::shared_ptr<Op>> ops);
  /// Fail `op` with `error` (timeouts, aborts). A queued cancel of a finished op does
  /// nothing.
  static Submission cancel(std::shared_ptr<Op> op, std::exception_ptr error);
  /// Never driven here: the driver first moves everything that already arrived (a dead
  /// peer's last messages may sit in UCX's queues, and an operation that they complete
  /// must succeed), then fails `op` with `error` if it is still unfinished and still
  /// awaits group rank `dead` (Op::awaits; -1: whatever it awaits).
  static Submission failAfterDraining(std::shared_ptr<Op> op, std::exception_ptr error,
                                      int dead = -1);
  /// Report `op` done, successfully when `error` is null (a shared-memory collective's
  /// lane did its work). Driven here, it leaves no progress round behind.
  static Submission finish(std::shared_ptr<Op> op, std::exception_ptr error);
  /// Never driven here: drop the messages that arrived for communicator `context` and were
  /// never received (a destroyed group's), so that they can never match a receive of a
  /// later group that reuses the id. Nothing to do once the engine stops.
  static Submission purge(std::uint32_t context);
  /// Run `fn(engine, arg)` holding the worker lock, as an operation starts (the blocking
  /// point-to-point path posts its message this way: blocking_transfer.hpp). Refused when
  /// the worker is busy unless orWait(); `fn` must not be queued, so it never is.
  static Submission call(void (*fn)(Engine&, void*), void* arg);

  /// A Start of one operation on CUDA buffers: it starts once `stream` has run what is
  /// queued on it now (the kernels producing its inputs finish first; neither the caller
  /// nor the device is synchronised). Nothing when `stream` is empty.
  Submission&& after(const std::optional<core::Stream>& stream) && {
    after_ = stream;
    return std::move(*this);
  }
  Submission&& drive(Drive drive) && {
    drive_ = drive;
    return std::move(*this);
  }
  /// A Call waits for the worker lock instead of being refused.
  Submission&& orWait() && {
    busy_ = Busy::Wait;
    return std::move(*this);
  }

  Kind kind() const noexcept { return kind_; }

 private:
  friend class Engine;
  explicit Submission(Kind kind) noexcept : kind_(kind) {}

  Kind kind_;
  Drive drive_ = Drive::IfFree;
  Busy busy_ = Busy::Queue;
  int dead_ = -1;
  std::uint32_t context_ = 0;
  std::shared_ptr<Op> op_;
  std::vector<std::shared_ptr<Op>> ops_;
  std::exception_ptr error_;
  std::optional<core::Stream> after_;
  void (*fn_)(Engine&, void*) = nullptr;
  void* arg_ = nullptr;
};

inline Submission Submission::start(std::shared_ptr<Op> op) {
  Submission s(Kind::Start);
  s.op_ = std::move(op);
  return s;
}
inline Submission Submission::start(std::vector<std::shared_ptr<Op>> ops) {
  Submission s(Kind::StartAll);
  s.ops_ = std::move(ops);
  return s;
}
inline Submission Submission::cancel(std::shared_ptr<Op> op, std::exception_ptr error) {
  Submission s(Kind::Cancel);
  s.op_ = std::move(op);
  s.error_ = std::move(error);
  return s;
}
inline Submission Submission::failAfterDraining(std::shared_ptr<Op> op, std::exception_ptr error,
                                                int dead) {
  Submission s(Kind::FailAfterDraining);
  s.op_ = std::move(op);
  s.error_ = std::move(error);
  s.dead_ = dead;
  s.drive_ = Drive::Never;
  return s;
}
inline Submission Submission::finish(std::shared_ptr<Op> op, std::exception_ptr error) {
  Submission s(Kind::Finish);
  s.op_ = std::move(op);
  s.error_ = std::move(error);
  return s;
}
inline Submission Submission::purge(std::uint32_t context) {
  Submission s(Kind::Purge);
  s.context_ = context;
  s.drive_ = Drive::Never;
  return s;
}
inline Submission Submission::call(void (*fn)(Engine&, void*), void* arg) {
  Submission s(Kind::Call);
  s.fn_ = fn;
  s.arg_ = arg;
  s.busy_ = Busy::Refuse;
  return s;
}

}  // namespace commux::engine
