#pragma once
// A persistent neighbourhood exchange on a core Group: built once from what goes to each
// neighbour and what comes from it (pieces of contiguous host memory, in message order),
// then started and waited every step, one call each. Each neighbour pair swaps ONE message
// per step: a UCX iov message straight from and into the pieces where they are long, or
// packed into (unpacked from) a staging buffer the exchange keeps where they are many and
// short. Sender and receiver choose independently: the bytes on the wire are the same.
// A rank that is its own neighbour copies at the step's end (wait(), or where a step ends by
// itself), never before its own message is marked ready. Neighbours on this host (its
// shared-memory channel's ranks, where they may read each other's memory) go without UCX
// from the second step on: the receiver copies the message straight out of the sender's
// memory (halo/shared_sides.hpp); the first step carries one greeting each way with every
// neighbour, which decides it.
// (docs/halo.md)
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/p2p_op.hpp"
#include "halo/messages.hpp"
#include "halo/row_copy.hpp"
#include "halo/shared_sides.hpp"
#include "halo/step_finisher.hpp"
#include "wire/tag.hpp"

namespace commux::group {
class Group;
class Request;
}  // namespace commux::group

namespace commux::halo {

/// Below this average piece size (bytes) a message is packed into a staging buffer rather
/// than sent as an iov of its pieces (benchmarks/halo.py, docs/performance.md).
inline constexpr std::size_t kDefaultPackBelow = 256;
/// The most bytes one message (the sum of its pieces) may hold: the largest object C++
/// allows, so that no sum of piece sizes, staging size or row stride wraps. The sizes come
/// from callers (the C API's pieces are unchecked numbers): a sum that wrapped sized a
/// staging buffer smaller than what was packed into it (issue 59).
inline constexpr std::size_t kMaxMessageBytes = static_cast<std::size_t>(PTRDIFF_MAX);

class NeighbourExchange {
 public:
  /// Checks the plan (ranks of `group`, each named once; every message's pieces adding up
  /// to at most kMaxMessageBytes, none running past the end of memory; this rank's own
  /// message as long as what it fills) and raises InvalidArgument before anything is
  /// allocated or moves. Messages use the user tag `tag` of the group. `group` must outlive
  /// the exchange.
  NeighbourExchange(group::Group& group, std::vector<NeighbourMessages> neighbours, int tag,
                    std::chrono::milliseconds timeout, std::size_t packBelow = kDefaultPackBelow);
  ~NeighbourExchange();
  NeighbourExchange(const NeighbourExchange&) = delete;
  NeighbourExchange& operator=(const NeighbourExchange&) = delete;

  /// Posts this step's receives, then its sends (packing what is packed). Raises when a
  /// step is in flight, or when a neighbour is dead (nothing posted then).
  void start();
  /// Partitioned steps: posts this step's receives only; each message then goes at
  /// ready(rank), as soon as its faces are computed, and wait() sends what is left.
  void startReceives();
  /// Sends this step's message to `rank` now (its memory must hold this step's values).
  /// For this rank itself: its own message may be copied from now on (at the step's end, as
  /// always); until then a step that ends by itself does not end, so it never copies faces
  /// not computed yet. Marking the own message again is harmless. Nothing for a neighbour
  /// it sends nothing. Raises outside a step, for a rank that is no neighbour, or a message
  /// to another rank already sent this step.
  void ready(int rank);
  /// Waits for the step's messages (the timeout counts for the whole step), unpacks what
  /// came packed, then copies this rank's own message (its send and receive memory must
  /// not overlap, as in MPI). Raises the first error (a dead neighbour, a message of the
  /// wrong size, the timeout) once every message of the step has ended here. A failed step
  /// may still be under way on the neighbours, and a late message of it would match the
  /// next step's receive: after a failure every rank builds a new exchange with another tag
  /// (or a new group) rather than starting this one again. Of a step that ends by itself,
  /// wait() is waitStep() (and gives its outcome again once it has ended).
  void wait();
  /// What waitStep() takes: one step that ends by itself.
  struct StepEnd;
  using Step = std::shared_ptr<StepEnd>;
  /// Finishes this step where it ends instead of in wait() (a future's way): once every
  /// message of the step has been sent (start(), ready(), or wait(); this rank's own one
  /// marked ready the same way) and has ended, the
  /// thread that ends the last one writes what came packed and this rank's own message,
  /// closes the step and calls `done` with the step's first error, or null; never under
  /// the worker lock, so `done` may start the next step. Once per step; returns the step
  /// for waitStep(). Nothing but waitStep() and wait() times a step out.
  /// One thread at a time uses an exchange: once `done` may start the next step, the
  /// owner waits for a step with waitStep(), which touches only that step.
  Step finishWhenDone(std::function<void(std::exception_ptr)> done);
  /// Waits for `step` (finishWhenDone's): sends what is left of it while it is this
  /// exchange's current step, then waits for its end within the timeout (its messages are
  /// cancelled at the timeout and a Backend "Timed out" error raised) and raises its error.
  /// `done` may still be running when this returns.
  void waitStep(const Step& step);
  /// Whether `step` has ended (its memory written).
  static bool stepEnded(const Step& step) noexcept;
  /// Without blocking (MPI_Test's way): sends what is left of the step, as wait() would,
  /// and says whether it has ended, its received memory written; raises its error once it
  /// has. From the first test() on, the step ends where it ends (finishWhenDone). Nothing
  /// times out a step that is only tested: wait() does.
  bool test();
  bool inFlight() const noexcept { return stepOpen_.load(std::memory_order_acquire); }

  /// How each side of neighbour `i` travels (for tests and the benchmark).
  bool sendPacked(std::size_t i) const { return sides_.at(i).sendStaging != nullptr; }
  bool recvPacked(std::size_t i) const { return sides_.at(i).recvStaging != nullptr; }
  /// Whether neighbour `i`'s messages go through shared memory (from the second step on;
  /// false before it has started).
  bool sendsShared(std::size_t i) const { return shared_ && shared_->sendsShared(i); }
  bool receivesShared(std::size_t i) const { return shared_ && shared_->receivesShared(i); }
  std::size_t neighbours() const noexcept { return sides_.size(); }

 private:
  struct Side {
    NeighbourMessages messages;
    std::size_t sendBytes = 0;
    std::size_t recvBytes = 0;
    std::vector<Rows> sendRows;  // for packing and this rank's own copy
    std::vector<Rows> recvRows;
    std::unique_ptr<char[]> sendStaging;  // set when the send is packed
    std::unique_ptr<char[]> recvStaging;  // set when the receive is packed
    bool sent = false;  // this step's message went, or is marked ready (own), or none goes
  };

  class StepRequest;

  /// Checks the neighbours and opens a step (nothing posted yet).
  void openStep();
  /// Queues this step's receives, and a send (packing what is packed), for flush().
  void postReceives();
  void postSend(Side& side);
  /// Queues every send of the step not sent yet, then flush().
  void sendRest();
  /// Launches what was queued as one submission to the engine (one pass through the
  /// worker lock for all a step's messages: Group::launchAll).
  void flush();
  /// Every send of the step is posted: a step finished where it ends may now end.
  void releaseHold();
  /// Unpacks what came packed and copies this rank's own message.
  void writeReceived(const std::vector<std::size_t>& unpack);
  /// Where a step that ends by itself ends (the exchange may be gone by then).
  static void endStep(const Step& end);
  /// A step that ends by itself could not send all of it: ends it with `error`.
  static void abandon(const Step& end, std::exception_ptr error);
  /// The step's end is known: `finished` set, then `done` called (off any lock).
  static void report(StepEnd& end, const std::exception_ptr& error,
                     const std::function<void(std::exception_ptr)>& done);
  /// One message of the step, queued for flush(); then tracked by the group and kept in
  /// requests_.
  void launchMessage(engine::P2POp::Kind kind, int peer, std::size_t bytes, std::size_t pieces,
                     engine::P2POp::Buffers buffers, std::shared_ptr<const engine::Route> route,
                     wire::Tag tag);
  /// First step: greets every neighbour (SharedSides), the step's first messages.
  void greet();
  /// Second step: reads their greetings and decides what goes through shared memory.
  void connectShared();
  /// A step that ends by itself: its shared part is finished on finisher_'s thread.
  void finishSharedLater(const Step& end);
  /// Runs `body`; if it throws, ends what the step posted and closes the step first.
  template <typename Body>
  void guarded(Body&& body);

  group::Group& group_;
  std::vector<Side> sides_;
  int tag_;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> stepOpen_{false};  // cleared by the finishing thread (finishWhenDone)
  std::vector<std::shared_ptr<group::Request>> requests_;  // this step's, receives first
  std::vector<std::shared_ptr<group::Request>> queued_;    // for flush(), with their Ops
  std::vector<std::shared_ptr<engine::Op>> queuedOps_;
  std::vector<std::size_t> unpack_;  // sides whose receive is staged, this step
  std::size_t unsent_ = 0;           // sends of this step not posted (own: not ready) yet
  Step end_;                         // this step's; its Requests hold it too
  bool armed_ = false;               // finishWhenDone was called this step
  std::uint64_t step_ = 0;           // steps opened; the shared counters' values
  // Every neighbour greeted at the first step; those on this host connected at the second.
  std::shared_ptr<SharedSides> shared_;  // a step's finisher job holds it too
  /// Held by a finisher job while it copies into the caller's memory; `gone` once the
  /// exchange is destroyed (its later jobs then touch nothing).
  struct SharedGuard {
    std::mutex mutex;
    bool gone = false;
  };
  std::shared_ptr<SharedGuard> guard_ = std::make_shared<SharedGuard>();
  std::vector<Hello> theirHellos_;
  std::vector<std::shared_ptr<group::Request>> hellos_;
  bool greeted_ = false;
  bool connected_ = false;
  std::uint64_t firstShared_ = 0;      // the first step with a shared part
  std::exception_ptr setUpError_;      // the greetings failed: every start raises it
  std::unique_ptr<StepFinisher> finisher_;
};

}  // namespace commux::halo
