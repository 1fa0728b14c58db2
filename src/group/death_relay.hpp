#pragma once
// How a member's death reaches the ranks that do not watch it. In a group that spans hosts a
// rank watches only its own host's ranks (and, when it leads its host, the next two
// hosts' leaders): watching every member would cost each rank a store record and, across
// hosts, a UCX endpoint per member (docs/design.md, "When a peer dies"). Whoever learns of
// a death tells those who cannot see it themselves, one small control notice each
// (ProcessGroupUCX::relayDeath):
//  - a leader, of a death it did not hear of from another leader (one on its own host,
//    one it saw itself: a watched leader, a peer's endpoint that failed, or one its host's
//    ranks told it of): every other leader;
//  - a leader, of any death: the ranks of its own host, which watch nothing beyond it;
//  - any other rank, of a death on another host that it saw itself: its own leader.
// A leader's own death is seen by its host's ranks by pidfd and by the two leaders before
// it, which tell the rest. The watches are fixed when the relay starts: once both leaders
// before it have died (together with it or earlier), nobody watches it. The group runs no
// collective after the first death anyway; point-to-point peers are watched by their own
// routes.
// The same notices, naming their sender, say that a member leaves the group (it destroyed,
// shut down or aborted it while its process lives on): every group listens for them from
// construction on (Group::tellLeaving).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/done_flag.hpp"
#include "engine/route.hpp"

namespace commux {
namespace engine {
class Engine;
}

class DeathRelay {
 public:
  /// `onNotice(rank, why, from, through)` runs under the worker lock when rank `from`'s
  /// notice of `rank`'s death arrives (`through` absent), or of its leaving (`through`: the
  /// number of the first collective it did not do its part in); it must not block on
  /// anything a completion callback may hold.
  using OnNotice = std::function<void(int rank, const std::string& why, int from,
                                      std::optional<std::uint32_t> through)>;

  /// Posts the standing receive of the group whose context here is `context`, in its
  /// `incarnation` (engine::Route): notices naming another one are dropped.
  DeathRelay(std::shared_ptr<engine::Engine> engine, std::uint32_t context,
             std::uint16_t incarnation, int rank, OnNotice onNotice);
  /// close()
  ~DeathRelay();
  DeathRelay(const DeathRelay&) = delete;
  DeathRelay& operator=(const DeathRelay&) = delete;

  /// Any thread, never blocks or drives the worker: "rank `dead` died (`why`)" (or left,
  /// with `through`) to each of `targets` (routes to them, known already). A notice that
  /// cannot be delivered is dropped: its receiver is dead or leaving.
  /// Whether the notices of one tell() all completed (sent, or failed): a member that
  /// leaves waits for it (bounded) before its engine may go, which would cancel them.
  struct Sent {
    engine::DoneFlag flag;
    std::atomic<std::size_t> left{0};
  };
  /// Returns the notices' completion, or null when there was none to send.
  std::shared_ptr<Sent> tell(int dead, const std::string& why,
                             const std::vector<std::shared_ptr<const engine::Route>>& targets,
                             std::optional<std::uint32_t> through = std::nullopt);
  /// Cancels the standing receive; after it returns onNotice is not running and will not
  /// run again.
  void close();

  /// Bytes of a notice: the rank (4), whether it left (1) and through which collective
  /// (4), the sender (4), the receiver's incarnation (2), and the reason, cut to fit.
  static constexpr std::int64_t kNoticeBytes = 256;

 private:
  struct State;
  static void post(const std::shared_ptr<State>& state);

  int rank_;
  std::shared_ptr<State> state_;  // the engine too; the standing receive holds it weakly
};

}  // namespace commux
