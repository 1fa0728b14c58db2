#pragma once
// The neighbours of an exchange that share this host, without UCX: each receiver copies its
// neighbour's message straight from the sender's memory into its own where it lies in long
// rows (process_vm_readv: one copy, where a message through UCX's shared-memory transports
// is copied in and out), or, where its pieces are short, the sender packs it into a segment
// it owns and the receiver has mapped, and the receiver unpacks it from there (no system
// call). Two counters per message, in the sender's segment, say when the message is
// ready (the sender's start) and when it has been read (the receiver's copy is done: only
// then may the sender's wait return and its memory change). Each rank's segment also holds
// its doorbell (shm::Bell): whoever moves a counter another rank waits for rings that rank's
// bell, so a waiter polls, then yields, then sleeps, as the host's collectives do.
// The two ranks of a pair learn each other's addresses from one Hello each way, sent on the
// exchange's tag with its first step to every neighbour (whether a rank has its host's
// channel yet is its own view: the Hellos make it both ranks'); both decide alike from the
// two Hellos, per direction.
#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "halo/row_copy.hpp"
#include "shm/bell.hpp"
#include "shm/steps.hpp"

namespace commux::shm {
class Segment;
}  // namespace commux::shm

namespace commux::halo {

/// What a rank tells a neighbour on its host before the shared steps: plain words, between
/// processes of one host (one ABI).
struct Hello {
  static constexpr std::uint64_t kMagic = 0x314f4c4148584d43ull;  // "CMXHALO1"
  static constexpr std::size_t kMaxRows = 64;                     // more: the sender packs
  struct Row {
    std::uint64_t address;
    std::uint64_t bytes;
    std::int64_t stride;
    std::uint64_t count;
  };
  std::uint64_t magic = 0;
  std::int32_t pid = 0;
  std::uint32_t index = 0;  // the pair's counters in the sender's segment
  std::uint64_t segmentBytes = 0;
  std::uint64_t sendBytes = 0;  // what this rank sends the neighbour a step
  std::uint64_t recvBytes = 0;  // what it receives from it
  std::uint32_t sends = 0;
  std::uint32_t receives = 0;
  std::uint32_t rowCount = 0;   // where its message lies: rows of its memory, or
  std::uint64_t stagedAt = 0;   // where in its segment it stages the message (0: it does not)
  std::uint32_t shares = 0;     // 1: the neighbour is on its host's channel, which allows it
  std::uint64_t rangeFrom = 0;  // the channel's sizes that go shared (shm::CmaRange)
  std::uint64_t rangeBelow = 0;
  char segment[64] = {};  // the segment's name (shm::Segment)
  Row rows[kMaxRows] = {};
};

class SharedSides {
 public:
  /// One neighbour on this host, as the exchange holds it.
  struct Neighbour {
    std::size_t side = 0;  // the exchange's index
    int rank = -1;
    bool local = false;  // on this host's channel
    bool sends = false;
    bool receives = false;
    std::size_t sendBytes = 0;
    std::size_t recvBytes = 0;
    const std::vector<Rows>* sendRows = nullptr;
    const std::vector<Rows>* recvRows = nullptr;
    /// The process the group's peer record names for `rank` (the one its death watch
    /// follows); -1 when unknown or in another PID namespace (its pid means another
    /// process here). A greeting that names another process shares nothing.
    std::int64_t pid = -1;
  };

  /// Makes this rank's segment (where a neighbour is local) and its Hellos. `range`: which
  /// message sizes go shared (the host's agreed CmaUse::Neighbours; none without a
  /// channel); `spin`/`poll`: the host channel's waits.
  SharedSides(std::vector<Neighbour> neighbours, shm::CmaRange range,
              std::chrono::microseconds spin, std::chrono::nanoseconds poll);
  ~SharedSides();
  SharedSides(const SharedSides&) = delete;
  SharedSides& operator=(const SharedSides&) = delete;

  std::size_t size() const noexcept { return peers_.size(); }
  int rank(std::size_t i) const { return peers_.at(i).n.rank; }
  /// What this rank sends neighbour `i` first.
  const Hello& hello(std::size_t i) const { return peers_.at(i).mine; }
  /// Reads the neighbours' Hellos (index for index) and decides each direction: shared when
  /// both ranks have it and its size is in the range. Raises InvalidArgument, naming the
  /// rank, when the two disagree on what goes between them, or a Hello is malformed.
  void connect(const std::vector<Hello>& theirs);
  /// Whether exchange side `side` sends (receives) through here.
  bool sendsShared(std::size_t side) const noexcept;
  bool receivesShared(std::size_t side) const noexcept;
  bool active() const noexcept { return active_; }

  /// The message to exchange side `side` holds step `step`'s values: packs it where it is
  /// packed and lets the neighbour read it.
  void markReady(std::size_t side, std::uint64_t step);
  /// Without blocking: copies in what is ready; true once every shared message of `step`
  /// has been read here and every one this rank sent has been read by its neighbour.
  /// Raises (Backend) when a copy fails.
  bool advance(std::uint64_t step);
  /// Whether neighbour `i`'s part of `step` is over here: its message read, and this rank's
  /// read by it (true for a neighbour with neither direction shared: advance() never waits
  /// for it). A neighbour that is gone then is no reason to fail the step: it ended its part
  /// (the step may still wait for another). Only on the thread running advance()/finish():
  /// it reads what advance() writes there without synchronisation.
  bool doneWith(std::size_t i, std::uint64_t step) const;
  /// Until advance(step) is true. `interrupted` is asked every few milliseconds at most: a
  /// non-empty answer ends the wait with a Backend error saying it.
  void finish(std::uint64_t step, const std::function<std::string()>& interrupted);
  /// Wakes a finish() sleeping on this rank's bell (it then asks `interrupted`).
  void wake();
  /// This rank gives up step `step` (it failed here): its messages of the step not read yet
  /// are marked abandoned, so a neighbour fails its step rather than finish a copy of
  /// memory this rank's caller may now change (a copy under way when the mark comes is
  /// checked after it ends). Any thread.
  void abandon(std::uint64_t step) noexcept;
  /// Every neighbour has mapped this rank's segment: withdraw the way to open it.
  void withdraw();

 private:
  struct Peer {
    Neighbour n;
    Hello mine;
    pid_t pid = 0;
    bool sendShared = false;
    bool recvShared = false;
    std::unique_ptr<shm::Segment> theirs;  // their segment: their counters and bell
    std::uint64_t* myReady = nullptr;      // mine, for my message to them
    std::uint64_t* myTaken = nullptr;      // mine, written by them
    std::uint64_t* theirReady = nullptr;   // theirs, for their message to me
    std::uint64_t* theirTaken = nullptr;   // theirs, written by me
    std::unique_ptr<shm::Bell> theirBell;
    std::vector<iovec> local;                // where their message goes here
    std::vector<iovec> remote;               // where it lies in their memory
    std::uint64_t read = 0;                  // the last step read here
    char* packInto = nullptr;                // this rank's message staged in its segment, or null
    const char* stagedFrom = nullptr;        // theirs, staged in their segment, or null
    std::unique_ptr<char[]> ownRecvStaging;  // theirs read in one piece, then unpacked
    char* unpackFrom = nullptr;
  };

  void check(const Peer& p, const Hello& h) const;
  /// Their message's "ready" counter says they abandoned step `step`.
  [[noreturn]] void failAbandoned(const Peer& p) const;

  std::vector<Peer> peers_;
  std::vector<int> bySide_;  // exchange side -> index in peers_, or -1
  shm::CmaRange range_;
  std::unique_ptr<shm::Segment> segment_;
  std::unique_ptr<shm::Bell> bell_;
  bool active_ = false;
};

}  // namespace commux::halo
