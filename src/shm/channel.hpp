#pragma once
// The shared-memory path for collectives between the ranks of a group that all run on one
// host (the way MPI and UCC do it): one segment per group, mapped by every rank, with two
// sets ("parities") of one slot per rank, so step s+1 can fill slots while slower ranks
// still read those of step s.
//
// Every collective is a sequence of steps, numbered alike on every rank. In a step each rank
// fills its part of the parity's slots, arrives, waits until every rank arrived, reads what
// it needs from the others' slots, and departs. The first step of a collective also
// compares what each rank brought (shm/collective_op.hpp: kind, root, dtype, op, count), so
// mismatched calls fail on every rank alike and the channel stays in step. A rank refills a
// parity only after every rank has left the step that last used it. Waits spin briefly and
// then sleep on a futex (shm/bell.hpp). The algorithms (channel_collectives.cpp):
//  - allreduce, small buffers (<= COMMUX_SHM_SMALL_BYTES): each rank copies its data into
//    its slot; every rank folds all slots itself, in rank order, so the results agree bit
//    for bit. One synchronisation per allreduce. Reduce: only the root folds.
//  - allreduce, larger ones, in chunks of COMMUX_SHM_SLOT_BYTES: each rank copies its chunk
//    in; rank r folds block r of every slot into slot 0 and reports; every rank copies slot
//    0 out. Each byte is reduced once, by one rank, and the copies run in parallel.
//  - broadcast: the root fills all slots of the parity, the others copy them out.
//  - allgather, gather: each rank fills its slot with a chunk of its block; readers copy
//    every slot out. scatter: the root fills every rank's slot with its block's chunk.
//  - reduce_scatter, all_to_all: each rank's slot holds one piece per destination rank; the
//    destination folds (reduce_scatter, in rank order) or copies its piece out of every
//    slot. all_to_all pieces may differ in size: each slot starts with the rank's send and
//    receive counts, which every rank checks against each other in the first step.
//  - from COMMUX_SHM_CMA_BYTES per rank, broadcast, (all)gather, scatter and all_to_all
//    publish their buffers' addresses instead and the readers copy straight out of the
//    owner's memory (process_vm_readv, shm/cma.hpp): one copy, all readers at once. The
//    owner leaves once every reader has.
//
// The collectives run one after another in issue order, which is the order every rank
// issues collectives in, on the lane (shm/lane.hpp): its own thread, or a thread waiting for
// one of them. Exactly one thread runs the step protocol at a time. If a rank abandons a collective
// half way (its Work timed out or was aborted, or the group was destroyed), the channel is
// marked broken: what the other ranks wait on fails with an error naming that rank, and
// the group refuses later collectives (it cannot know which of them the others ran).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shm/bell.hpp"
#include "shm/lane.hpp"
#include "shm/segment.hpp"

namespace at {
class Tensor;
}
namespace commux::engine {
class Engine;
}

namespace commux::shm {

class CollectiveOp;
struct HostParts;
struct Job;

struct ChannelShape {
  int size = 0;
  std::size_t slotBytes = 0;   // per rank and parity; a multiple of 4096
  std::size_t smallBytes = 0;  // one-step algorithm up to here
  std::chrono::microseconds spin{0};
  std::size_t cmaBytes = 0;  // single-copy reads (shm/cma.hpp) from here; 0: never
};

class Channel {
 public:
  /// Bytes the segment must hold for `shape`.
  static std::size_t segmentBytes(const ChannelShape& shape);
  /// Lays the channel out over `segment`; the creator (`initialise`) writes the header
  /// that the others check.
  /// `rank` is this rank's index in the channel; `members` gives the group rank of each
  /// index, which is what messages name and peerDied takes.
  Channel(std::unique_ptr<Segment> segment, int rank, const ChannelShape& shape,
          bool initialise, std::shared_ptr<engine::Engine> engine, std::vector<int> members);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  Segment& segment() noexcept { return *segment_; }
  /// True once some rank abandoned a collective half way.
  bool broken() const noexcept;
  /// Any thread: marks the channel broken by this rank and wakes every waiter.
  void abandon();
  /// Any thread: group rank `rank` died; marks the channel broken in its name and wakes every waiter.
  void peerDied(int rank);
  /// The group rank found dead (by this rank or another survivor), or -1.
  int deadRank() const noexcept;
  /// Why the channel is broken, naming the rank; empty while it is not.
  std::string brokenReason() const;
  /// Any thread: run `op` after those queued before it.
  void enqueue(std::shared_ptr<CollectiveOp> op);
  /// A thread about to wait for `op`: runs it here, with the operations queued before it,
  /// unless another thread runs the queue. Past `deadline` it gives up (abandoning the
  /// channel) and leaves `op` unfinished, for the caller's wait to time out as usual.
  void runFromWaiter(const std::shared_ptr<CollectiveOp>& op,
                     std::chrono::steady_clock::time_point deadline);

 private:
  struct Control;
  struct Header;
  static std::size_t controlsOffset();
  static std::size_t slotsOffset(int size);

  /// The lane's holder: runs `op` and reports it to the engine (the waiter's own, `mine`:
  /// returns the report, for after it let go of the lane), unless it stopped at `deadline`
  /// and, being the waiter's own, is left for its wait to time out.
  std::function<void()> runOne(const std::shared_ptr<CollectiveOp>& op,
                               std::chrono::steady_clock::time_point deadline, bool onLane,
                               bool mine);
  /// The collective's steps (channel_collectives.cpp); throws on failure.
  void run(CollectiveOp& op);
  /// A collective of a group that spans hosts: its parts here and across (channel_hierarchy.cpp).
  /// Any failure abandons the channel: this host's other ranks may wait in a later part.
  void runHierarchical(CollectiveOp& op);
  void runParts(CollectiveOp& op);
  /// Part of a hierarchical collective: `job` through this channel, as op's own.
  void runPart(CollectiveOp& op, Job job);
  /// This rank's part between hosts; DeadlineReached when it gave up at the deadline of the
  /// waiter running it.
  void runCross(const HostParts& hierarchy, const at::Tensor& buffer, CollectiveOp& op);
  void allreduceSmall(CollectiveOp& op);
  void allreduceChunked(CollectiveOp& op);
  void broadcast(CollectiveOp& op);
  void allgather(CollectiveOp& op);
  void scatter(CollectiveOp& op);
  void reduceScatter(CollectiveOp& op);
  void alltoall(CollectiveOp& op);
  /// Next step: waits until every rank left the step that last used its parity.
  std::uint32_t beginStep(CollectiveOp& op);
  /// Arrives at step `s` and waits for every rank; the first step of a collective checks
  /// that the ranks agree.
  void meet(std::uint32_t s, CollectiveOp& op, bool first);
  /// Whether a collective moving `bytes` per rank reads the others' buffers directly.
  bool cmaFor(std::size_t bytes) const noexcept {
    return shape_.cmaBytes != 0 && bytes >= shape_.cmaBytes;
  }
  /// Publishes `buffer` for the others to read in step `s`.
  void publish(std::uint32_t s, const void* buffer);
  /// Copies `bytes` at `offset` of what `rank` published in step `s` to `to`; on failure
  /// breaks the channel (after leaving the step) and throws.
  void readFrom(std::uint32_t s, int rank, std::size_t offset, void* to, std::size_t bytes,
                CollectiveOp& op);
  /// Waits until every rank's `field` reached step `s`; throws when interrupted.
  void waitAll(std::uint32_t Control::*field, std::uint32_t s, CollectiveOp& op);
  void arrive(std::uint32_t s, const CollectiveOp& op);
  void mark(std::uint32_t Control::*field, std::uint32_t s);
  /// Throws (on every rank alike) when the ranks' descriptors of step `s` differ.
  void checkAgreement(std::uint32_t s, CollectiveOp& op);
  char* slot(std::uint32_t s, int rank) const noexcept;
  /// The group rank of channel index `index`.
  int groupRank(int index) const noexcept {
    return members_[static_cast<std::size_t>(index)];
  }
  /// all_to_all: every rank's send and receive counts must match pairwise (the first step's
  /// slot headers); throws on every rank alike when they do not.
  void checkAlltoallCounts(std::uint32_t s, CollectiveOp& op);

  std::unique_ptr<Segment> segment_;
  const int rank_;
  const ChannelShape shape_;
  const std::vector<int> members_;
  Header* header_;
  Control* controls_;
  char* slots_;
  Bell bell_;
  std::shared_ptr<engine::Engine> engine_;
  // The lane's holder only (shm/lane.hpp): the step counter, and the deadline of the
  // waiter running the current operation (the lane's thread: none).
  std::uint32_t step_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::uint64_t hook_ = 0;
  std::atomic<bool> stopFlag_{false};
  std::atomic<int> dead_{-1};  // a rank found dead, or -1
  // Last: its thread runs operations on everything above.
  Lane<CollectiveOp> lane_;
};

}  // namespace commux::shm
