#pragma once
// The shared-memory path for collectives between the ranks of a group that run on one host
// (the way MPI and UCC do it): one segment per group (or per host, for a group that spans
// hosts), mapped by every rank. Three parts, one idea each:
//  - the step protocol over the segment (shm/steps.hpp), and the collectives built from
//    its steps (shm/algorithms.hpp);
//  - the lane (shm/lane.hpp): the queue of the channel's collectives and the rule for who
//    runs it, so exactly one thread runs the steps at a time, in issue order (the order
//    every rank issues collectives in);
//  - this class, which joins them to the engine: a collective is an engine Op
//    (shm/channel_op.hpp) that starting queues here, and whose outcome goes back
//    through a finish submission (Submission::finish).
// The lane's thread never drives the worker (Engine::NeverDrives), so it never runs user
// callbacks or futures. A part of a collective that spans hosts waits for the part between
// hosts (Job::gate, set by the group's HierarchicalOp) through Engine::wait, like any waiter.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shm/lane.hpp"
#include "shm/segment.hpp"
#include "shm/steps.hpp"

namespace commux::engine {
class Engine;
}

namespace commux::shm {

class ChannelOp;

class Channel {
 public:
  /// Bytes the segment must hold for `shape`.
  static std::size_t segmentBytes(const ChannelShape& shape) { return Steps::bytesFor(shape); }
  /// `rank` is this rank's index in the channel; `members` gives the group rank of each
  /// index. The creator of the segment (`initialise`) lays it out; the others check it.
  /// Whatever runs on the lane's thread (an operation's finalize) may let go of the last
  /// reference there, where the destructor, which joins that thread, cannot run: the
  /// channel is then destroyed on a helper thread.
  static std::shared_ptr<Channel> make(std::unique_ptr<Segment> segment, int rank,
                                       const ChannelShape& shape, bool initialise,
                                       std::shared_ptr<engine::Engine> engine,
                                       std::vector<int> members);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  Segment& segment() noexcept { return *segment_; }
  const ChannelShape& shape() const noexcept { return steps_.shape(); }
  /// True once some rank abandoned a collective half way.
  bool broken() const noexcept { return steps_.broken(); }
  /// Any thread: marks the channel broken by this rank and wakes every waiter.
  void abandon() { steps_.abandon(); }
  /// Any thread: group rank `rank` died; marks the channel broken in its name.
  void peerDied(int rank, const std::string& why = "") { steps_.peerDied(rank, why); }
  /// Any thread: group rank `rank` left the group (its process lives on) having done its
  /// part in the collectives numbered before `through` (Steps::markLeft): marked by the
  /// leaver itself, or on its behalf by a member its notice reached first.
  void markLeft(int rank, std::uint32_t through, const std::string& why = "") {
    steps_.markLeft(rank, through, why);
  }
  /// The member that left before its part in the collective numbered `sequence`, or -1:
  /// every member fails that collective alike, so one failing it need not abandon.
  int leftBefore(std::optional<std::uint32_t> sequence) const noexcept {
    return steps_.leftBefore(sequence);
  }
  /// The group rank found dead (by this rank or another survivor), or -1.
  int deadRank() const noexcept { return steps_.deadRank(); }
  /// Whether group rank `rank` is a member (on this host).
  bool hosts(int rank) const noexcept {
    for (int i = 0; i < shape().size; ++i) {
      if (steps_.groupRank(i) == rank) return true;
    }
    return false;
  }
  /// Why the channel is broken, naming the rank; empty while it is not.
  std::string brokenReason() const { return steps_.brokenReason(); }
  /// Any thread: run `op` after those queued before it.
  void enqueue(std::shared_ptr<ChannelOp> op);
  /// A thread about to wait for `op`: runs it here, with the operations queued before it,
  /// unless another thread runs the queue. Past `deadline` it gives up (abandoning the
  /// channel) and leaves `op` unfinished, for the caller's wait to time out as usual.
  void runFromWaiter(const std::shared_ptr<ChannelOp>& op,
                     std::chrono::steady_clock::time_point deadline);

 private:
  Channel(std::unique_ptr<Segment> segment, int rank, const ChannelShape& shape, bool initialise,
          std::shared_ptr<engine::Engine> engine, std::vector<int> members);

  /// The lane's holder: runs `op` and reports it to the engine (the waiter's own, `mine`:
  /// returns the report, for after it let go of the lane), unless it stopped at `deadline`
  /// and, being the waiter's own, is left for its wait to time out.
  std::function<void()> runOne(const std::shared_ptr<ChannelOp>& op,
                               std::chrono::steady_clock::time_point deadline, bool onLane,
                               bool mine);
  /// Waits for `gate` (the part between hosts that this part comes after); throws as a
  /// wait of the steps does when interrupted.
  void passGate(engine::DoneFlag& gate, const Turn& turn);
  std::unique_ptr<Segment> segment_;
  Steps steps_;
  std::shared_ptr<engine::Engine> engine_;
  std::uint64_t hook_ = 0;
  // Last: its thread runs operations on everything above.
  Lane<ChannelOp> lane_;
};

}  // namespace commux::shm
