#pragma once
// What one rank knows about its group's health: which members died (and why), and whether
// a collective failed here. After a failed collective the ranks may be out of step (some
// ran collectives this rank abandoned, and their messages may still arrive), so the group
// refuses further collectives instead of matching stale traffic; point-to-point operations
// with live peers go on. Shared with the group's Works, whose failures report here.
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace commux::core {

/// How a member that left on purpose (it destroyed, shut down or aborted its group and told
/// its peers) is described: the words gloo uses for a peer that closed its connection, which
/// torchft and users' scripts match on.
inline constexpr const char* kClosedByPeer = "Connection closed by peer";

/// "rank N died (why)", or "rank N left the group (why)" when `why` says it left
/// (kClosedByPeer): the one wording of a lost member on every path.
std::string lostMember(int rank, const std::string& why);

class GroupHealth {
 public:
  explicit GroupHealth(int size)
      : dead_(static_cast<std::size_t>(size)), through_(static_cast<std::size_t>(size)) {}

  /// Records that `rank` died; false if it was known already. `through`: it left the group
  /// (its process lives on) having done its part in every collective numbered before
  /// `through` and in none from it on; absent for a death.
  bool markDead(int rank, const std::string& why,
                std::optional<std::uint32_t> through = std::nullopt);
  /// Why `rank` is dead; empty while it lives.
  std::string deadWhy(int rank) const;
  /// markDead's `through` for a member that left; absent for a death or a live member.
  std::optional<std::uint32_t> leftThrough(int rank) const;
  /// The first rank found dead (or -1) and why.
  int firstDead(std::string* why) const;
  /// As firstDead, for an any-source receive: the first member that died, or, when every
  /// other member is gone (left or died), the first found gone; -1 while only some members
  /// left (the others may still send).
  int firstLostForAnySource(std::string* why) const;
  /// As firstDead, for the collective numbered `sequence`: skips the members that left
  /// having done their part in it (markDead's `through`).
  int firstDeadFor(std::uint32_t sequence, std::string* why) const;
  /// Whether the collective numbered `sequence` can no longer complete for want of `rank`:
  /// it died, or left before its part in that collective.
  bool lostFor(int rank, std::uint32_t sequence) const;
  std::vector<int> deadRanks() const;
  bool anyDead() const noexcept { return anyDead_.load(std::memory_order_acquire); }

  /// A collective failed on this rank with `error`. Argument errors that every rank raised
  /// alike (ValueError) leave the group in step and are not recorded.
  void collectiveFailed(std::exception_ptr error);
  /// Records a collective failure described by `why` (first one wins).
  void collectiveFailed(const std::string& why);
  /// Why collectives are refused; empty while they are not.
  std::string collectiveFailure() const;
  bool anyCollectiveFailed() const noexcept {
    return collectiveFailed_.load(std::memory_order_acquire);
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> dead_;
  std::vector<std::optional<std::uint32_t>> through_;  // by rank, for those that left
  std::vector<int> order_;                              // the dead, in the order found
  std::atomic<bool> anyDead_{false};
  std::atomic<bool> collectiveFailed_{false};
  std::string collectiveWhy_;
};

}  // namespace commux::core
