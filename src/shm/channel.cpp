#include "shm/channel.hpp"

#include <algorithm>
#include <optional>

#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "shm/algorithms.hpp"
#include "shm/channel_op.hpp"

namespace commux::shm {
namespace {

// The operation the waiter on this thread runs the lane for (Channel::runFromWaiter).
thread_local const ChannelOp* waitedHere = nullptr;

}  // namespace

Channel::Channel(std::unique_ptr<Segment> segment, int rank, const ChannelShape& shape,
                 bool initialise, std::shared_ptr<engine::Engine> engine, std::vector<int> members)
    : segment_(std::move(segment)),
      steps_(segment_->data(), segment_->size(), segment_->name(), rank, shape, initialise,
             std::move(members)),
      engine_(std::move(engine)),
      lane_([this](const std::shared_ptr<ChannelOp>& op,
                   std::chrono::steady_clock::time_point deadline, bool onLane,
                   bool mine) { return runOne(op, deadline, onLane, mine); },
            "commux-shm") {
  // The engine's hand-off: the lane's thread takes over what no waiter ran.
  hook_ = engine_->addHandOffHook([this] { lane_.wake(); });
}

std::shared_ptr<Channel> Channel::make(std::unique_ptr<Segment> segment, int rank,
                                       const ChannelShape& shape, bool initialise,
                                       std::shared_ptr<engine::Engine> engine,
                                       std::vector<int> members) {
  return std::shared_ptr<Channel>(
      new Channel(std::move(segment), rank, shape, initialise, std::move(engine),
                  std::move(members)),
      [](Channel* channel) {
        if (channel->lane_.onThread()) {
          engine::Engine::destroyOnHelperThread([channel] { delete channel; });
        } else {
          delete channel;
        }
      });
}

Channel::~Channel() {
  engine_->removeHandOffHook(hook_);
  // Queued operations still run when the group goes away: their waits end at once, which
  // marks the channel broken for the peers.
  steps_.stop();
  // The lane may drop the last reference to a tensor owned by a Python object, which needs
  // the GIL; a group destroyed from Python holds it here.
  lane_.stop([](std::thread& thread) {
    engine::Engine::runBlocking([](void* t) { static_cast<std::thread*>(t)->join(); }, &thread);
  });
}

void Channel::enqueue(std::shared_ptr<ChannelOp> op) {
  // A caller that waits right away runs the operation itself (runFromWaiter), which saves
  // waking the lane's thread and handing the result back; the engine's hand-off wakes it
  // for operations nobody waits on, as it does for UCX operations. An operation started by
  // another thread (the progress thread or a parked waiter ran its queued start: the
  // worker lock was taken, or it waited for a CUDA stream) may already have a waiter that
  // looked for it and went to sleep: the lane's thread runs it now.
  lane_.push(std::move(op), !engine::Engine::startingForCaller());
}

void Channel::runFromWaiter(const std::shared_ptr<ChannelOp>& op,
                            std::chrono::steady_clock::time_point deadline) {
  // What this thread completes while it holds the lane (its wait at a gate drives the
  // worker) runs its users' callbacks only once it let go of the lane: a callback may wait
  // for a later collective of this channel, which must be able to run it.
  const engine::Engine::HoldsLane holding;
  const ChannelOp* const outer = waitedHere;
  waitedHere = op.get();
  lane_.runFromWaiter(op, deadline);
  waitedHere = outer;
}

std::function<void()> Channel::runOne(const std::shared_ptr<ChannelOp>& op,
                                      std::chrono::steady_clock::time_point deadline, bool onLane,
                                      bool mine) {
  // The lane's thread never drives the worker, so never runs a user callback or future.
  std::optional<engine::Engine::NeverDrives> neverDrives;
  if (onLane) neverDrives.emplace();
  const Turn turn{op->job(), *op, deadline};
  // An earlier part of the collective the waiter on this thread waits for (c10d's
  // HierarchicalOp): the waiter carries it on itself.
  const bool partOfMine = !onLane && !mine && waitedHere != nullptr && op->whole() != nullptr &&
                          op->whole() == waitedHere->whole();
  std::exception_ptr error;
  try {
    if (op->job().gate) passGate(*op->job().gate, turn);
    op->prepare();
    if (op->job().kind != Kind::Hold) runCollective(steps_, turn);
    op->markRan();
    if (!op->finished()) op->finalize();
  } catch (const DeadlineReached&) {
    // The waiter's own timeout reports it, also in an earlier part of its collective.
    if (mine || partOfMine) return {};
    op->markRan();
    error = engine::commError("commux: " + op->description() +
                              ": abandoned half way: a later collective ran it on a waiting "
                              "thread whose wait timed out");
  } catch (...) {
    op->markRan();
    error = std::current_exception();
  }
  // The waiter's own operation is reported on its thread once it let go of the lane (the
  // report may run future callbacks that wait for a later collective of this channel);
  // others' by the driver, as the lane's thread does. An earlier part of the waiter's own
  // collective is reported here and now: that only starts the next part (the crossing
  // between hosts), which the waiter then drives while it waits at the gate, with no thread
  // hand-off; a failure completes the Work, whose callbacks wait for the lane to be let go
  // (Engine::HoldsLane).
  auto report = [engine = engine_, op, error](engine::Drive drive) {
    try {
      engine->submit(engine::Submission::finish(op, error).drive(drive));
    } catch (...) {
      // The engine has shut down; it failed the operation already.
    }
  };
  if (partOfMine) {
    report(engine::Drive::IfFree);
    return {};
  }
  if (onLane || !mine) {
    report(engine::Drive::Never);
    return {};
  }
  return [report] { report(engine::Drive::IfFree); };
}

void Channel::passGate(engine::DoneFlag& gate, const Turn& turn) {
  // Slices that each spin and drive the worker, not Engine::waitUnless (whose later
  // stretches do not): with waitUnless here a leader's hierarchical collective once failed
  // with the channel's "died during this shared-memory collective" instead of the death
  // notice's error naming who told it (test_a_death_on_one_host_fails_every_other_hosts_
  // collective, one CI run). Driving the worker likely brings the notice in sooner.
  while (!gate.done()) {
    if (steps_.interrupted(turn)) steps_.leave(turn);
    // Look at the turn now and then: its end (timed out, aborted, the channel broke) does
    // not open the gate.
    engine_->wait(gate, std::min(turn.deadline,
                                 std::chrono::steady_clock::now() + std::chrono::milliseconds(20)));
  }
}

}  // namespace commux::shm
