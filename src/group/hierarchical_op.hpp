#pragma once
// A collective of a group that spans hosts, as one operation made of parts: shared-memory
// parts on this host's channel around the part between hosts over UCX, the way MPI's HAN
// and UCC's hierarchical teams split them (group/hierarchical.cpp plans them). Host memory
// only, as every collective in parts.
//
// Calls go down and events come up: the parts are ordinary engine operations. Every
// shared-memory part of this rank is queued on the channel when this operation starts, so
// the parts keep their place in the order of the host's collectives; the first part after
// the one between hosts waits on the channel for a gate (Job::gate). The part between
// hosts starts when the shared-memory part before it reports, and opens the gate when it
// completes, on whichever thread drives the worker. So nothing of c10d runs on the
// channel's lane, which only ever waits for a flag. The crossing always sits between two
// shared-memory parts (a Kind::Hold part, with no steps, where the collective has none
// there): it starts when the lane reaches it and the lane goes on only once it is over,
// so the collective uses its tensors in the channel's order, as one on a single host does.
// For the same reason the whole's prepare and finalize (padding, copies back) run on the
// lane, with its first and last shared-memory parts.
//
// Any part failing fails the whole, and the whole failing (a part's error, a timeout, an
// abort) fails every part still going: a shared-memory part left behind abandons the
// channel, so this host's other ranks stop waiting for this one (their error names it),
// and the group refuses later collectives as after any failed collective.
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/schedule_op.hpp"
#include "engine/done_flag.hpp"
#include "engine/op.hpp"
#include "shm/job.hpp"

namespace commux::shm {
class Channel;
class ChannelOp;
}  // namespace commux::shm

namespace commux::group {

class HierarchicalOp final : public engine::Op {
 public:
  /// This rank's part between hosts.
  struct Cross {
    engine::ScheduleOp::Setup setup;  // its work buffer and `finalize` filled in
    /// Runs just before it starts (reorders the host's blocks; may be empty).
    std::function<void()> before;
    /// Set when the setup could not be made: the part fails where it would have started,
    /// so the channel is abandoned and this host's other ranks stop waiting for this one.
    std::exception_ptr refused;
  };
  struct Plan {
    std::vector<shm::Job> before;  // shared-memory parts before the part between hosts
    std::optional<Cross> cross;    // empty where this rank does not cross
    std::vector<shm::Job> after;   // shared-memory parts after it
    /// Runs before the first part's steps (fills a padded copy of the input).
    std::function<void()> prepare;
    /// Copies the result to the user's tensors, after the last part's steps.
    std::function<void()> finalize;
  };

  static std::shared_ptr<HierarchicalOp> make(std::weak_ptr<shm::Channel> channel, Plan plan,
                                              engine::Description description, Done done);

  void start(engine::Engine& engine) override;
  /// Runs this rank's shared-memory parts on the waiting thread when the lane is free,
  /// waiting for the part between hosts in between (and so driving it).
  void assist(std::chrono::steady_clock::time_point deadline) override;
  bool assists() const noexcept override { return !shm_.empty(); }
  /// Abandons the channel: this host's other ranks may wait for this rank in a part.
  void withdraw() noexcept override;
  /// Starting only queues the shared-memory parts.
  bool usesWorker() const noexcept override { return false; }

 protected:
  void onComplete(engine::Engine& engine, std::uint32_t slot,
                  const engine::RecvInfo& info) override {}
  /// Abandons the channel, fails every part still going and opens the gate, so nothing
  /// waits on a part that will never come.
  void onFailed() override;

 private:
  HierarchicalOp(engine::Description description, Done done);
  /// Worker-lock holder: part `index` (of shm_, or the part between hosts: kCross) ended.
  void partDone(std::size_t index, std::exception_ptr error);
  void startCross();

  static constexpr std::size_t kCross = static_cast<std::size_t>(-1);

  std::weak_ptr<shm::Channel> channel_;
  engine::Engine* engine_ = nullptr;                     // from start()
  std::vector<std::shared_ptr<shm::ChannelOp>> shm_;  // before, then after
  std::size_t firstAfter_ = 0;  // index in shm_ of the first part after the crossing
  std::shared_ptr<engine::ScheduleOp> cross_;
  std::function<void()> beforeCross_;
  std::exception_ptr refused_;
  std::shared_ptr<engine::DoneFlag> gate_;
  std::size_t remaining_ = 0;  // parts not yet done (worker lock)
};

}  // namespace commux::group
