#pragma once
// What one rank knows about its group's health: which members died (and why), and whether
// a collective failed here. After a failed collective the ranks may be out of step (some
// ran collectives this rank abandoned, and their messages may still arrive), so the group
// refuses further collectives instead of matching stale traffic; point-to-point operations
// with live peers go on. Shared with the group's Works, whose failures report here.
#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

namespace commux::core {

class GroupHealth {
 public:
  explicit GroupHealth(int size) : dead_(static_cast<std::size_t>(size)) {}

  /// Records that `rank` died; false if it was known already.
  bool markDead(int rank, const std::string& why);
  /// Why `rank` is dead; empty while it lives.
  std::string deadWhy(int rank) const;
  /// The first dead rank (or -1) and why.
  int firstDead(std::string* why) const;
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
  std::atomic<bool> anyDead_{false};
  std::atomic<bool> collectiveFailed_{false};
  std::string collectiveWhy_;
};

}  // namespace commux::core
