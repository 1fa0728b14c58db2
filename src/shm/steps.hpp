#pragma once
// The step protocol of a shared-memory channel, over memory that every rank of the channel
// maps: a header, one control block per rank, two sets ("parities") of one slot per rank,
// so step s+1 can fill slots while slower ranks still read those of step s, and `depth` sets
// of one small slot per rank for the steps whose parts fit one: a rank runs up to `depth`
// small steps ahead of the slowest (what a broadcast's root or a reader that has its core
// needs when the ranks outnumber the cores).
//
// Every collective is a sequence of steps, numbered alike on every rank. In a step each rank
// fills its part of the step's slots, arrives, waits until every rank arrived, reads what
// it needs from the others' slots, and departs. A rank refills a slot set only after every
// rank has left the step that last used it (beginStep). Whether a step is small follows
// from the collective's sizes, which the ranks compare at its first step before any reads.
// A rank waits only for the ranks it reads from: in a broadcast or scatter the root fills the
// slots and leaves, the others wait for the root alone; in a reduce or gather the others fill
// their slots and leave, the root waits for them (as MPI's rooted collectives do: nobody
// waits for a rank it needs nothing from). A rank compares what it brought (kind, root,
// dtype, op, count) with what the ranks it waited for brought, at the first step of each
// collective. With `checkAll` (the debug setting COMMUX_CHECK_COLLECTIVES) every rank meets
// every other at the first step, so a mismatch fails every rank alike; without it, the ranks
// that see a mismatch fail, and the channel stays in step where the steps the others take
// allow it, else it breaks (see checkAgreement). The collectives themselves are built from
// these steps in shm/algorithms.cpp; who runs them, and when, is shm/channel.hpp's.
//
// Only one thread of a rank runs the steps at a time (the channel's lane holder); the
// health calls (abandon, peerDied, stop, broken...) are for any thread. If a rank abandons
// a collective half way (its Work timed out or was aborted, or the group went away), the
// channel is marked broken: what the others wait on fails with an error naming that rank,
// and the group refuses later collectives (it cannot know which of them the others ran).
#include <atomic>
#include <mutex>
#include <optional>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shm/bell.hpp"
#include "shm/job.hpp"
#include "shm/slot_copy.hpp"

namespace commux::engine {
class Op;
}

namespace commux::shm {

/// Sizes (bytes per rank) at which a collective reads the other ranks' buffers directly
/// (process_vm_readv, one copy instead of two through the slots): from `from` (0: never)
/// up to, not including, `below` (0: no end).
struct CmaRange {
  std::size_t from = 0;
  std::size_t below = 0;
  bool covers(std::size_t bytes) const noexcept {
    return from != 0 && bytes >= from && (below == 0 || bytes < below);
  }
};

/// The collective a single-copy read is for.
enum class CmaUse {
  Broadcast,  // the readers copy the root's buffer
  Rooted,     // gather (the root reads every block), scatter (each reader its block)
  Allgather,  // every rank reads every other's block
  Alltoall,   // every rank reads its piece of every other's input (each pair's count)
  Neighbours, // a neighbourhood exchange's receiver reads its neighbour's message (halo/)
  Count
};

/// Where each kind reads directly; agreed by every rank of a channel (the leader's choice).
struct CmaThresholds {
  CmaRange use[static_cast<int>(CmaUse::Count)];
  static constexpr int kWords = 2 * static_cast<int>(CmaUse::Count);
  /// The same range for every kind (a COMMUX_SHM_CMA_BYTES set by the user).
  static CmaThresholds all(std::size_t from) noexcept {
    CmaThresholds t;
    for (auto& r : t.use) r.from = from;
    return t;
  }
  const CmaRange& operator[](CmaUse u) const noexcept { return use[static_cast<int>(u)]; }
  CmaRange& operator[](CmaUse u) noexcept { return use[static_cast<int>(u)]; }
  /// As words for the segment header and the leader's announcement, and back.
  std::uint64_t word(int i) const noexcept { return i % 2 ? use[i / 2].below : use[i / 2].from; }
  void setWord(int i, std::uint64_t v) noexcept { (i % 2 ? use[i / 2].below : use[i / 2].from) = v; }
};

struct ChannelShape {
  int size = 0;
  std::size_t slotBytes = 0;   // per rank and parity; a multiple of 4096
  std::size_t smallBytes = 0;  // one-step algorithm up to here; the small slots' size
  /// The most of its slot a rank fills in one step of the collectives that copy their
  /// pieces through (allgather, gather, scatter, reduce_scatter, all-to-all); 0: all of it.
  /// Pieces this size stay in the cache between one rank's copy in and the other's copy
  /// out, while allreduce and broadcast gain from fewer, larger steps (each costs a round of
  /// waits).
  std::size_t copyStepBytes = 0;
  /// Sets of small slots: a rank may fill small step s + depth - 1 while the slowest still
  /// reads step s. A power of two (step numbers wrap), 2 to Steps::kMaxDepth.
  unsigned depth = 2;
  std::chrono::microseconds spin{0};
  std::chrono::nanoseconds poll{0};  // this process's own (Bell), not agreed
  CmaThresholds cma;                 // where single-copy reads (shm/cma.hpp) start
  /// Every rank meets every other at each collective's first step and checks them all.
  bool checkAll = false;
  /// The host's ranks outnumber the CPUs they may run on together (shm/host_cpus.hpp): the
  /// leader's verdict, from which the sizes above and each rank's poll follow.
  bool crowded = false;
  /// How this process writes large pieces into its slots (its own choice, not agreed).
  SlotCopyMode copyMode = SlotCopyMode::Auto;
};

/// Thrown out of a wait when the deadline of the thread running the steps passed: a waiter
/// that ran the channel's queue for its own Work, which then times out as usual.
struct DeadlineReached {};

/// One rank's run of one collective through the steps.
struct Turn {
  const Job& job;
  /// The collective: its description names it in errors, and once it is finished (timed
  /// out or aborted elsewhere) the waits stop.
  const engine::Op& op;
  /// The runner's: a waiter's wait deadline; max on the lane's own thread.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

/// What a rank marks, per step, for the others to wait on.
enum class Phase { Arrived, Reduced, Departed };

/// How a rank arrives at a collective's first step: it waits for every rank and checks
/// them all, goes on at once, or waits for (and checks) one rank.
enum class Role : std::uint32_t { Meet = 0, Lead = 1, Follow = 2 };

class Steps {
 public:
  static constexpr unsigned kMaxDepth = 16;
  /// Makes the signal the ranks ring and wait on (default: the futex Bell over `words`).
  using SignalMaker = std::function<std::unique_ptr<Signal>(BellWords* words)>;

  /// Bytes the channel's memory must hold for `shape`.
  static std::size_t bytesFor(const ChannelShape& shape);
  /// Lays the protocol over `memory` (zero-filled, mapped by every rank); the creator
  /// (`initialise`) writes the header that the others check. `rank` is this rank's index
  /// in the channel; `members` gives the group rank of each index, which is what messages
  /// name and peerDied takes.
  Steps(char* memory, std::size_t bytes, std::string name, int rank, const ChannelShape& shape,
        bool initialise, std::vector<int> members, const SignalMaker& signal = {});
  Steps(const Steps&) = delete;
  Steps& operator=(const Steps&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return shape_.size; }
  const ChannelShape& shape() const noexcept { return shape_; }
  /// The group rank of channel index `index`.
  int groupRank(int index) const noexcept { return members_[static_cast<std::size_t>(index)]; }

  // Health, any thread.
  /// True once some rank abandoned a collective half way.
  bool broken() const noexcept;
  /// Marks the channel broken by this rank and wakes every waiter.
  void abandon();
  /// Group rank `rank` died (`why`, as this process heard it: seen, or told by whom); marks
  /// the channel broken in its name and wakes every waiter.
  void peerDied(int rank, const std::string& why = "");
  /// Group rank `rank` left the group with its process alive (marked by itself as it
  /// leaves, or by a member its notice reached, with `why` as heard there): every member's
  /// collectives numbered from `through` on fail naming it; those before run to their end.
  /// Of several that left, the earliest `through` stays.
  void markLeft(int rank, std::uint32_t through, const std::string& why = "");
  /// The member that left (markLeft) before its part in the collective numbered
  /// `sequence` (any, when absent), or -1.
  int leftBefore(std::optional<std::uint32_t> sequence) const noexcept;
  /// Why `turn`'s collective cannot complete because a member left before its part in it
  /// (markLeft); empty if none did.
  std::string leftBeforeReason(const Turn& turn) const;
  /// The group rank found dead (by this rank or another survivor), or -1.
  int deadRank() const noexcept;
  /// Why the channel is broken, naming the rank; empty while it is not.
  std::string brokenReason() const;
  /// The channel goes away: every wait ends now, abandoning the collective it was in.
  void stop();
  bool stopped() const noexcept { return stopped_.load(); }

  // The steps, for the one thread that runs them.
  /// A collective with steps begins. Every rank counts them, so a rank that waits for
  /// another at some step can tell whether it reached that step in the same collective:
  /// after a mismatch that nobody saw (two ranks that both led) their step numbers may
  /// have parted, and the first wait between them then breaks the channel instead of
  /// reading the other's slots of another collective.
  void beginCollective() noexcept { ++seq_; }
  /// Next step: waits until every rank left the step that last used its slot set. `small`:
  /// every rank's part of the step fits a small slot (smallSlotBytes).
  std::uint32_t beginStep(const Turn& turn, bool small = false);
  /// Bytes of one small slot.
  std::size_t smallSlotBytes() const noexcept { return smallSlot_; }
  /// Arrives at step `s` and waits for every rank; the first step of a collective checks
  /// that the ranks agree.
  void meet(std::uint32_t s, const Turn& turn, bool first);
  /// Arrives at step `s` and goes on at once: this rank reads nothing in it (a broadcast's
  /// or scatter's root, a reduce's or gather's other ranks). `steps` is how many steps this
  /// rank's collective takes, which a rank that finds a mismatch needs to stay in step.
  void lead(std::uint32_t s, const Turn& turn, bool first, std::uint32_t steps);
  /// Arrives at step `s` and waits for rank `from` alone, whose slots this rank reads; the
  /// first step of a collective checks that `from` called the same one.
  void follow(std::uint32_t s, const Turn& turn, int from, bool first, std::uint32_t steps);
  /// This rank reached `phase` of step `s`.
  void mark(Phase phase, std::uint32_t s);
  /// Waits until every rank reached `phase` of step `s`; throws when interrupted.
  void waitAll(Phase phase, std::uint32_t s, const Turn& turn);
  /// Whether a wait of `turn` must stop: its collective finished elsewhere, the channel
  /// stopped or broke, or the deadline passed.
  bool interrupted(const Turn& turn) const;
  /// Ends a wait that was interrupted: throws why (abandoning the channel first when it is
  /// this rank that leaves, so the others stop waiting for it).
  [[noreturn]] void leave(const Turn& turn);
  char* slot(std::uint32_t s, int rank) const noexcept;
  /// Writes `bytes` into a slot for the others to read (shm/slot_copy.hpp); the runner's.
  void copyToSlot(char* to, const void* from, std::size_t bytes) noexcept {
    slotCopy_.copy(to, from, bytes);
  }
  /// Whether a collective of kind `use` moving `bytes` per rank reads the others' buffers
  /// directly.
  bool cmaFor(CmaUse use, std::size_t bytes) const noexcept { return shape_.cma[use].covers(bytes); }
  /// Publishes `buffer` for the others to read in step `s`.
  void publish(std::uint32_t s, const void* buffer);
  /// Copies `bytes` at `offset` of what `rank` published in step `s` to `to`; on failure
  /// breaks the channel (after leaving the step) and throws.
  void readFrom(std::uint32_t s, int rank, std::size_t offset, void* to, std::size_t bytes,
                const Turn& turn);

 private:
  struct Control;
  struct Header;
  static std::size_t controlsOffset();
  static std::size_t slotsOffset(int size);
  std::uint32_t Control::*field(Phase phase) const noexcept;
  /// Publishes this rank's descriptor for step `s` and marks it Arrived.
  void arrive(std::uint32_t s, const Turn& turn, Role role, int from, std::uint32_t steps);
  /// Throws, breaking the channel, unless rank `index` arrived at step `s` in this rank's
  /// collective (see beginCollective).
  void checkInStep(std::uint32_t s, int index, const Turn& turn);
  /// Breaks the channel because this rank found a mismatch whose ranks end at different
  /// steps, and returns why (for the error message).
  std::string breakOverMismatch();
  /// Waits until rank `index` reached `phase` of step `s`; throws when interrupted.
  void waitOne(Phase phase, std::uint32_t s, int index, const Turn& turn);
  /// Throws when this rank's descriptor of step `s` differs from those of the ranks it
  /// waited for (`from`, or every rank when `from` is -1), ending its part of the
  /// collective where the ranks that do not check end theirs, or breaking the channel.
  void checkAgreement(std::uint32_t s, const Turn& turn, int from);
  /// "rank N died (why)" (or "left the group") as this process heard of group rank `dead`.
  std::string lost(int dead) const;
  /// "rank N left the group (why) before its part in this collective".
  std::string leftMessage(int left) const;
  /// The member that left (markLeft) before its part in `turn`'s collective, or -1.
  int leftBefore(const Turn& turn) const;
  /// The reason the channel is broken when rank `by` broke it (group ranks).
  std::string brokenBecause(int by) const;

  const std::string name_;
  const int rank_;
  const ChannelShape shape_;
  const std::vector<int> members_;
  Header* header_;
  Control* controls_;
  char* slots_;
  std::unique_ptr<Signal> signal_;
  SlotCopy slotCopy_{shape_.copyMode};
  std::size_t smallSlot_;
  char* small_;                     // the small slots
  std::uint32_t step_ = 0;          // the runner's
  bool stepSmall_[kMaxDepth] = {};  // the runner's: whether step s % kMaxDepth is small
  std::uint64_t seq_ = 0;           // the runner's: collectives with steps so far
  std::atomic<bool> stopped_{false};
  std::atomic<int> dead_{-1};  // a rank found dead, or -1
  mutable std::mutex deadMutex_;
  std::string deadWhy_;  // under deadMutex_: why dead_ died, as this process heard it
  std::map<int, std::string> leftWhy_;  // under deadMutex_: why members left, as heard here
};

}  // namespace commux::shm
