#pragma once
// A Group is what a communicator is, without a front end: its members over a key-value
// store (each one's address, watched for death), what this rank knows of their health, the
// death relay between hosts, the host layout and this host's shared-memory channel (set up
// together, once), the route each collective takes, and the operations launched on it (so
// that a death or an abort fails them). The c10d adapter (ProcessGroupUCX) and any other
// front end hold one and turn their calls into Ops and Requests on it.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/route.hpp"
#include "core/setup_store.hpp"
#include "core/stream.hpp"
#include "engine/route.hpp"
#include "group/request.hpp"

namespace commux {
namespace core {
class GroupHealth;
class KeyValueStore;
}  // namespace core
namespace engine {
class Engine;
class Op;
}  // namespace engine
namespace shm {
class Channel;
enum class Kind : std::uint32_t;
}  // namespace shm
struct HostLayout;
class DeathRelay;
class PeerTable;

namespace group {

class DeathWitness;

class Group {
 public:
  /// Collective over the group: every rank constructs its Group with a store shared by the
  /// group (its own keys: a prefix per group), then publishes its address there. The
  /// collective set-up (shared memory, the host layout) starts at once on a thread of its
  /// own when `setUpInBackground`, else at the first collective; pass false for a store
  /// whose calls need the caller's lock (one implemented in Python needs the GIL).
  /// Raises InvalidArgument for a size or rank the tag cannot carry.
  Group(std::shared_ptr<core::KeyValueStore> store, int rank, int size,
        std::shared_ptr<engine::Engine> engine, bool setUpInBackground);
  /// Fails the receives still in flight and frees the group's context; a forked child frees
  /// nothing (everything is its parent's).
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  engine::Engine& engine() const noexcept { return *engine_; }
  const std::shared_ptr<engine::Engine>& sharedEngine() const noexcept { return engine_; }
  /// This group's context id: the tag field that keeps its traffic from other groups'.
  std::uint32_t context() const noexcept { return context_; }
  PeerTable& peers() const noexcept { return *peers_; }
  const std::shared_ptr<core::GroupHealth>& health() const noexcept { return health_; }
  const std::shared_ptr<core::KeyValueStore>& store() const noexcept { return store_; }
  bool setsUpInBackground() const noexcept { return setUpInBackground_; }
  /// Collectives numbered in issue order: equal on every rank of a healthy group.
  std::uint32_t nextSequence() noexcept { return sequence_++; }
  std::uint32_t sequence() const noexcept { return sequence_.load(); }

  // --- Its life ---------------------------------------------------------------------
  /// Unconfigured: a stand-in until the front end gives the group its members (torch's
  /// enable_reconfigure); it refuses every operation as "not initialized".
  enum class State : std::uint8_t { Running, ShutDown, Aborted, Unconfigured };
  State state() const noexcept { return state_.load(std::memory_order_acquire); }
  /// "the group was aborted", "... shut down", "the process group is not initialized ...";
  /// empty while it runs.
  std::string stateText() const;
  /// Makes this (fresh) group a stand-in: State::Unconfigured.
  void holdUnconfigured() { state_.store(State::Unconfigured, std::memory_order_release); }
  /// True in a child forked after the group was made.
  bool inheritedByFork() const noexcept;
  /// Raises in a child forked after the group was made.
  void checkSameProcess() const;
  /// Raises once the group was aborted or shut down, or in a forked child.
  void checkUsable() const;
  /// Waits until every member has made the group, at most `limit`, then reads and watches
  /// them all; raises a Backend error naming the missing ranks at the limit ("connect
  /// timeout after"). For callers that want a group's membership checked when it is made,
  /// not at its first operation (gloo connects then).
  void connectAll(std::chrono::milliseconds limit);
  /// Cancels every operation in flight; later calls raise. With a `drain` limit, then
  /// waits up to that long for them to end (a receive UCX is filling ends only when its
  /// transfer does), so their buffers are their callers' again; false when some had not.
  bool abort(std::chrono::milliseconds drain = std::chrono::milliseconds(0));
  /// Later calls raise; operations in flight still finish.
  void shutdown();

  // --- Health -------------------------------------------------------------------------
  struct Status {
    bool healthy = true;
    std::vector<int> deadRanks;
    std::string reason;  // empty when healthy
  };
  Status status() const;
  /// Raises before a collective is staged when an earlier collective failed here (or the
  /// shared-memory channel broke): the ranks may be out of step.
  void checkCollectivesAllowed(const char* what);
  /// A cheap test: false when checkCollectivesAllowed would surely pass.
  bool collectivesMayBeRefused() const;
  /// Before a collective: every member's death must fail it. In a group that spans hosts
  /// the relay covers the members this rank does not watch; otherwise it watches them all.
  void watchMembers();
  /// The ranks whose records this rank has read (itself included), ascending.
  std::vector<int> knownRanks() const;
  /// Why `rank` is dead; empty while it lives (cheap while nobody died).
  std::string deadWhy(int rank) const;
  /// deadWhy(rank) for a transfer with `rank` whose connection broke: waits (boundedly, as
  /// long as an operation's failure witness does) for the death watch to confirm the death
  /// that explains it, so that the error names the rank; empty when none came.
  std::string awaitDeathOf(int rank) const;

  // --- The collective set-up and the route ---------------------------------------------
  /// Every collective's first step, before it validates its arguments: the set-up at the
  /// group's first collective, so that a rank whose arguments are refused still takes part.
  void joinSetUp();
  /// This host's shared-memory channel, or null when there is none. Waits for the set-up
  /// (running it here unless its thread did) and raises its error.
  std::shared_ptr<shm::Channel> channel();
  /// The channel as it is now, without waiting (null before the set-up).
  std::shared_ptr<shm::Channel> currentChannel() const;
  /// The host layout once the set-up found that the group spans hosts and shares memory
  /// inside them; null otherwise. Fixed once the set-up is done.
  const HostLayout* layout() const noexcept { return layout_.get(); }
  /// The group's ranks by host (see HostLayout); empty unless layout() is set.
  std::vector<std::vector<int>> hosts() const;
  /// This host's channel as its leader shaped it (see ProcessGroupUCX); empty without one.
  std::map<std::string, std::int64_t> sharedMemoryShape() const;
  /// How a collective set-up through the store (`what`) hears of this group's deaths,
  /// reading records through `via` (the group's store when null).
  core::SetupDeaths setupDeaths(const char* what,
                                std::shared_ptr<core::KeyValueStore> via = nullptr);
  /// Where a collective runs (collectives/route.hpp): the one decision every entry point
  /// takes. `bytes`: each rank's whole buffer, for the choice of parts; `channel` is set
  /// when the route is the shared-memory channel, else null. Raises first when
  /// collectives may not run, and when a forced algorithm cannot run here.
  collectives::Route route(collectives::Collective collective, const char* what, bool cpu,
                           std::size_t bytes, std::shared_ptr<shm::Channel>& channel);
  /// The channel when a collective of the flat kind goes through shared memory (CPU buffers
  /// on a group whose ranks share one host), else null; every rank decides alike.
  std::shared_ptr<shm::Channel> flatChannel(const char* what, bool cpu);
  /// Whether a collective of `kind` over `bytes` runs in parts across hosts.
  bool hierarchical(shm::Kind kind, bool cpu, std::size_t bytes) const;

  // --- Operations ---------------------------------------------------------------------
  /// Tracks `request` (abort, deaths) and starts `op` for it after `stream` (a CUDA
  /// operation; none for host memory), or keeps it for endBatch when a batch is open and
  /// `COMMUX_GROUP` defers. Raises (nothing started) when it cannot run: a send to a dead
  /// peer, a collective after an earlier one failed. One that involves a dead peer but may
  /// still complete from what arrived is started, then failed unless that completes it.
  /// Returns true when it was deferred.
  bool launch(const std::shared_ptr<Request>& request, std::shared_ptr<engine::Op> op,
              const std::optional<core::Stream>& stream);
  /// launch() of several host operations at once, in order (a neighbourhood exchange's
  /// step): tracked under one lock and started as one submission, so one pass through the
  /// worker lock and one progress round for all. Raises (nothing started) as launch().
  void launchAll(const std::vector<std::shared_ptr<Request>>& requests,
                 std::vector<std::shared_ptr<engine::Op>> ops);
  /// Opens the calling thread's batch: operations this thread launches until its endBatch
  /// are posted together then (COMMUX_GROUP=1; otherwise they start at once as usual).
  /// Batches are per thread, as commuxGroupStart/End and torch's coalescing are: another
  /// thread's operations on the group meanwhile start as usual.
  void startBatch();
  /// Closes the calling thread's batch and posts what it deferred, in one submission.
  void endBatch();
  /// Whether the calling thread has a batch open.
  bool batching() const;
  /// Calls `fn` for each Request in flight, under the tracking lock (it must not launch).
  template <typename Fn>
  void forEachInFlight(Fn&& fn) {
    std::lock_guard<std::mutex> lock(trackMutex_);
    for (const auto& weak : inflight_) {
      if (auto request = weak.lock(); request && !request->done()) fn(*request);
    }
  }

 private:
  /// The error of a request that involves a dead peer, or empty; raises for one that
  /// cannot run at all. Called under trackMutex_ (see markDead).
  std::string checkHealthy(const Request& request);
  /// Under trackMutex_: `request` among those in flight (abort, deaths).
  void trackLocked(const std::shared_ptr<Request>& request);
  /// Watch thread: the peer process at `address` died.
  void onPeerFailed(const std::string& address, const std::string& why);
  /// `rank` died: fail what waits on it, refuse what would, and tell who must hear of it
  /// from this rank. `from`: the rank whose notice said so, or -1 when seen here.
  /// `through`: it left the group rather than died, having done its part in the
  /// collectives numbered before it (those are not failed).
  void markDead(int rank, const std::string& why, int from = -1,
                std::optional<std::uint32_t> through = std::nullopt);
  /// A notice from rank `from`: `rank` died (relayed, in a group that spans hosts), or, when
  /// `rank` is `from`, it left the group (destroyed, shut down or aborted it). Checked: a
  /// notice naming a rank outside the group, or this rank, is dropped.
  void onNotice(int rank, const std::string& why, int from, std::optional<std::uint32_t> through);
  /// Tells every member this rank can reach that it leaves the group (`how`: "destroyed",
  /// "shut down", "aborted"), once: their operations with it fail at once instead of at
  /// their timeout, but for collectives numbered before `through` (firstUndone() when
  /// absent), in which it did its part. Never blocks or drives the worker.
  void tellLeaving(const char* how, std::optional<std::uint32_t> through = std::nullopt);
  /// The first collective this rank has not done its part in: the next one, or the
  /// earliest still in flight or failed.
  std::uint32_t firstUndone();
  /// In a group without a relay (startRelay), where a member hears of a leave only from
  /// the leaver, which tells the members it talked to: once a collective of this rank
  /// fails for want of `rank` that left, this rank tells the members it talked to, in
  /// turn, once (a member waiting for this rank's part of that collective then hears why
  /// it never comes). Members done with the group send nothing, so a job whose ranks all
  /// leave at its end costs no notices but the leavers' own.
  void retellLeave(int rank);
  /// Routes to the live members this process has an endpoint to (those it exchanged
  /// messages or collective steps with): whom a notice goes to without connecting anew.
  std::vector<std::shared_ptr<const engine::Route>> connectedRoutes() const;
  /// retellLeave for every member that left before its part in collective `sequence`.
  void retellLeavesBefore(std::uint32_t sequence);
  void startRelay();
  void relayDeath(int rank, const std::string& why, int from,
                  std::optional<std::uint32_t> through = std::nullopt);
  void failOrphans(const std::string& why);
  void setUp(const std::shared_ptr<core::KeyValueStore>& store);
  void startSetUp();
  void stopSetUp();

  const int rank_;
  const int size_;
  std::shared_ptr<engine::Engine> engine_;
  std::uint32_t forkGeneration_;  // engine::forkGeneration() when the group was made
  int creatorPid_;
  std::shared_ptr<core::GroupHealth> health_;
  // Given to every operation launched here: a transfer that fails because its connection
  // broke waits (boundedly) for the death watch to name the rank that died.
  std::shared_ptr<DeathWitness> witness_;
  std::uint64_t failureListener_ = 0;
  std::shared_ptr<core::KeyValueStore> store_;
  std::unique_ptr<PeerTable> peers_;
  std::uint32_t context_ = 0;
  std::uint16_t incarnation_ = 0;  // see the constructor
  std::atomic<std::uint32_t> sequence_{0};
  std::atomic<State> state_{State::Running};

  // Guards inflight_ and the batch.
  mutable std::mutex trackMutex_;
  // Operations abort() must cancel; finished entries are pruned as the list grows.
  std::vector<std::weak_ptr<Request>> inflight_;
  std::size_t pruneAt_ = 64;
  // The open batches, one per thread that has one (few): what each deferred.
  struct Batch {
    std::thread::id owner;
    std::vector<std::shared_ptr<engine::Op>> ops;
    std::vector<std::shared_ptr<Request>> requests;
  };
  std::vector<Batch> batches_;
  // batches_.size(), read without the lock: no batch open is the usual case, and spares
  // every launch a look-up.
  std::atomic<std::size_t> openBatches_{0};
  /// Tracking-lock holder: the calling thread's open batch, or null.
  Batch* batchOfThisThreadLocked();
  /// Tracking-lock holder: its index in batches_, or batches_.size() when it has none.
  std::size_t batchIndexLocked() const;

  const bool setUpInBackground_;
  // Shared with startSetUp's (detached) thread: it works on the group only under `mutex`,
  // and not at all once `cancelled`.
  struct SetUpControl {
    std::mutex mutex;
    bool cancelled = false;
  };
  std::shared_ptr<SetUpControl> setUpControl_;
  std::atomic<bool> setUpStop_{false};  // set once the group goes away: the set-up gives up
  mutable std::mutex shmMutex_;          // held through the set-up
  std::atomic<bool> shmDecided_{false};  // written under shmMutex_; read without it
  std::exception_ptr setUpError_;        // under shmMutex_: why the set-up failed
  std::atomic<bool> setUpFailed_{false};  // setUpError_ is set
  // Set (before shmDecided_) when the group spans hosts and shares memory inside them.
  std::shared_ptr<const HostLayout> layout_;
  // The group's notices (a member left; a death relayed across hosts): listening from
  // construction, before the group is published.
  std::unique_ptr<DeathRelay> relay_;
  // Set once layout_ is and the relay has its watches (startRelay); read by markDead on any
  // thread.
  std::atomic<bool> relayReady_{false};
  std::atomic<bool> toldLeaving_{false};
  std::mutex retoldMutex_;
  std::vector<bool> retold_;  // under retoldMutex_: by rank, the leaves retellLeave told
  // Declared last: destroyed first, so its lane stops while the engine still runs. Read
  // and written with std::atomic_load/store: the watch thread reads it without shmMutex_,
  // which a first collective holds through the (blocking) shared-memory set-up.
  std::shared_ptr<shm::Channel> shm_;
  // The same channel for the collectives' path, read without a lock: written once, before
  // shmReady_ (release) says the set-up succeeded; let go in the destructor with shm_.
  std::shared_ptr<shm::Channel> shmOwned_;
  std::atomic<bool> shmReady_{false};
  /// The channel once set up (null before, and without shared memory), without a lock.
  shm::Channel* readyChannel() const noexcept {
    return shmReady_.load(std::memory_order_acquire) ? shmOwned_.get() : nullptr;
  }
};

}  // namespace group
}  // namespace commux
