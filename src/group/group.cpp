#include "group/group.hpp"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <random>
#include <thread>
#include <tuple>
#include <utility>

#include "commux/options.hpp"
#include "core/error.hpp"
#include "core/group_health.hpp"
#include "core/kv_store.hpp"
#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "engine/fork_guard.hpp"
#include "group/death_relay.hpp"
#include "group/peer_table.hpp"
#include "group/shm_setup.hpp"
#include "shm/channel.hpp"
#include "shm/job.hpp"
#include "wire/tag.hpp"

namespace commux::group {
namespace {

// How many leaders watch each host leader (the ones before it in host order): they tell
// every other leader of its death, so it is missed only once all of them are dead.
constexpr int kLeaderWatches = 2;

// How long a member that leaves waits for its notices to be sent (Group::tellLeaving).
constexpr std::chrono::milliseconds kNoticeWait{250};

// Before anything is published or sent: the tag's source field names at most 2^16 ranks.
int checkedSize(int rank, int size) {
  const std::uint32_t maxRanks = Config::get().maxRanks;
  COMMUX_CHECK(size >= 1, InvalidArgument, "commux: group size ", size, " is not positive");
  COMMUX_CHECK(static_cast<std::uint32_t>(size) <= maxRanks, InvalidArgument, "commux: a group of ",
               size, " ranks is more than the UCX tag's source field can name (", maxRanks,
               maxRanks < wire::kMaxRanks ? " ranks, lowered by COMMUX_MAX_RANKS" : " ranks",
               "): use a smaller group, or split the job into groups of at most ", maxRanks,
               " ranks");
  COMMUX_CHECK(rank >= 0 && rank < size, InvalidArgument, "commux: rank ", rank,
               " is outside a group of size ", size);
  return size;
}

shm::Kind kindOf(collectives::Collective collective) {
  using C = collectives::Collective;
  switch (collective) {
    case C::Allreduce: return shm::Kind::Allreduce;
    case C::Reduce: return shm::Kind::Reduce;
    case C::Broadcast: return shm::Kind::Broadcast;
    case C::Allgather: return shm::Kind::Allgather;
    case C::ReduceScatter: return shm::Kind::ReduceScatter;
    case C::Gather: return shm::Kind::Gather;
    case C::Scatter: return shm::Kind::Scatter;
    case C::Alltoall: return shm::Kind::Alltoall;
    case C::Barrier: return shm::Kind::Barrier;
  }
  return shm::Kind::Barrier;
}

}  // namespace

// How long an operation whose connection broke waits for the death watch to name the rank
// that died. A death on this host is confirmed within milliseconds (a pidfd), one elsewhere
// as soon as UCX reports the endpoint failed or a host leader relays it; a connection that
// broke with its peer alive fails with UCX's status after this.
constexpr std::chrono::milliseconds kDeathConfirmWait{2000};
// How often a waiting operation looks at the group's deaths besides being told of one.
constexpr std::chrono::milliseconds kDeathLook{20};

/// The group's FailureWitness: an operation whose connection broke is failed once the group
/// knows of a death that explains it (naming the rank, as markDead words it), or with UCX's
/// error after kDeathConfirmWait. Its thread runs only while operations wait.
class DeathWitness final : public engine::FailureWitness {
 public:
  DeathWitness(std::shared_ptr<core::GroupHealth> health, engine::Engine& engine)
      : health_(std::move(health)), engine_(engine) {}
  ~DeathWitness() override { stop(); }

  std::exception_ptr connectionFailed(const std::shared_ptr<engine::Op>& op, int peer,
                                      std::exception_ptr error) override {
    // Known already (the watch was first): named at once.
    if (std::string named = deathFor(*op, peer); !named.empty()) return engine::commError(named);
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return error;
    held_.push_back(Held{op, peer, std::move(error), Clock::now() + kDeathConfirmWait});
    // Started on the first failure only: a process whose connections never break has no
    // thread for it.
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    wake_.notify_one();
    return nullptr;
  }

  /// A member was found dead: the operations held look again now.
  void deathFound() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (held_.empty()) return;
      told_ = true;
    }
    wake_.notify_one();
  }

  /// The group goes away (its engine may follow): what is held fails now with UCX's error,
  /// and later failures are not held. Never on the witness's thread (it holds no reference
  /// to the group or to itself).
  void stop() {
    std::vector<Held> left;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopped_) return;
      stopped_ = true;
      left.swap(held_);
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
    for (auto& held : left) {
      if (auto op = held.op.lock()) failLater(std::move(op), held.error);
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Held {
    std::weak_ptr<engine::Op> op;  // alive until it finishes (its Request holds it)
    int peer;
    std::exception_ptr error;  // UCX's, for when no death explains it in time
    Clock::time_point until;
  };

  /// The error naming a death that fails `op` (its one peer `peer`, or -1), as
  /// Group::checkHealthy finds it; empty when none is known.
  std::string deathFor(const engine::Op& op, int peer) const {
    if (!health_->anyDead()) return "";
    std::string why;
    int dead = -1;
    if (peer >= 0) {
      why = health_->deadWhy(peer);
      if (!why.empty()) dead = peer;
    } else if (const auto sequence = op.sequence()) {
      dead = health_->firstDeadFor(*sequence, &why);
    } else {
      dead = health_->firstLostForAnySource(&why);
    }
    return dead < 0 ? std::string()
                    : "commux: " + op.description() + ": " + core::lostMember(dead, why);
  }

  /// Never driven here: this thread must not run the operation's callbacks.
  void failLater(std::shared_ptr<engine::Op> op, std::exception_ptr error) {
    try {
      engine_.submit(engine::Submission::cancel(std::move(op), std::move(error))
                         .drive(engine::Drive::Never));
    } catch (const std::exception&) {
      // The engine stops: its teardown fails what is still in flight.
    }
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopped_) {
      if (held_.empty()) {
        wake_.wait(lock, [this] { return stopped_ || !held_.empty(); });
        continue;
      }
      const auto now = Clock::now();
      auto next = now + kDeathLook;
      std::vector<std::pair<std::shared_ptr<engine::Op>, std::exception_ptr>> failing;
      for (auto it = held_.begin(); it != held_.end();) {
        auto op = it->op.lock();
        if (!op || op->finished()) {  // the group's markDead failed it (named), or a cancel
          it = held_.erase(it);
          continue;
        }
        if (std::string named = deathFor(*op, it->peer); !named.empty()) {
          failing.emplace_back(std::move(op), engine::commError(named));
        } else if (it->until <= now) {
          failing.emplace_back(std::move(op), std::move(it->error));
        } else {
          next = std::min(next, it->until);
          ++it;
          continue;
        }
        it = held_.erase(it);
      }
      lock.unlock();
      for (auto& [op, error] : failing) failLater(std::move(op), std::move(error));
      failing.clear();  // the last references may go here: not under the lock
      lock.lock();
      if (stopped_) break;
      wake_.wait_until(lock, next, [this] { return stopped_ || told_; });
      told_ = false;
    }
  }

  const std::shared_ptr<core::GroupHealth> health_;
  engine::Engine& engine_;  // the group's, which outlives stop()
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Held> held_;  // under mutex_
  bool stopped_ = false;    // under mutex_
  bool told_ = false;       // under mutex_: deathFound since the thread last looked
  std::thread thread_;
};

Group::Group(std::shared_ptr<core::KeyValueStore> store, int rank, int size,
             std::shared_ptr<engine::Engine> engine, bool setUpInBackground)
    : rank_(rank),
      size_(checkedSize(rank, size)),
      engine_(std::move(engine)),
      forkGeneration_(engine::forkGeneration()),
      creatorPid_(static_cast<int>(::getpid())),
      health_(std::make_shared<core::GroupHealth>(size)),
      witness_(std::make_shared<DeathWitness>(health_, *engine_)),
      store_(std::move(store)),
      setUpInBackground_(setUpInBackground) {
  // No purge here: it runs later on the driver and would drop messages that peers send to
  // this new group once it is published (a destroyed group's are purged at destruction,
  // and ids come back only after every other one was used).
  context_ = engine_->contexts().acquire();
  // Tells this group from the earlier ones that had its context here (ids come back once
  // freed): a notice sent to one of those and arriving late must not reach this one.
  incarnation_ = static_cast<std::uint16_t>(std::random_device()() | 1u);
  peers_ = std::make_unique<PeerTable>(
      store_, rank, size,
      [this](int peer, const engine::Route& route, const engine::ProcessId& process) {
        if (peer == rank_) return;
        engine_->watchPeer(route.address, process);
        // Found dead before this group listened (another group saw it, or at once).
        if (engine_->peerFailed(route.address)) markDead(peer, "its process is gone");
      });
  failureListener_ = engine_->addFailureListener(
      [this](const std::string& address, const std::string& why) { onPeerFailed(address, why); });
  try {
    // Listening before the group is published: a member that leaves at once must be heard.
    relay_ = std::make_unique<DeathRelay>(
        engine_, context_, incarnation_, rank_,
        [this](int peer, const std::string& why, int from, std::optional<std::uint32_t> through) {
          onNotice(peer, why, from, through);
        });
    peers_->publish(engine_->address(), context_, incarnation_);
  } catch (...) {
    if (relay_) relay_->close();
    engine_->removeFailureListener(failureListener_);
    engine_->contexts().release(context_);
    throw;
  }
  startSetUp();
}

Group::~Group() {
  if (inheritedByFork()) {
    // A forked child: the group's threads, locks, UCX state and shared memory are the
    // parent's. Free none of it (member destructors then see empty handles).
    new std::tuple(std::move(engine_), std::move(peers_), std::move(relay_), std::move(shm_),
                   std::move(shmOwned_), std::move(store_), std::move(health_), std::move(layout_),
                   std::move(witness_));
    return;
  }
  stopSetUp();  // before anything it uses goes
  witness_->stop();  // its thread uses the engine
  tellLeaving("destroyed");
  // First: a notice arriving now would mark a rank dead in a group that is going away.
  if (relay_) relay_->close();
  engine_->removeFailureListener(failureListener_);
  shmReady_.store(false, std::memory_order_release);
  shmOwned_.reset();
  std::atomic_store(&shm_, std::shared_ptr<shm::Channel>());
  failOrphans("the process group was destroyed with this receive in flight");
  engine_->submit(engine::Submission::purge(context_));
  engine_->contexts().release(context_);
}

// --- Its life ------------------------------------------------------------------------

bool Group::inheritedByFork() const noexcept {
  return forkGeneration_ != engine::forkGeneration();
}

void Group::checkSameProcess() const {
  if (!inheritedByFork()) return;
  COMMUX_FAIL(Backend, "commux: this process group was created in process ", creatorPid_,
              ", and this process (", ::getpid(),
              ") is a child forked from it afterwards. A forked child cannot use its "
              "parent's process groups (their UCX worker, connections and shared "
              "memory belong to the parent, as with NCCL): communicate from the parent, "
              "or start the child with the 'spawn' or 'forkserver' method and create a "
              "group there");
}

void Group::checkUsable() const {
  checkSameProcess();
  if (state() == State::Running) return;
  COMMUX_FAIL(Backend, "commux: ", stateText(),
              state() == State::Unconfigured ? "" : "; create a new one to communicate");
}

std::string Group::stateText() const {
  switch (state()) {
    case State::Running: return "";
    case State::ShutDown: return "the process group was shut down";
    case State::Aborted: return "the process group was aborted";
    case State::Unconfigured:
      return "process group not initialized: it was made to be reconfigured "
             "(enable_reconfigure=True), and reconfigure() has not given it its members yet";
  }
  return "";
}

void Group::connectAll(std::chrono::milliseconds limit) {
  checkUsable();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto pause = std::chrono::milliseconds(1);
  for (std::vector<int> missing = peers_->unpublished(); !missing.empty();
       missing = peers_->unpublished()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string ranks;
      for (const int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      COMMUX_FAIL(Backend, "commux: connect timeout after ", limit.count(), "ms: rank",
                  missing.size() > 1 ? "s " : " ", ranks, " of ", size_,
                  " never made the group (no address of theirs in the store); timed out after ",
                  limit.count(), " ms");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  peers_->resolveAll("connecting to every member");
}

bool Group::abort(std::chrono::milliseconds drain) {
  if (inheritedByFork()) return true;  // the parent's operations are the parent's to abort
  state_.store(State::Aborted, std::memory_order_release);
  setUpStop_.store(true, std::memory_order_release);
  const std::uint32_t through = firstUndone();  // before the aborts below make it look done
  std::vector<std::weak_ptr<Request>> inflight;
  {
    std::lock_guard<std::mutex> lock(trackMutex_);
    inflight.swap(inflight_);
  }
  std::vector<std::shared_ptr<Request>> aborted;
  for (const auto& weak : inflight) {
    if (auto request = weak.lock(); request && !request->done()) {
      request->abort();
      if (drain.count() > 0) aborted.push_back(std::move(request));
    }
  }
  tellLeaving("aborted", through);
  const auto until = std::chrono::steady_clock::now() + drain;
  bool ended = true;
  for (const auto& request : aborted) ended = request->waitUntil(until) && ended;
  return ended;
}

void Group::shutdown() {
  State expected = State::Running;
  state_.compare_exchange_strong(expected, State::ShutDown, std::memory_order_acq_rel);
  setUpStop_.store(true, std::memory_order_release);
  // Operations in flight still finish, with the peers they need: then the notice waits
  // for the group's destruction.
  bool idle = true;
  {
    std::lock_guard<std::mutex> lock(trackMutex_);
    for (const auto& weak : inflight_) {
      const auto request = weak.lock();
      if (request && !request->done()) idle = false;
    }
  }
  if (idle) tellLeaving("shut down");
}

std::uint32_t Group::firstUndone() {
  std::uint32_t through = sequence_.load();
  std::lock_guard<std::mutex> lock(trackMutex_);
  for (const auto& weak : inflight_) {
    const auto request = weak.lock();
    if (!request || request->succeeded()) continue;
    if (const auto s = request->parts().sequence();
        s && static_cast<std::int32_t>(*s - through) < 0) {
      through = *s;
    }
  }
  return through;
}

void Group::tellLeaving(const char* how, std::optional<std::uint32_t> through) {
  if (inheritedByFork() || !relay_ || toldLeaving_.exchange(true)) return;
  // The others' collectives before `through` complete from what this rank sent; from it
  // on they fail.
  if (!through) through = firstUndone();
  // The members this process has talked to: every member it exchanged messages or a
  // collective step with. Not the others: the notice must not be what connects to a peer,
  // which may have exited already (UCX would then fail to reach its memory, and says so).
  const auto routes = connectedRoutes();
  // The members of this host's channel see it there, connected or not; before the notices,
  // so that a member a notice reaches finds the channel marked already.
  if (auto channel = std::atomic_load(&shm_)) channel->markLeft(rank_, *through);
  const auto sent =
      relay_->tell(rank_, std::string("it ") + how + " its process group", routes, *through);
  // Sent before this returns (bounded: a peer that died unseen never takes it): the last
  // group of a process takes the engine with it, whose teardown cancels what is still in
  // flight, and the members would then see this process's exit as a death instead.
  // Not on a thread that drives the worker for others (the last reference dropped in a
  // completion): it cannot wait there, and that engine lives on anyway.
  if (sent && !engine_->onProgressThread() && !engine_->drivenByThisThread()) {
    engine_->wait(sent->flag, std::chrono::steady_clock::now() + kNoticeWait);
    }
}

void Group::onNotice(int peer, const std::string& why, int from,
                     std::optional<std::uint32_t> through) {
  if (peer < 0 || peer >= size_ || peer == rank_ || from < 0 || from >= size_) return;
  // A member's own notice says it left (with `through`); a notice about another member is
  // a death relayed by one that watches it (groups that span hosts; it may come before
  // this rank's own relay has its watches), or a leave relayed so.
  if (peer == from && !through) return;
  markDead(peer, peer == from ? std::string(core::kClosedByPeer) + ": " + why : why, from,
           through);
}

// --- Health --------------------------------------------------------------------------

void Group::failOrphans(const std::string& why) {
  std::vector<std::shared_ptr<Request>> orphans;
  {
    std::lock_guard<std::mutex> lock(trackMutex_);
    for (const auto& weak : inflight_) {
      auto request = weak.lock();
      if (request && !request->done() && request->receives()) orphans.push_back(std::move(request));
    }
  }
  for (auto& request : orphans) {
    request->failQuietly(engine::commError("commux: " + request->description() + ": " + why));
  }
}

void Group::onPeerFailed(const std::string& address, const std::string& why) {
  for (int peer : peers_->ranksAt(address)) {
    if (peer != rank_) markDead(peer, why);
  }
}

void Group::markDead(int peer, const std::string& why, int from,
                     std::optional<std::uint32_t> through) {
  std::vector<std::shared_ptr<Request>> victims;
  // Requests looked at and left alone: let go of outside the lock (the last reference may
  // free a front end's buffers, and a tensor made in Python takes the GIL as it goes).
  std::vector<std::shared_ptr<Request>> others;
  {
    // Under trackMutex_, as launch() checks: an operation is either refused there or found
    // in flight here.
    std::lock_guard<std::mutex> lock(trackMutex_);
    if (!health_->markDead(peer, why, through)) return;
    // Any-source receives live on while some other member may still send.
    const bool anySourceLives = health_->firstLostForAnySource(nullptr) < 0;
    for (const auto& weak : inflight_) {
      auto request = weak.lock();
      if (!request) continue;
      // A member that left did its part in the collectives before `through`.
      const auto s = request->parts().sequence();
      const bool done = through && s && static_cast<std::int32_t>(*s - *through) < 0;
      const bool spared = request->kind() == Request::Kind::RecvAnySource && anySourceLives;
      (!request->done() && request->involves(peer) && !done && !spared ? victims : others)
          .push_back(std::move(request));
    }
  }
  others.clear();
  if (auto channel = std::atomic_load(&shm_)) {
    if (through) {
      channel->markLeft(peer, *through, why);
    } else {
      channel->peerDied(peer, why);
    }
  }
  const std::string died = core::lostMember(peer, why);
  bool collectiveFailed = false;
  for (auto& request : victims) {
    collectiveFailed = collectiveFailed || request->collective();
    request->failAfterDraining(
        engine::commError("commux: " + request->description() + ": " + died), peer);
  }
  if (through && collectiveFailed) retellLeave(peer);
  // An operation whose connection broke first and waits to be explained: named now.
  witness_->deathFound();
  // After health_ knows it: startRelay relays the deaths known when it is ready, so each
  // one goes out from here or from there.
  if (relayReady_.load()) relayDeath(peer, why, from, through);
}

std::vector<int> Group::knownRanks() const { return peers_->knownRanks(); }

std::string Group::deadWhy(int rank) const {
  return health_->anyDead() ? health_->deadWhy(rank) : std::string();
}

std::string Group::awaitDeathOf(int rank) const {
  const auto until = std::chrono::steady_clock::now() + kDeathConfirmWait;
  for (;;) {
    if (std::string why = deadWhy(rank); !why.empty()) return why;
    if (std::chrono::steady_clock::now() >= until) return "";
    std::this_thread::sleep_for(kDeathLook);
  }
}

void Group::watchMembers() {
  if (!relayReady_.load(std::memory_order_acquire)) peers_->resolveAll();
}

void Group::startRelay() {
  const HostLayout& layout = *layout_;
  const int myHost = layout.hostOf[rank_];
  const auto& host = layout.hosts[myHost];
  std::vector<int> watched(host.begin(), host.end());
  std::vector<int> reachable = watched;  // read in one store request
  if (host.front() == rank_) {
    // A leader watches the next few leaders in host order, not all of them: each leader is
    // watched by that many others, which tell every leader of its death (relayDeath). The
    // others' records are read for those notices, but nobody connects to them until then.
    const int hosts = static_cast<int>(layout.hosts.size());
    for (int k = 1; k <= std::min(kLeaderWatches, hosts - 1); ++k) {
      watched.push_back(layout.hosts[(myHost + k) % hosts].front());
    }
    for (const auto& other : layout.hosts) reachable.push_back(other.front());
  }
  // The relay listens from construction on: a notice sent as soon as the others watch
  // finds it.
  peers_->prefetch(reachable);
  peers_->get(watched);  // watched from now on (onResolved)
  relayReady_.store(true);
  // Seen before now (here or by a notice that waited): relayed as if seen here, which may
  // tell a leader what it knows already; the receiver drops what it knew.
  for (int dead : health_->deadRanks()) {
    relayDeath(dead, health_->deadWhy(dead), -1, health_->leftThrough(dead));
  }
}

void Group::retellLeave(int peer) {
  if (relayReady_.load() || !relay_ || inheritedByFork()) return;
  const auto through = health_->leftThrough(peer);
  if (!through) return;
  {
    std::lock_guard<std::mutex> lock(retoldMutex_);
    if (retold_.empty()) retold_.resize(static_cast<std::size_t>(size_));
    if (retold_[static_cast<std::size_t>(peer)]) return;
    retold_[static_cast<std::size_t>(peer)] = true;
  }
  // Only members with an endpoint already (as tellLeaving): those this rank exchanged a
  // step with, of which are the ones that wait for it.
  relay_->tell(peer, health_->deadWhy(peer), connectedRoutes(), through);
}

std::vector<std::shared_ptr<const engine::Route>> Group::connectedRoutes() const {
  std::vector<std::shared_ptr<const engine::Route>> routes;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !health_->deadWhy(r).empty()) continue;
    auto route = peers_->reachable(r);
    if (route && engine_->connected(route->address)) routes.push_back(std::move(route));
  }
  return routes;
}

void Group::retellLeavesBefore(std::uint32_t sequence) {
  if (relayReady_.load() || !relay_) return;
  for (const int r : health_->deadRanks()) {
    if (health_->lostFor(r, sequence)) retellLeave(r);
  }
}

void Group::relayDeath(int peer, const std::string& why, int from,
                       std::optional<std::uint32_t> through) {
  const HostLayout& layout = *layout_;
  const int myHost = layout.hostOf[rank_];
  const auto& host = layout.hosts[myHost];
  const int peerHost = layout.hostOf[peer];
  std::vector<int> targets;
  if (host.front() != rank_) {
    // This host's leader watches its ranks itself; of another host's rank it may know
    // nothing (an endpoint that failed here, its rank alive to its own leader's pidfd).
    if (from < 0 && peerHost != myHost) targets.push_back(host.front());
  } else {
    for (int r : host) targets.push_back(r);
    // The other leaders watch no rank of another host, and only a few leaders, so they
    // hear of what reached this leader otherwise than from one of them.
    const bool fromLeader = from >= 0 && layout.hostOf[from] != myHost;
    if (!fromLeader) {
      for (const auto& other : layout.hosts) targets.push_back(other.front());
    }
  }
  std::vector<std::shared_ptr<const engine::Route>> routes;
  for (int r : targets) {
    if (r == rank_ || r == peer || r == from || !health_->deadWhy(r).empty()) continue;
    // Read in startRelay: no store request on this (watch or driver) thread.
    if (auto route = peers_->reachable(r)) routes.push_back(std::move(route));
  }
  relay_->tell(peer, why, routes, through);
}

std::string Group::checkHealthy(const Request& request) {
  // The description is formatted only when the check may refuse.
  if (request.collective() && collectivesMayBeRefused()) {
    checkCollectivesAllowed(request.description().c_str());
  }
  if (!health_->anyDead()) return "";
  std::string why;
  int dead = -1;
  if (request.peer() >= 0) {
    why = health_->deadWhy(request.peer());
    if (!why.empty()) dead = request.peer();
  } else if (const auto sequence = request.parts().sequence()) {
    dead = health_->firstDeadFor(*sequence, &why);  // members that left before it count
  } else {
    // An any-source receive: a member that left sent all it will, and the others may
    // still send; a death fails it (the sender it waits for may be the dead one), as does
    // every other member being gone.
    dead = health_->firstLostForAnySource(&why);
  }
  if (dead < 0) return "";
  std::string message = "commux: " + request.description() + ": " + core::lostMember(dead, why);
  // A dead peer receives nothing: a send fails now. Receives and collectives may still
  // complete from messages it sent before it died.
  COMMUX_CHECK(request.kind() != Request::Kind::Send, Backend, message,
               "; operations with it fail from now on");
  return message;
}

bool Group::collectivesMayBeRefused() const {
  if (health_->anyCollectiveFailed()) return true;
  const shm::Channel* channel = readyChannel();
  return channel && channel->broken();
}

void Group::checkCollectivesAllowed(const char* what) {
  if (shm::Channel* channel = readyChannel(); channel && channel->broken()) {
    if (const int dead = channel->deadRank(); dead >= 0) {
      // Found dead by this rank's watch or another survivor's: no collective can finish.
      const std::string why = health_->deadWhy(dead);
      COMMUX_FAIL(Backend, "commux: ", what, ": ",
                  why.empty() ? channel->brokenReason() : core::lostMember(dead, why),
                  "; this group runs no more collectives; create a new group without "
                  "it to go on");
    }
    health_->collectiveFailed(channel->brokenReason());
  }
  const std::string failure = health_->collectiveFailure();
  if (failure.empty()) return;
  COMMUX_FAIL(Backend, "commux: ", what,
              ": refused, because an earlier collective of this group failed here (", failure,
              "). The ranks may be out of step (others may have finished collectives "
              "this rank abandoned, and their messages may still arrive), so the group "
              "runs no more collectives; point-to-point operations still work. Destroy "
              "the group and create a new one to go on");
}

Group::Status Group::status() const {
  Status h;
  h.deadRanks = health_->deadRanks();
  std::string why;
  if (state() != State::Running) {
    h.reason = stateText();
  } else if (const int dead = health_->firstDead(&why); dead >= 0) {
    h.reason = core::lostMember(dead, why);
  } else if (auto failure = health_->collectiveFailure(); !failure.empty()) {
    h.reason = "a collective failed: " + failure;
  } else if (auto channel = std::atomic_load(&shm_); channel && channel->broken()) {
    h.reason = channel->brokenReason();
  }
  h.healthy = h.reason.empty();
  return h;
}

// --- The collective set-up and the route ------------------------------------------------

std::shared_ptr<shm::Channel> Group::currentChannel() const { return std::atomic_load(&shm_); }

std::vector<std::vector<int>> Group::hosts() const {
  std::lock_guard<std::mutex> lock(shmMutex_);
  return layout_ ? layout_->hosts : std::vector<std::vector<int>>{};
}

std::map<std::string, std::int64_t> Group::sharedMemoryShape() const {
  const auto channel = std::atomic_load(&shm_);
  if (!channel) return {};
  const shm::ChannelShape& shape = channel->shape();
  const auto n = [](auto v) { return static_cast<std::int64_t>(v); };
  return {{"ranks", n(shape.size)},
          {"slot_bytes", n(shape.slotBytes)},
          {"copy_step_bytes", n(shape.copyStepBytes)},
          {"small_bytes", n(shape.smallBytes)},
          {"depth", n(shape.depth)},
          {"cma_broadcast_from", n(shape.cma[shm::CmaUse::Broadcast].from)},
          {"cma_broadcast_below", n(shape.cma[shm::CmaUse::Broadcast].below)},
          {"cma_gather_scatter_from", n(shape.cma[shm::CmaUse::Rooted].from)},
          {"cma_allgather_from", n(shape.cma[shm::CmaUse::Allgather].from)},
          {"cma_alltoall_from", n(shape.cma[shm::CmaUse::Alltoall].from)},
          {"cma_neighbours_from", n(shape.cma[shm::CmaUse::Neighbours].from)},
          {"crowded", n(shape.crowded)},
          {"poll_ns", n(shape.poll.count())}};
}

core::SetupDeaths Group::setupDeaths(const char* what, std::shared_ptr<core::KeyValueStore> via) {
  if (!via) via = store_;
  return core::SetupDeaths{
      [this, via](const std::vector<int>& ranks) { peers_->getPublished(ranks, *via); },
      [this](const std::vector<int>* late) {
        if (setUpStop_.load(std::memory_order_acquire)) {
          return std::string("this group was destroyed, aborted or shut down on rank ") +
                 std::to_string(rank_) + " before its set-up completed";
        }
        if (!health_->anyDead()) return std::string();
        std::string why;
        if (late == nullptr) {
          const int dead = health_->firstDead(&why);
          return dead < 0 ? std::string() : core::lostMember(dead, why);
        }
        for (const int r : *late) {
          if (r >= 0 && r < size_ && !(why = health_->deadWhy(r)).empty()) {
            return core::lostMember(r, why);
          }
        }
        return std::string();
      },
      what};
}

void Group::joinSetUp() {
  // Also once decided, when it failed: its error, not a later refusal, says why.
  if (!shmDecided_.load(std::memory_order_acquire) ||
      setUpFailed_.load(std::memory_order_acquire)) {
    channel();
  }
}

void Group::startSetUp() {
  // The set-up waits for every rank in the store: on a thread of its own from construction
  // on, it is usually done before the first collective, which then returns at once, and a
  // rank that meets its first collective late (or is refused there by its front end) keeps
  // nobody waiting. Not with a store written in Python: each call would need the GIL,
  // which the destructor may hold.
  if (size_ < 2 || !setUpInBackground_) return;
  auto control = std::make_shared<SetUpControl>();
  setUpControl_ = control;
  // Detached: making its own store connection may take the store's timeout (the store's
  // host is gone), and nothing may wait for that. It touches the group only under
  // control->mutex, and never once the group cancelled it (stopSetUp).
  std::thread([this, control, store = store_] {
    // Through a connection of its own: a TCPStore client serves one request at a time, and
    // the caller's thread may hold the group's in a wait (a barrier of its own) while the
    // other ranks wait for this set-up.
    const auto own = core::ownConnection(store);
    std::lock_guard<std::mutex> alive(control->mutex);
    if (control->cancelled) return;
    std::lock_guard<std::mutex> lock(shmMutex_);
    if (!shmDecided_.load(std::memory_order_relaxed)) setUp(own);
  }).detach();
}

void Group::stopSetUp() {
  setUpStop_.store(true, std::memory_order_release);  // a set-up under way gives up soon
  if (setUpControl_) {
    std::lock_guard<std::mutex> alive(setUpControl_->mutex);
    setUpControl_->cancelled = true;
  }
}

std::shared_ptr<shm::Channel> Group::channel() {
  if (size_ < 2) return nullptr;
  // Set up, without error: the channel is fixed for the group's life (no lock to take).
  if (shmReady_.load(std::memory_order_acquire)) return shmOwned_;
  std::lock_guard<std::mutex> lock(shmMutex_);
  if (!shmDecided_) setUp(store_);
  // Every collective raises the set-up's error: none of them can run.
  if (setUpError_) std::rethrow_exception(setUpError_);
  // A broken channel refuses the collective (checkCollectivesAllowed) rather than sending it
  // over UCX: every rank must take the same path for the same collective.
  return std::atomic_load(&shm_);
}

void Group::setUp(const std::shared_ptr<core::KeyValueStore>& store) {
  // The set-up waits for every rank in the store, which a dead one never reaches.
  if (health_->anyDead()) return;
  const core::SetupDeaths deaths = setupDeaths("the set-up of the group's shared memory", store);
  // The error every collective of the group raises from now on: `error`, or a Backend error
  // saying `why` when it is null.
  const auto fail = [this](const std::string& why, std::exception_ptr error) {
    health_->collectiveFailed(why);
    setUpError_ = error ? std::move(error) : engine::commError("commux: " + why);
    setUpFailed_ = true;
    shmDecided_ = true;
  };
  ShmSetup setup;
  try {
    setup = connectShm(*store, rank_, size_, engine_, deaths);
  } catch (...) {
    const std::exception_ptr error = std::current_exception();
    const core::ErrorReading reading = core::readError(error);
    switch (reading.kind) {
      case core::ErrorKind::InvalidArgument:  // this rank's settings differ from rank 0's
      case core::ErrorKind::Store:
        fail(reading.message, error);
        return;
      case core::ErrorKind::Network: {
        const std::string why = "rank " + std::to_string(rank_) +
                                " lost the store during the shared-memory set-up of the group: " +
                                peers_->storeLost(reading.message);
        fail(why, core::makeError(core::ErrorKind::Network, "commux: " + why, COMMUX_SITE));
        return;
      }
      case core::ErrorKind::Backend:
        // The ranks gave up at different steps of a collective set-up: none runs another
        // collective in this group.
        fail(reading.message,
             engine::commError("commux: " + reading.message +
                               "; this group runs no more collectives; create a new group "
                               "(without a dead rank) to go on"));
        return;
      default:
        fail("the set-up of the group's shared memory failed: " + reading.message, nullptr);
        return;
    }
  }
  if (setup.hierarchical) layout_ = std::make_shared<const HostLayout>(std::move(setup.layout));
  std::atomic_store(&shm_, std::move(setup.channel));
  if (layout_) {
    try {
      startRelay();
    } catch (const std::exception& e) {
      // Not retried (the set-up above is collective): this rank, and its host's ranks
      // if it leads, would no longer hear of every death, so the group runs no more
      // collectives, here or on this host.
      if (auto channel = std::atomic_load(&shm_)) channel->abandon();
      fail(std::string("the death watch could not start: ") + e.what(), nullptr);
      return;
    }
  }
  shmOwned_ = std::atomic_load(&shm_);
  shmDecided_ = true;
  shmReady_.store(true, std::memory_order_release);
}

std::shared_ptr<shm::Channel> Group::flatChannel(const char* what, bool cpu) {
  // Before the shared-memory set-up, which waits for every rank in the store.
  checkCollectivesAllowed(what);
  auto channel = this->channel();
  // A channel of a group that spans hosts holds this host's ranks only.
  return cpu && !layout_ ? channel : nullptr;
}

bool Group::hierarchical(shm::Kind kind, bool cpu, std::size_t bytes) const {
  if (!cpu || !layout_ || layout_->hierarchy == Hierarchy::Off) return false;
  if (layout_->hierarchy != Hierarchy::Auto) return true;
  // Allreduce, allgather, reduce_scatter and barrier gain from the smallest sizes (their flat
  // schedules cross hosts at most steps). Broadcast's and reduce's flat trees cross about as
  // often as the parts do, so below the threshold the extra shared-memory stages only cost
  // (docs/performance-log.md, "host-aware collectives").
  return !shm::hasRoot(kind) || bytes >= layout_->minBytes;
}

collectives::Route Group::route(collectives::Collective collective, const char* what, bool cpu,
                                std::size_t bytes, std::shared_ptr<shm::Channel>& channel) {
  channel = flatChannel(what, cpu);
  const shm::Kind kind = kindOf(collective);
  const bool inParts = kind != shm::Kind::Gather && kind != shm::Kind::Scatter &&
                       kind != shm::Kind::Alltoall;  // these stay flat across hosts
  collectives::RouteRequest request;
  request.collective = collective;
  request.channel = channel != nullptr;
  request.partsPossible = inParts && cpu && layout_ && layout_->hierarchy != Hierarchy::Off;
  request.partsChosen = request.partsPossible && hierarchical(kind, cpu, bytes);
  request.forced = Config::get().algorithms[static_cast<std::size_t>(collective)];
  const collectives::Route route = collectives::route(request);
  if (route.path != collectives::Path::SharedMemory) channel = nullptr;
  return route;
}

// --- Operations ------------------------------------------------------------------------

bool Group::launch(const std::shared_ptr<Request>& request, std::shared_ptr<engine::Op> op,
                   const std::optional<core::Stream>& stream) {
  op->setFailureWitness(witness_, request->peer());
  request->attach(op);
  std::string doomed;  // it involves a dead peer: fail it unless what arrived completes it
  {
    std::lock_guard<std::mutex> lock(trackMutex_);
    doomed = checkHealthy(*request);
    trackLocked(request);
    // COMMUX_GROUP defers host operations only: a CUDA one waits for its stream instead.
    Batch* batch = Config::get().group && !stream ? batchOfThisThreadLocked() : nullptr;
    if (batch != nullptr) {
      request->setDeferred(true);
      batch->requests.push_back(request);
      batch->ops.push_back(std::move(op));
      if (!doomed.empty()) request->failAfterDraining(engine::commError(doomed));
      return true;
    }
  }
  engine_->submit(engine::Submission::start(std::move(op)).after(stream));
  if (!doomed.empty()) {
    request->failAfterDraining(engine::commError(doomed));
    if (request->collective()) {
      if (const auto sequence = request->parts().sequence()) retellLeavesBefore(*sequence);
    }
  }
  return false;
}

void Group::trackLocked(const std::shared_ptr<Request>& request) {
  if (inflight_.size() >= pruneAt_) {
    inflight_.erase(std::remove_if(inflight_.begin(), inflight_.end(),
                                   [](const auto& w) {
                                     auto strong = w.lock();
                                     return !strong || strong->done();
                                   }),
                    inflight_.end());
    pruneAt_ = std::max<std::size_t>(64, 2 * inflight_.size());
  }
  inflight_.emplace_back(request);
}

void Group::launchAll(const std::vector<std::shared_ptr<Request>>& requests,
                      std::vector<std::shared_ptr<engine::Op>> ops) {
  COMMUX_ASSERT(requests.size() == ops.size(), "commux: launchAll needs one Request per Op");
  if (ops.empty()) return;
  std::vector<std::pair<std::size_t, std::string>> doomed;
  {
    std::lock_guard<std::mutex> lock(trackMutex_);
    // All checked before any is attached or tracked: a refusal (a send to a dead peer)
    // starts nothing and leaves nothing behind.
    for (std::size_t i = 0; i < requests.size(); ++i) {
      std::string why = checkHealthy(*requests[i]);
      if (!why.empty()) doomed.emplace_back(i, std::move(why));
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      ops[i]->setFailureWitness(witness_, requests[i]->peer());
      requests[i]->attach(ops[i]);
      trackLocked(requests[i]);
    }
    if (Batch* batch = Config::get().group ? batchOfThisThreadLocked() : nullptr) {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        requests[i]->setDeferred(true);
        batch->requests.push_back(requests[i]);
        batch->ops.push_back(std::move(ops[i]));
      }
      ops.clear();
    }
  }
  if (!ops.empty()) engine_->submit(engine::Submission::start(std::move(ops)));
  for (auto& [i, why] : doomed) requests[i]->failAfterDraining(engine::commError(why));
}

std::size_t Group::batchIndexLocked() const {
  const auto self = std::this_thread::get_id();
  return static_cast<std::size_t>(
      std::find_if(batches_.begin(), batches_.end(),
                   [&](const Batch& batch) { return batch.owner == self; }) -
      batches_.begin());
}

Group::Batch* Group::batchOfThisThreadLocked() {
  if (openBatches_.load(std::memory_order_relaxed) == 0) return nullptr;
  const std::size_t i = batchIndexLocked();
  return i < batches_.size() ? &batches_[i] : nullptr;
}

bool Group::batching() const {
  if (openBatches_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> lock(trackMutex_);
  return batchIndexLocked() < batches_.size();
}

void Group::startBatch() {
  checkSameProcess();
  std::lock_guard<std::mutex> lock(trackMutex_);
  COMMUX_CHECK(batchOfThisThreadLocked() == nullptr, Runtime,
               "commux: startCoalescing called twice without endCoalescing");
  batches_.push_back(Batch{std::this_thread::get_id(), {}, {}});
  openBatches_.store(batches_.size(), std::memory_order_relaxed);
}

void Group::endBatch() {
  Batch batch;
  {
    std::lock_guard<std::mutex> lock(trackMutex_);
    Batch* mine = batchOfThisThreadLocked();
    COMMUX_CHECK(mine != nullptr, Runtime,
                 "commux: endCoalescing called without startCoalescing");
    batch = std::move(*mine);
    batches_.erase(batches_.begin() + (mine - batches_.data()));
    openBatches_.store(batches_.size(), std::memory_order_relaxed);
  }
  for (auto& request : batch.requests) request->setDeferred(false);
  // One submission for the whole batch: one pass through the worker lock, and the
  // messages leave back to back.
  if (!batch.ops.empty()) engine_->submit(engine::Submission::start(std::move(batch.ops)));
}

}  // namespace commux::group
