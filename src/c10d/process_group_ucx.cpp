// ProcessGroupUCX: construction and point-to-point operations.
#include "commux/process_group_ucx.hpp"

#include <c10/util/Exception.h>

#include <unistd.h>

#include <algorithm>
#include <thread>
#include <tuple>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "c10d/c10d_store.hpp"
#include "group/death_relay.hpp"
#include "group/peer_table.hpp"
#include "c10d/process_engine.hpp"
#include "group/shm_setup.hpp"
#include "c10d/staging.hpp"
#include "c10d/streams.hpp"
#include "c10d/tensor_p2p_op.hpp"
#include "c10d/validation.hpp"
#include "c10d/work_ucx.hpp"
#include "commux/options.hpp"
#include "core/group_health.hpp"
#include "cuda/cuda_support.hpp"
#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "shm/channel.hpp"
#include "wire/tag.hpp"

namespace commux {
namespace {

// The engine's share of the configuration: it reads none itself.
engine::Settings engineSettings(const Config& c) {
  engine::Settings s;
  s.progressSpin = c.progressSpin;
  s.waitSpin = c.waitSpin;
  s.handOffDelay = c.handOffDelay;
  s.loopbackOnly = c.loopbackOnly;
  s.maxContexts = c.maxContexts;
  s.failureDetection = c.failureDetection == FailureDetection::Auto
                           ? engine::Settings::FailureDetection::Auto
                       : c.failureDetection == FailureDetection::Ucx
                           ? engine::Settings::FailureDetection::Ucx
                           : engine::Settings::FailureDetection::Off;
  return s;
}

// How many leaders watch each host leader (the ones before it in host order): they tell
// every other leader of its death, so it is missed only once all of them are dead.
constexpr int kLeaderWatches = 2;

std::size_t totalBytes(const std::vector<at::Tensor>& tensors) {
  std::size_t bytes = 0;
  for (const auto& t : tensors) bytes += static_cast<std::size_t>(t.numel()) * t.element_size();
  return bytes;
}

// Several tensors to one peer travel as one IOV message when COMMUX_COALESCE is on.
bool packs(const std::vector<at::Tensor>& tensors) {
  return tensors.size() > 1 && Config::get().coalesce;
}

}  // namespace

std::shared_ptr<engine::Engine> processEngine(std::size_t groupSize) {
  return engine::Engine::instance(groupSize, engineSettings(Config::get()));
}

ProcessGroupUCX::ProcessGroupUCX(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                 int size, std::chrono::milliseconds timeout,
                                 bool setUpInBackground)
    : c10d::Backend(rank, size), timeout_(timeout), setUpInBackground_(setUpInBackground) {
  // Before anything is published or sent: the tag's source field names at most 2^16 ranks.
  const std::uint32_t maxRanks = Config::get().maxRanks;
  TORCH_CHECK_VALUE(size >= 1, "commux: group size ", size, " is not positive");
  TORCH_CHECK_VALUE(static_cast<std::uint32_t>(size) <= maxRanks, "commux: a group of ", size,
                    " ranks is more than the UCX tag's source field can name (", maxRanks,
                    maxRanks < wire::kMaxRanks ? " ranks, lowered by COMMUX_MAX_RANKS" : " ranks",
                    "): use a smaller group, or split the job into groups of at most ", maxRanks,
                    " ranks");
  TORCH_CHECK_VALUE(rank >= 0 && rank < size, "commux: rank ", rank,
                    " is outside a group of size ", size);
  engine_ = processEngine(static_cast<std::size_t>(size));
  forkGeneration_ = engine::forkGeneration();
  creatorPid_ = static_cast<int>(::getpid());
  health_ = std::make_shared<core::GroupHealth>(size);
  store_ = store;
  keyValueStore_ = std::make_shared<C10dStore>(store);
  // No purge here: it runs later on the driver and would drop messages that peers send to
  // this new group once it is published (a destroyed group's are purged at destruction,
  // and ids come back only after every other one was used).
  context_ = engine_->contexts().acquire();
  peers_ = std::make_unique<PeerTable>(
      keyValueStore_, rank, size,
      [this](int peer, const engine::Route& route, const engine::ProcessId& process) {
        if (peer == rank_) return;
        engine_->watchPeer(route.address, process);
        // Found dead before this group listened (another group saw it, or at once).
        if (engine_->peerFailed(route.address)) markDead(peer, "its process is gone");
      });
  failureListener_ = engine_->addFailureListener(
      [this](const std::string& address, const std::string& why) { onPeerFailed(address, why); });
  try {
    peers_->publish(engine_->address(), context_);
  } catch (...) {
    engine_->removeFailureListener(failureListener_);
    engine_->contexts().release(context_);
    throw;
  }
  startSetUp();
}

ProcessGroupUCX::~ProcessGroupUCX() {
  if (inheritedByFork()) {
    // A forked child: the group's threads, locks, UCX state and shared memory are the
    // parent's. Free none of it (member destructors then see empty handles).
    new std::tuple(std::move(engine_), std::move(peers_), std::move(relay_), std::move(shm_),
                   std::move(store_), std::move(keyValueStore_), std::move(health_),
                   std::move(layout_));
    return;
  }
  stopSetUp();  // before anything it uses goes
  // First: a notice arriving now would mark a rank dead in a group that is going away.
  if (relay_) relay_->close();
  engine_->removeFailureListener(failureListener_);
  std::atomic_store(&shm_, std::shared_ptr<shm::Channel>());
  failOrphans("the process group was destroyed with this receive in flight");
  engine_->purgeContext(context_);
  engine_->contexts().release(context_);
}

void ProcessGroupUCX::failOrphans(const std::string& why) {
  std::vector<c10::intrusive_ptr<WorkUCX>> orphans;
  {
    std::lock_guard<std::mutex> lock(trackMutex_);
    for (const auto& weak : inflight_) {
      auto work = weak.lock();
      if (work && !work->isCompleted() &&
          (work->retrieveOpType() == c10d::OpType::RECV ||
           work->retrieveOpType() == c10d::OpType::RECVANYSOURCE)) {
        orphans.push_back(std::move(work));
      }
    }
  }
  for (auto& work : orphans) {
    work->failQuietly(engine::commError("commux: " + work->description() + ": " + why));
  }
}

void ProcessGroupUCX::onPeerFailed(const std::string& address, const std::string& why) {
  for (int peer : peers_->ranksAt(address)) {
    if (peer != rank_) markDead(peer, why);
  }
}

void ProcessGroupUCX::markDead(int peer, const std::string& why, int from) {
  std::vector<c10::intrusive_ptr<WorkUCX>> victims;
  {
    // Under trackMutex_, as launch() checks: an operation is either refused there or found
    // in flight here.
    std::lock_guard<std::mutex> lock(trackMutex_);
    if (!health_->markDead(peer, why)) return;
    for (const auto& weak : inflight_) {
      auto work = weak.lock();
      if (work && !work->isCompleted() && work->involves(peer)) victims.push_back(std::move(work));
    }
  }
  if (auto channel = std::atomic_load(&shm_)) channel->peerDied(peer);
  const std::string died = "rank " + std::to_string(peer) + " died (" + why + ")";
  for (auto& work : victims) {
    work->failAfterDraining(engine::commError("commux: " + work->description() + ": " + died));
  }
  // After health_ knows it: startRelay relays the deaths known when it is ready, so each
  // one goes out from here or from there.
  if (relayReady_.load()) relayDeath(peer, why, from);
}

std::vector<int> ProcessGroupUCX::knownRanks() const { return peers_->knownRanks(); }

void ProcessGroupUCX::watchMembers() {
  if (!relayReady_.load(std::memory_order_acquire)) peers_->resolveAll();
}

void ProcessGroupUCX::startRelay() {
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
  // Listening before watching: a notice sent as soon as the others watch must find it.
  relay_ = std::make_unique<DeathRelay>(
      engine_, context_, rank_,
      [this](int peer, const std::string& why, int from) {
        if (peer >= 0 && peer < size_ && peer != rank_ && from >= 0 && from < size_) {
          markDead(peer, why, from);
        }
      });
  peers_->prefetch(reachable);
  peers_->get(watched);  // watched from now on (onResolved)
  relayReady_.store(true);
  // Seen before now (here or by a notice that waited): relayed as if seen here, which may
  // tell a leader what it knows already; the receiver drops what it knew.
  for (int dead : health_->deadRanks()) relayDeath(dead, health_->deadWhy(dead), -1);
}

void ProcessGroupUCX::relayDeath(int peer, const std::string& why, int from) {
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
  relay_->tell(peer, why, routes);
}

std::string ProcessGroupUCX::checkHealthy(const WorkUCX& work) {
  // The description is formatted only when the check may refuse.
  if (work.collective() && collectivesMayBeRefused()) {
    checkCollectivesAllowed(work.description().c_str());
  }
  if (!health_->anyDead()) return "";
  std::string why;
  int dead = -1;
  if (work.peer() >= 0) {
    why = health_->deadWhy(work.peer());
    if (!why.empty()) dead = work.peer();
  } else {
    dead = health_->firstDead(&why);
  }
  if (dead < 0) return "";
  std::string message = "commux: " + work.description() + ": rank " + std::to_string(dead) +
                        " died (" + why + ")";
  // A dead peer receives nothing: a send fails now. Receives and collectives may still
  // complete from messages it sent before it died.
  if (work.retrieveOpType() == c10d::OpType::SEND) {
    C10_THROW_ERROR(DistBackendError, message + "; operations with it fail from now on");
  }
  return message;
}

bool ProcessGroupUCX::collectivesMayBeRefused() const {
  if (health_->anyCollectiveFailed()) return true;
  auto channel = std::atomic_load(&shm_);
  return channel && channel->broken();
}

void ProcessGroupUCX::checkCollectivesAllowed(const char* what) {
  if (auto channel = std::atomic_load(&shm_); channel && channel->broken()) {
    if (const int dead = channel->deadRank(); dead >= 0) {
      // Found dead by this rank's watch or another survivor's: no collective can finish.
      std::string why = health_->deadWhy(dead);
      C10_THROW_ERROR(DistBackendError,
                      std::string("commux: ") + what + ": rank " + std::to_string(dead) +
                          " died" + (why.empty() ? "" : " (" + why + ")") +
                          "; this group runs no more collectives; create a new group without "
                          "it to go on");
    }
    health_->collectiveFailed(channel->brokenReason());
  }
  const std::string failure = health_->collectiveFailure();
  if (failure.empty()) return;
  C10_THROW_ERROR(DistBackendError,
                  std::string("commux: ") + what +
                      ": refused, because an earlier collective of this group failed here (" +
                      failure +
                      "). The ranks may be out of step (others may have finished collectives "
                      "this rank abandoned, and their messages may still arrive), so the group "
                      "runs no more collectives; point-to-point operations still work. Destroy "
                      "the group and create a new one to go on");
}

ProcessGroupUCX::Health ProcessGroupUCX::health() const {
  Health h;
  h.deadRanks = health_->deadRanks();
  const State s = state_.load(std::memory_order_acquire);
  std::string why;
  if (s != State::Running) {
    h.reason = std::string("the group was ") + (s == State::Aborted ? "aborted" : "shut down");
  } else if (const int dead = health_->firstDead(&why); dead >= 0) {
    h.reason = "rank " + std::to_string(dead) + " died (" + why + ")";
  } else if (auto failure = health_->collectiveFailure(); !failure.empty()) {
    h.reason = "a collective failed: " + failure;
  } else if (auto channel = std::atomic_load(&shm_); channel && channel->broken()) {
    h.reason = channel->brokenReason();
  }
  h.healthy = h.reason.empty();
  return h;
}

std::map<std::string, std::int64_t> ProcessGroupUCX::sharedMemoryShape() const {
  const auto channel = std::atomic_load(&shm_);
  if (!channel) return {};
  const shm::ChannelShape& shape = channel->shape();
  const auto n = [](auto v) { return static_cast<std::int64_t>(v); };
  return {{"ranks", n(shape.size)},
          {"slot_bytes", n(shape.slotBytes)},
          {"copy_step_bytes", n(shape.copyStepBytes)},
          {"small_bytes", n(shape.smallBytes)},
          {"depth", n(shape.depth)},
          {"cma_bytes", n(shape.cmaBytes)},
          {"crowded", n(shape.crowded)},
          {"poll_ns", n(shape.poll.count())}};
}

core::SetupDeaths ProcessGroupUCX::setupDeaths(const char* what,
                                               std::shared_ptr<core::KeyValueStore> via) {
  if (!via) via = keyValueStore_;
  return core::SetupDeaths{
      [this, via](const std::vector<int>& ranks) { peers_->getPublished(ranks, *via); },
      [this] {
        if (setUpStop_.load(std::memory_order_acquire)) {
          return std::string("this group was destroyed, aborted or shut down on rank ") +
                 std::to_string(rank_) + " before its set-up completed";
        }
        std::string why;
        const int dead = health_->firstDead(&why);
        return dead < 0 ? std::string() : "rank " + std::to_string(dead) + " died (" + why + ")";
      },
      what};
}

void ProcessGroupUCX::joinSetUp() {
  // Also once decided, when it failed: its error, not a later refusal, says why.
  if (!shmDecided_.load(std::memory_order_acquire) ||
      setUpFailed_.load(std::memory_order_acquire)) {
    shmChannel();
  }
}

void ProcessGroupUCX::startSetUp() {
  // The set-up waits for every rank in the store: on a thread of its own from construction
  // on, it is usually done before the first collective, which then returns its Work at
  // once, and a rank that meets its first collective late (or is refused there by torch)
  // keeps nobody waiting. Not with a store written in Python: each call would need the
  // GIL, which the destructor may hold.
  if (size_ < 2 || !setUpInBackground_) return;
  auto control = std::make_shared<SetUpControl>();
  setUpControl_ = control;
  // Detached: making its own store connection may take the store's timeout (the store's
  // host is gone), and nothing may wait for that. It touches the group only under
  // control->mutex, and never once the group cancelled it (stopSetUp).
  std::thread([this, control, store = keyValueStore_] {
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

void ProcessGroupUCX::stopSetUp() {
  setUpStop_.store(true, std::memory_order_release);  // a set-up under way gives up soon
  if (setUpControl_) {
    std::lock_guard<std::mutex> alive(setUpControl_->mutex);
    setUpControl_->cancelled = true;
  }
}

std::shared_ptr<shm::Channel> ProcessGroupUCX::shmChannel() {
  if (size_ < 2) return nullptr;
  std::lock_guard<std::mutex> lock(shmMutex_);
  if (!shmDecided_) setUp(keyValueStore_);
  // Every collective raises the set-up's error: none of them can run.
  if (setUpError_) std::rethrow_exception(setUpError_);
  // A broken channel refuses the collective (checkCollectivesAllowed) rather than sending it
  // over UCX: every rank must take the same path for the same collective.
  return std::atomic_load(&shm_);
}

void ProcessGroupUCX::setUp(const std::shared_ptr<core::KeyValueStore>& store) {
  // The set-up waits for every rank in the store, which a dead one never reaches.
  if (health_->anyDead()) return;
  const core::SetupDeaths deaths = setupDeaths("the set-up of the group's shared memory", store);
  // The error every collective of the group raises from now on.
  const auto fail = [this](const std::string& why, auto raise) {
    health_->collectiveFailed(why);
    try {
      raise();
    } catch (...) {
      setUpError_ = std::current_exception();
    }
    setUpFailed_ = true;
    shmDecided_ = true;
  };
  ShmSetup setup;
  try {
    setup = connectShm(*store, rank_, size_, engine_, deaths);
  } catch (const c10::ValueError& e) {
    // This rank's settings differ from rank 0's: no collective of the group can work.
    fail(e.what_without_backtrace(), [] { throw; });
    return;
  } catch (const c10::DistNetworkError& e) {
    const std::string why = "rank " + std::to_string(rank_) +
                            " lost the store during the shared-memory set-up of the group: " +
                            peers_->storeLost(e.what_without_backtrace());
    fail(why, [&] { C10_THROW_ERROR(DistNetworkError, "commux: " + why); });
    return;
  } catch (const c10::DistStoreError& e) {
    fail(e.what_without_backtrace(), [] { throw; });
    return;
  } catch (const c10::DistBackendError& e) {
    // The ranks gave up at different steps of a collective set-up: none runs another
    // collective in this group.
    const std::string why = e.what_without_backtrace();
    fail(why, [&] {
      C10_THROW_ERROR(DistBackendError, "commux: " + why +
                                            "; this group runs no more collectives; create a "
                                            "new group (without a dead rank) to go on");
    });
    return;
  } catch (const std::exception& e) {
    const std::string why = std::string("the set-up of the group's shared memory failed: ") + e.what();
    fail(why, [&] { C10_THROW_ERROR(DistBackendError, "commux: " + why); });
    return;
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
      const std::string why = std::string("the death watch could not start: ") + e.what();
      if (auto channel = std::atomic_load(&shm_)) channel->abandon();
      fail(why, [&] { C10_THROW_ERROR(DistBackendError, "commux: " + why); });
      return;
    }
  }
  shmDecided_ = true;
}

c10::intrusive_ptr<WorkUCX> ProcessGroupUCX::makeWork(c10d::OpType type,
                                                      std::vector<at::Tensor> outputs,
                                                      engine::Description description,
                                                      std::chrono::milliseconds timeout) {
  checkUsable();
  return c10::make_intrusive<WorkUCX>(rank_, type, std::move(outputs),
                                      timeout.count() >= 0 ? timeout : timeout_,
                                      std::move(description), engine_);
}

void ProcessGroupUCX::launch(const c10::intrusive_ptr<WorkUCX>& work,
                             std::shared_ptr<engine::Op> op) {
  work->attach(op);
  // CUDA tensors: the operation starts once the caller's current stream has produced its
  // inputs, and whatever it does for the caller afterwards goes on that stream.
  std::optional<c10::Device> device;
  if (const auto& index = op->cudaDevice()) {
    device = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(*index));
  } else {
    device = work->cudaDevice();
  }
  if (op->callerSynchronised()) device.reset();
  std::optional<core::Stream> stream;
  std::string doomed;  // it involves a dead peer: fail it unless what arrived completes it
  if (device) {
    const c10::Stream current = c10::impl::getDeviceGuardImpl(device->type())->getStream(*device);
    stream = toCore(current);
    op->setUserStream(*stream);
    work->setStream(current);
  }
  {
    std::lock_guard<std::mutex> lock(trackMutex_);
    doomed = checkHealthy(*work);
    bool defer = false;
    if (coalescing_.load(std::memory_order_relaxed)) {
      coalesced_.push_back(work);
      defer = Config::get().group;
    }
    if (inflight_.size() >= pruneAt_) {
      inflight_.erase(std::remove_if(inflight_.begin(), inflight_.end(),
                                     [](const auto& w) {
                                       auto strong = w.lock();
                                       return !strong || strong->isCompleted();
                                     }),
                      inflight_.end());
      pruneAt_ = std::max<std::size_t>(64, 2 * inflight_.size());
    }
    inflight_.emplace_back(work);
    // COMMUX_GROUP defers host operations only: a CUDA one waits for its stream instead.
    if (defer && !stream) {
      work->setDeferred(true);
      deferredWorks_.push_back(work);
      deferredOps_.push_back(std::move(op));
      if (!doomed.empty()) work->failAfterDraining(engine::commError(doomed));
      return;
    }
  }
  engine_->submit(std::move(op), engine::Engine::Drive::IfFree, stream);
  if (!doomed.empty()) work->failAfterDraining(engine::commError(doomed));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::send(std::vector<at::Tensor>& tensors,
                                                     int dstRank, int tag) {
  const OpEntry entry(*this);
  checkTensors("send", tensors, false);
  checkTag("send", tag);
  checkPeer("send", "destination", dstRank, size_);
  auto route = peers_->get(dstRank, "a send to it");
  auto work = makeWork(
      c10d::OpType::SEND, tensors,
      engine::Description::p2p("send", "to", dstRank, tag, totalBytes(tensors), tensors.size()),
      c10d::kUnsetTimeout);
  work->setPeer(dstRank);
  const bool pack = packs(tensors);
  launch(work, std::make_shared<TensorP2POp>(
                   engine::P2POp::Kind::Send, tensors, route,
                   wire::p2pTag(route->context, static_cast<std::uint32_t>(rank_),
                                static_cast<std::uint32_t>(tag), pack),
                   wire::kExactMask, pack, work->parts(), work->completer()));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::recv(std::vector<at::Tensor>& tensors,
                                                     int srcRank, int tag) {
  const OpEntry entry(*this);
  checkTensors("recv", tensors, false);
  checkWritable("recv", tensors);
  checkTag("recv", tag);
  checkPeer("recv", "source", srcRank, size_);
  peers_->get(srcRank, "a receive from it");  // watched from now on
  auto work = makeWork(
      c10d::OpType::RECV, tensors,
      engine::Description::p2p("recv", "from", srcRank, tag, totalBytes(tensors), tensors.size()),
      c10d::kUnsetTimeout);
  work->setPeer(srcRank);
  launch(work, std::make_shared<TensorP2POp>(
                   engine::P2POp::Kind::Recv, tensors, nullptr,
                   wire::p2pTag(context_, static_cast<std::uint32_t>(srcRank),
                                static_cast<std::uint32_t>(tag)),
                   wire::kExactMask, packs(tensors), work->parts(), work->completer()));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::recvAnysource(std::vector<at::Tensor>& tensors,
                                                              int tag) {
  const OpEntry entry(*this);
  checkTensors("recv", tensors, false);
  checkWritable("recv", tensors);
  checkTag("recv", tag);
  // With several tensors, later messages would have to come from whichever rank matched
  // first, which a single masked UCX receive per tensor cannot promise.
  TORCH_CHECK_VALUE(tensors.size() == 1,
                    "commux: a receive from any source takes exactly one tensor, got ",
                    tensors.size());
  peers_->resolveAll();  // any member's death fails it
  auto work = makeWork(
      c10d::OpType::RECVANYSOURCE, tensors,
      engine::Description::p2p("recv", "from", -1, tag, totalBytes(tensors), tensors.size()),
      c10d::kUnsetTimeout);
  launch(work, std::make_shared<TensorP2POp>(
                   engine::P2POp::Kind::Recv, tensors, nullptr,
                   wire::p2pTag(context_, 0, static_cast<std::uint32_t>(tag)), wire::kAnySourceMask,
                   false, work->parts(), work->completer()));
  return work;
}

}  // namespace commux
