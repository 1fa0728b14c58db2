#pragma once
// A Request is what a caller holds for one operation launched on a Group: it is done once,
// with an error or without, and whoever holds it may wait (the engine's one wait: it drives
// the worker for a while, then sleeps), cancel it at a deadline, abort it, or fail it when a
// peer dies. The Group tracks its Requests in flight (abort, deaths); a front end derives
// one to hold its own objects (the c10d adapter's tensors and future) and learns of the
// completion through onDone().
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "engine/description.hpp"
#include "engine/done_flag.hpp"
#include "engine/op.hpp"

namespace commux::core {
class GroupHealth;
}
namespace commux::engine {
class Engine;
}

namespace commux::group {

/// How long a timed-out or failed wait waits for its cancellation to be run (at once, unless
/// another thread drives the worker and was preempted).
inline constexpr std::chrono::seconds kCancelWait{10};

/// The end of an error whose operation was cancelled but still had a transfer under way
/// into `what` (its buffer, the window) kCancelWait later: the caller must know that
/// memory may yet change.
inline std::string stillUnderWay(const std::string& what) {
  return "a transfer into " + what + " was still under way " +
         std::to_string(kCancelWait.count()) + " s after the cancel and may yet change it";
}

class Request : public std::enable_shared_from_this<Request> {
 public:
  /// What the operation does with its peer: a send fails at once when its peer is dead, a
  /// receive is failed when the group goes away (nothing could complete it then).
  enum class Kind : std::uint8_t { Send, Recv, RecvAnySource, Other };
  /// The peer of an operation that talks to all members (collectives, any-source receives).
  static constexpr int kAllRanks = -1;

  Request(Kind kind, engine::Description description, std::chrono::milliseconds timeout,
          std::shared_ptr<engine::Engine> engine);
  virtual ~Request();
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  Kind kind() const noexcept { return kind_; }
  /// The one peer the operation talks to, or kAllRanks: whose death fails it.
  void setPeer(int peer) noexcept { peer_ = peer; }
  int peer() const noexcept { return peer_; }
  bool involves(int rank) const noexcept { return peer_ == kAllRanks || peer_ == rank; }
  /// A collective of the group (not a point-to-point or any-source receive): its failure
  /// leaves the ranks out of step.
  bool collective() const noexcept { return peer_ == kAllRanks && kind_ != Kind::RecvAnySource; }
  bool receives() const noexcept { return kind_ == Kind::Recv || kind_ == Kind::RecvAnySource; }
  /// A collective of the group whose `health` hears when it fails (on the completing
  /// thread, or at once on a timeout), so that later collectives are refused; set before
  /// launch. A pointer, not a callback: no allocation per collective.
  void reportFailureTo(std::shared_ptr<core::GroupHealth> health) noexcept {
    health_ = std::move(health);
  }

  /// Connects the operation this Request tracks (for cancel on timeout, abort, death).
  void attach(std::shared_ptr<engine::Op> op);
  /// The Op's completion callback; it keeps this Request alive until it runs.
  engine::Op::Done completer();
  /// What the Op of this Request is given.
  const engine::Description& parts() const noexcept { return description_; }
  /// For messages: formatted on each call.
  std::string description() const { return description_.str(); }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  engine::Engine& engine() const noexcept { return *engine_; }

  /// Any thread: fail the operation with `error` without driving the worker.
  void failQuietly(std::exception_ptr error);
  /// Any thread: group rank `dead` died (-1: a peer); fail the operation unless what
  /// already arrived completes it or it no longer awaits that rank (Op::awaits).
  void failAfterDraining(std::exception_ptr error, int dead = -1);
  /// Any thread: cancel it ("was aborted").
  void abort();

  bool done() const noexcept { return done_.done(); }
  /// Done without an error.
  bool succeeded() const;
  /// Its error once done; null while in flight or after success.
  std::exception_ptr error() const;
  /// The sender of a receive from any source, once done.
  int sourceRank() const noexcept { return sourceRank_.load(std::memory_order_relaxed); }

  /// Set while the operation waits for its batch to be posted (Group::endBatch): waiting
  /// then could never finish, so wait() raises instead.
  void setDeferred(bool deferred) { deferred_.store(deferred, std::memory_order_release); }
  /// Until done or `deadline`.
  bool waitUntil(std::chrono::steady_clock::time_point deadline);
  /// Until done, at most `limit`: at the limit the operation is cancelled and a Backend
  /// error ("Timed out") raised. A done Request returns without raising its error.
  void wait(std::chrono::milliseconds limit);

 protected:
  /// Runs once, on the completing thread (it may hold the worker lock), after done() turned
  /// true: a front end completes what it built on the Request (a future).
  virtual void onDone() {}
  /// What the operation moves, asked only by a wait that must wait: how long it spins.
  virtual std::uint64_t waitBytes() const { return 0; }

 private:
  void complete(std::exception_ptr error, int sourceRank);
  std::shared_ptr<engine::Op> op() const;

  const Kind kind_;
  int peer_ = kAllRanks;
  const std::chrono::milliseconds timeout_;
  const engine::Description description_;
  std::shared_ptr<engine::Engine> engine_;
  mutable std::mutex mutex_;
  std::shared_ptr<engine::Op> op_;  // until it completes; under mutex_
  std::exception_ptr error_;        // under mutex_
  bool assists_ = false;            // op_ has work a waiter can do (Op::assist)
  engine::DoneFlag done_;
  std::atomic<bool> deferred_{false};
  std::atomic<int> sourceRank_{-1};
  std::shared_ptr<core::GroupHealth> health_;  // reportFailureTo
};

}  // namespace commux::group
