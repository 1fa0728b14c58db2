#include "engine/engine.hpp"

#include <pthread.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <type_traits>

#include "cuda/cuda_support.hpp"
#include "engine/blocking_transfer.hpp"
#include "engine/errors.hpp"
#include "ucx/status.hpp"

namespace commux::engine {
namespace {

std::mutex instanceMutex;
std::weak_ptr<Engine> instanceRef;
std::atomic<Engine::BlockingWrapper> blockingWrapper{nullptr};

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Objects whose last reference went on a thread they must join (an engine's progress or
// watch thread, a channel's lane) are destroyed on a helper thread. Process exit joins the
// helpers (Engine::shutdownInstance): a detached one could still be destroying an engine
// while the UCX libraries unload.
struct Reaper {
  std::thread thread;
  std::shared_ptr<std::atomic<bool>> done;
  std::uint32_t generation = forkGeneration();  // a forked child has no such thread
};
std::mutex reapersMutex;
std::vector<Reaper> reapers;
// Set once process exit has joined the helpers (ExitGuard): a later one is detached, since
// nothing would join it and `reapers` may already be gone.
bool reapersClosed = false;

}  // namespace

void Engine::destroyOnHelperThread(std::function<void()> destroy) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard<std::mutex> lock(reapersMutex);
  if (reapersClosed) {
    std::thread(std::move(destroy)).detach();
    return;
  }
  // Helpers that finished are joined here, so a process that rebuilds groups for weeks
  // keeps no more than the few in progress.
  for (auto it = reapers.begin(); it != reapers.end();) {
    if (it->done->load() && it->generation == forkGeneration()) {
      it->thread.join();
      it = reapers.erase(it);
    } else {
      ++it;
    }
  }
  reapers.push_back(Reaper{std::thread([destroy = std::move(destroy), done] {
                             destroy();
                             done->store(true);
                           }),
                           done});
}

namespace {

void joinReapers() {
  std::vector<Reaper> all;
  {
    std::lock_guard<std::mutex> lock(reapersMutex);
    all.swap(reapers);
  }
  for (auto& reaper : all) {
    if (reaper.generation != forkGeneration()) {
      // The parent's thread: this process never had it, so it can neither join nor
      // destroy its handle (a joinable std::thread terminates the process when destroyed).
      new std::thread(std::move(reaper.thread));
    } else if (reaper.thread.get_id() == std::this_thread::get_id()) {
      reaper.thread.detach();  // an engine's teardown ran exit code on its own helper
    } else {
      Engine::runBlocking([](void* t) { static_cast<std::thread*>(t)->join(); }, &reaper.thread);
    }
  }
}

// Stops the progress thread before the UCX libraries unload, for processes that exit with
// process groups still alive. Declared after the reapers: it runs before they are destroyed.
struct ExitGuard {
  ~ExitGuard() {
    Engine::shutdownInstance();
    std::lock_guard<std::mutex> lock(reapersMutex);
    reapersClosed = true;
  }
} exitGuard;

}  // namespace

std::shared_ptr<Engine> Engine::instance(std::size_t groupSize, const Settings& settings) {
  // The child of a fork gets locks that no thread of the parent held at that moment.
  watchForks(
      [] {
        instanceMutex.lock();
        reapersMutex.lock();
      },
      [] {
        reapersMutex.unlock();
        instanceMutex.unlock();
      });
  std::lock_guard<std::mutex> lock(instanceMutex);
  auto engine = instanceRef.lock();
  // A forked child makes an engine of its own: the parent's is the parent's.
  if (engine && engine->inherited()) engine.reset();
  if (!engine) {
    auto hints = ucx::JobHints::fromEnvironment();
    // Started without a launcher (rank and size passed by hand): the first group is
    // usually the world.
    if (hints.endpoints == 0) hints.endpoints = groupSize;
    // The last reference can drop inside a completion callback (a Work released there),
    // on the progress thread or on a thread that holds the worker lock, or in a failure
    // listener on the peer watch's thread. None may join the progress thread and the watch
    // (neither can join itself; a driver would wait for the lock it holds), so delete from
    // a helper thread.
    engine = std::shared_ptr<Engine>(new Engine(settings, hints), [](Engine* e) {
      if (e->inherited()) return;  // its threads and UCX state live on in the parent
      if (e->onProgressThread() || e->drivenByThisThread() || e->onWatchThread()) {
        destroyOnHelperThread([e] { delete e; });
      } else {
        delete e;
      }
    });
    instanceRef = engine;
  }
  return engine;
}

void Engine::setBlockingWrapper(BlockingWrapper wrapper) { blockingWrapper.store(wrapper); }

void Engine::runBlocking(void (*call)(void*), void* arg) {
  if (auto wrapper = blockingWrapper.load()) {
    wrapper(call, arg);
  } else {
    call(arg);
  }
}

void Engine::shutdownInstance() {
  std::shared_ptr<Engine> engine;
  {
    std::lock_guard<std::mutex> lock(instanceMutex);
    engine = instanceRef.lock();
  }
  if (engine && !engine->inherited()) engine->stop();
  joinReapers();
}

unsigned UcxWorkerPort::progress() { return worker_.progress(); }
bool UcxWorkerPort::arm() { return worker_.arm(); }
void UcxWorkerPort::signal() { worker_.signal(); }
int UcxWorkerPort::eventFd() const { return worker_.eventFd(); }

Engine::Engine(const Settings& settings, ucx::JobHints hints, std::unique_ptr<WorkerPort> port)
    : context_(settings.loopbackOnly, hints),
      worker_(context_),
      port_(port ? std::move(port) : std::make_unique<UcxWorkerPort>(worker_)),
      settings_(settings),
      waker_(
          port_->eventFd(), [this] { port_->signal(); }, settings.handOffDelay,
          settings.sleepSafetyNet),
      contexts_(settings.maxContexts),
      endpoints_(worker_,
                 [this](const std::string& address) { return endpointErrorHandler(address); }),
      // Never refused: commands pushed while the engine stops are run by failStranded().
      streamWaits_([this](StreamWaits::Command command) {
        append(std::move(command));
        waker_.handOff();
      }),
      watch_([this](const std::string& address, const std::string& why) {
        const NeverDrives onWatchThread;
        deliverFailure(address, why);
      }) {
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  stop();
  callbacksClosed_.store(true, std::memory_order_release);
}

void Engine::stop() {
  // Process exit (ExitGuard, atexit) and the last reference may race to stop.
  std::lock_guard<std::mutex> once(stopMutex_);
  if (!thread_.joinable()) return;
  {
    // Under failureMutex_: no failure reaches a group from now on (deliverFailure), and a
    // listener already running has finished. At process exit the groups outlive the
    // engine (Python never destroys them), and peers that exit first would otherwise be
    // reported while this process tears torch down, to listeners that allocate tensors
    // (the death relay).
    std::lock_guard<std::mutex> lock(failureMutex_);
    stopping_.store(true);
  }
  waker_.stop();
  runBlocking([](void* thread) { static_cast<std::thread*>(thread)->join(); }, &thread_);
  failStranded();
}

bool Engine::drivenByThisThread() const noexcept {
  return driver_.load(std::memory_order_relaxed) == std::this_thread::get_id();
}

namespace {

// How this thread may drive the worker: the engine's per-thread policy, in one place.
// Counters, not flags, since each state nests (a completion callback that submits, a lane
// run inside a wait). Plain ints, so that reading it is one thread-local access and no
// initialisation check.
struct ThreadPolicy {
  int drivingDepth = 0;            // how deeply it holds the worker lock (Driving)
  int runningAfterRelease = 0;     // inside what afterRelease queued (a future's callbacks)
  int neverDrivesDepth = 0;        // Engine::NeverDrives: the lane's thread, the peer watch
  int holdingLaneDepth = 0;        // a waiter runs a shared-memory lane (HoldsLane)
  int startingForCallerDepth = 0;  // submit() starts the caller's own operation
};
static_assert(std::is_trivially_destructible_v<ThreadPolicy>);
thread_local ThreadPolicy policy;
// What this thread runs once it lets go of the worker (Engine::afterRelease).
thread_local std::vector<std::function<void()>> afterReleaseQueue;

void runAfterRelease() {
  struct Running {
    Running() { ++policy.runningAfterRelease; }
    ~Running() { --policy.runningAfterRelease; }
  } running;
  // A callback may drive the worker again and queue more: loop until none are left.
  while (!afterReleaseQueue.empty()) {
    std::vector<std::function<void()>> batch;
    batch.swap(afterReleaseQueue);
    for (auto& fn : batch) fn();
  }
}

// Holds the worker lock and records the driving thread (restored on nested use).
class Driving {
 public:
  Driving(std::recursive_mutex& mutex, std::atomic<std::thread::id>& driver, bool locked)
      : mutex_(mutex), driver_(driver) {
    // A lane or watch thread that drove the worker could run a user's callback, or wait
    // for a lock that a callback holds.
    COMMUX_ASSERT(policy.neverDrivesDepth == 0,
                  "commux: a thread that must never drive the worker tried to");
    if (!locked) mutex_.lock();
    // Read only under the lock: the previous driver is this thread (nested) or nobody.
    previous_ = driver_.load(std::memory_order_relaxed);
    driver_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    ++policy.drivingDepth;
  }
  ~Driving() {
    driver_.store(previous_, std::memory_order_relaxed);
    mutex_.unlock();
    if (--policy.drivingDepth == 0 && policy.holdingLaneDepth == 0 && !afterReleaseQueue.empty()) {
      runAfterRelease();
    }
  }

 private:
  std::recursive_mutex& mutex_;
  std::atomic<std::thread::id>& driver_;
  std::thread::id previous_;
};

}  // namespace

bool Engine::inAfterRelease() noexcept { return policy.runningAfterRelease > 0; }

Engine::NeverDrives::NeverDrives() { ++policy.neverDrivesDepth; }
Engine::NeverDrives::~NeverDrives() { --policy.neverDrivesDepth; }
bool Engine::startingForCaller() noexcept { return policy.startingForCallerDepth > 0; }

Engine::HoldsLane::HoldsLane() { ++policy.holdingLaneDepth; }
Engine::HoldsLane::~HoldsLane() {
  if (--policy.holdingLaneDepth == 0 && policy.drivingDepth == 0 && !afterReleaseQueue.empty()) {
    runAfterRelease();
  }
}

void Engine::afterRelease(std::function<void()> fn) {
  if (policy.drivingDepth > 0 || policy.holdingLaneDepth > 0) {
    afterReleaseQueue.push_back(std::move(fn));
  } else {
    fn();
  }
}

template <typename Work>
bool Engine::driveIfFree(Work&& work) {
  if (policy.neverDrivesDepth > 0 || !workerMutex_.try_lock()) return false;
  Driving driving(workerMutex_, driver_, /*locked=*/true);
  work();
  return true;
}

bool Engine::tryProgress() {
  return driveIfFree([this] { progressOnce(); });
}

void Engine::transferPosted(BlockingTransfer* transfer) {
  transfer->prevPosted_ = nullptr;
  transfer->nextPosted_ = transfersHead_;
  if (transfersHead_ != nullptr) transfersHead_->prevPosted_ = transfer;
  transfersHead_ = transfer;
  transfer->listed_ = true;
  ++transferCount_;
}

void Engine::transferEnded(BlockingTransfer* transfer) {
  if (!transfer->listed_) return;
  if (transfer->prevPosted_ != nullptr) {
    transfer->prevPosted_->nextPosted_ = transfer->nextPosted_;
  } else {
    transfersHead_ = transfer->nextPosted_;
  }
  if (transfer->nextPosted_ != nullptr) transfer->nextPosted_->prevPosted_ = transfer->prevPosted_;
  transfer->listed_ = false;
  --transferCount_;
}

void Engine::releaseQueuedRequests() {
  if (releaseLater_.empty()) return;
  for (void* request : releaseLater_) ucp_request_free(request);
  releaseLater_.clear();
}

void Engine::failStranded() {
  auto stranded = streamWaits_.close();
  Driving driving(workerMutex_, driver_, /*locked=*/false);
  for (const auto& op : stranded) startOp(op);  // fails it: the engine is stopping
  runQueuedWhileStopping();
}

void Engine::runQueuedWhileStopping() {
  // Queued commands still run, so every queued operation reports (startOp fails it now
  // that the engine stops): a dropped one would leave its Work waiting forever.
  std::vector<std::function<void(Engine&)>> queued;
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    queued.swap(submissions_);
  }
  for (auto& command : queued) {
    try {
      command(*this);
    } catch (...) {
    }
  }
}

void Engine::continueAfter(const core::Stream& stream, std::shared_ptr<Op> op,
                           std::function<void(Engine&)> command) {
  streamWaits_.add(stream, std::move(op), std::move(command));
}

void Engine::enqueue(std::function<void(Engine&)> command) {
  if (stopping_.load()) {
    throw std::runtime_error("commux: the communication engine has shut down");
  }
  append(std::move(command));
}

void Engine::append(std::function<void(Engine&)> command) {
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    submissions_.push_back(std::move(command));
  }
  submitted_.fetch_add(1, std::memory_order_seq_cst);
}

void Engine::opStarted(Op* op) {
  if (op->listed_) return;
  op->listed_ = true;
  op->prevActive_ = nullptr;
  op->nextActive_ = activeHead_;
  if (activeHead_ != nullptr) activeHead_->prevActive_ = op;
  activeHead_ = op;
  ++activeCount_;
}

void Engine::opFinished(Op* op) {
  if (!op->listed_) return;
  op->listed_ = false;
  if (op->prevActive_ != nullptr) {
    op->prevActive_->nextActive_ = op->nextActive_;
  } else {
    activeHead_ = op->nextActive_;
  }
  if (op->nextActive_ != nullptr) op->nextActive_->prevActive_ = op->prevActive_;
  op->prevActive_ = op->nextActive_ = nullptr;
  --activeCount_;
}

Pending* Engine::makePending(std::shared_ptr<Op> op, std::uint32_t slot) {
  if (pendingPool_.empty()) return new Pending{std::move(op), this, slot, nullptr};
  Pending* pending = pendingPool_.back().release();
  pendingPool_.pop_back();
  *pending = Pending{std::move(op), this, slot, nullptr};
  return pending;
}

void Engine::recycle(std::unique_ptr<Pending> pending) {
  pending->op.reset();  // the Op may go now
  // A bounded pool: a burst of thousands of requests does not stay allocated.
  if (pendingPool_.size() < 256) pendingPool_.push_back(std::move(pending));
}

void Engine::startOp(const std::shared_ptr<Op>& op) {
  // An op cancelled before it started (abort inside a coalescing window) posts nothing.
  if (op->finished()) return;
  op->engine_ = this;
  opStarted(op.get());
  if (stopping_.load()) {
    op->fail(*this, commError("commux: " + op->description() +
                              ": the communication engine shut down before it started"));
    return;
  }
  try {
    // UCX's CUDA transports work in the current device's context; the thread that starts
    // the operation (often the progress thread) may never have touched that device. The
    // progress thread keeps it (its later progress calls need it); a caller's thread that
    // started the operation inline gets its own device back.
    const auto& device = op->cudaDevice();
    if (device && onProgressThread()) cuda::setDevice(*device);
    const cuda::DeviceScope onDevice(onProgressThread() ? std::nullopt : device);
    op->start(*this);
  } catch (...) {
    op->fail(*this, std::current_exception());
  }
}

bool Engine::submit(Submission submission) {
  using Kind = Submission::Kind;
  using Busy = Submission::Busy;
  if (submission.after_) {
    COMMUX_ASSERT(submission.kind_ == Kind::Start, "commux: only a start waits for a stream");
    auto op = submission.op_;
    continueAfter(*submission.after_, std::move(submission.op_),
                  [op = std::move(op)](Engine& engine) { engine.startOp(op); });
    return true;
  }
  // The worker and every queued message go with a stopped engine.
  if (submission.kind_ == Kind::Purge && stopping_.load()) return true;
  // A fail-after-draining and a purge run on the driver only (their caller may hold what a
  // callback needs), whatever drive they were given.
  const bool driverOnly =
      submission.kind_ == Kind::FailAfterDraining || submission.kind_ == Kind::Purge;
  if (submission.drive_ == Drive::IfFree && policy.neverDrivesDepth == 0 && !driverOnly) {
    if (submission.busy_ == Busy::Wait) {
      Driving driving(workerMutex_, driver_, /*locked=*/false);
      runHere(submission);
      return true;
    }
    bool leftWork = false;
    // The submission is our own reference to its op: an operation that completes here may
    // be released by its Work right away (AddressSanitizer caught the read of a freed Op).
    if (driveIfFree([&] { leftWork = runHere(submission); })) {
      // Still in flight: the progress thread carries it on after the delay, unless the
      // caller waits for it right away (then the caller drives it). A call with nothing
      // else in flight spares the hand-off timer's clock read and system call.
      if (leftWork) {
        waker_.driverLeft();
      } else if (submission.kind_ == Kind::Call) {
        waker_.wakeParked();
      }
      if (submission.kind_ == Kind::StartAll) deferHandOffFor(submission.ops_);
      return true;
    }
  }
  if (submission.busy_ == Busy::Refuse) return false;
  COMMUX_ASSERT(submission.kind_ != Kind::Call, "commux: a blocking call cannot be queued");
  const bool batch = submission.kind_ == Kind::StartAll;
  auto ops = batch ? submission.ops_ : std::vector<std::shared_ptr<Op>>{};
  if (submission.kind_ == Kind::Purge) {
    try {
      enqueue(queued(std::move(submission)));
    } catch (const std::exception&) {
      return true;  // the engine began to stop meanwhile
    }
  } else {
    enqueue(queued(std::move(submission)));
  }
  // The hand-off pairs with the state a sleeper publishes before it looks at the queue
  // (see Waker::sleep), and also wakes a parked waiter, whose round may have drained the
  // queue just before this command arrived.
  waker_.handOff();
  if (batch) deferHandOffFor(ops);
  return true;
}

void Engine::startPart(const std::shared_ptr<Op>& part) {
  COMMUX_ASSERT(drivenByThisThread(), "commux: a part started without the worker");
  startOp(part);
}

void Engine::deferHandOffFor(const std::vector<std::shared_ptr<Op>>& ops) {
  // A batch still in flight is its caller's to drive first (it waits for it next).
  for (const auto& op : ops) {
    if (!op->finished()) {
      waker_.deferHandOff();
      return;
    }
  }
}

bool Engine::runHere(Submission& s) {
  using Kind = Submission::Kind;
  if (s.busy_ == Submission::Busy::Wait) {
    // Releasing a blocking transfer's request: also while the engine stops.
    s.fn_(*this, s.arg_);
    releaseQueuedRequests();
    return false;
  }
  if (s.kind_ == Kind::Finish) {
    // The operation's work is done: no progress round and no queued command (this was
    // ~4% of an 8-byte collective).
    report(s.op_, s.error_);
    return false;
  }
  if (stopping_.load()) throw std::runtime_error("commux: the communication engine has shut down");
  // Commands queued before this submission go first.
  drainSubmissions();
  switch (s.kind_) {
    case Kind::Start: {
      // Only the caller's own, outermost submit: one made inside a completion callback is
      // not followed by that caller's wait.
      struct ForCaller {
        bool counted;
        explicit ForCaller(bool outermost) : counted(outermost) {
          if (counted) ++policy.startingForCallerDepth;
        }
        ~ForCaller() {
          if (counted) --policy.startingForCallerDepth;
        }
      } forCaller(policy.drivingDepth == 1);
      startOp(s.op_);
      // Let UCX move what was just posted; work that is not UCX's needs no round. Either
      // way the driver hears that this thread left: a shared-memory collective queued on
      // its lane by its caller is woken by that hand-off unless the caller waits at once.
      if (s.op_->usesWorker()) progressRound();
      return true;
    }
    case Kind::StartAll:
      for (const auto& op : s.ops_) startOp(op);
      progressRound();
      return true;
    case Kind::Cancel:
      s.op_->fail(*this, s.error_);
      progressRound();
      return true;
    case Kind::Call:
      s.fn_(*this, s.arg_);
      releaseQueuedRequests();
      // Operations still in flight are the progress thread's after the delay. The
      // caller's own transfer is not: it waits for it right away.
      return activeCount_ != 0 || inflightRequests_ != 0;
    case Kind::FailAfterDraining:
    case Kind::Purge:
    case Kind::Finish:
      break;
  }
  COMMUX_ASSERT(false, "commux: this submission is never driven by its submitter");
  return false;
}

std::function<void(Engine&)> Engine::queued(Submission&& s) {
  using Kind = Submission::Kind;
  switch (s.kind_) {
    case Kind::Start:
      return [op = std::move(s.op_)](Engine& engine) { engine.startOp(op); };
    case Kind::StartAll:
      return [ops = std::move(s.ops_)](Engine& engine) {
        for (const auto& op : ops) engine.startOp(op);
      };
    case Kind::Cancel:
      return [op = std::move(s.op_), error = std::move(s.error_)](Engine& engine) {
        op->fail(engine, error);
      };
    case Kind::FailAfterDraining:
      return [op = std::move(s.op_), error = std::move(s.error_), dead = s.dead_](Engine& engine) {
        // A collective may need a few rounds: each step's receives match messages already here.
        for (int round = 0; round < 64 && !op->finished(); ++round) {
          if (!engine.progressRound()) break;
        }
        if (!op->finished() && (dead < 0 || op->awaits(dead))) op->failOnDeath(engine, error);
      };
    case Kind::Finish:
      return [op = std::move(s.op_), error = std::move(s.error_)](Engine& engine) {
        engine.report(op, error);
      };
    case Kind::Purge:
      return [context = s.context_](Engine& engine) { engine.dropUnexpected(context); };
    case Kind::Call:
      break;
  }
  COMMUX_ASSERT(false, "commux: a blocking call cannot be queued");
  return nullptr;
}

void Engine::watchPeer(const std::string& address, const ProcessId& id) {
  const auto mode = settings_.failureDetection;
  if (mode == Settings::FailureDetection::Off || address == worker_.address()) return;
  if (mode == Settings::FailureDetection::Auto && watch_.watch(address, id)) return;
  {
    std::lock_guard<std::mutex> lock(remoteMutex_);
    if (!remoteWatched_.insert(address).second) return;
  }
  // UCX notices a failure only on an endpoint, so make one now, also for a peer this
  // process only ever receives from.
  enqueue([address](Engine& engine) {
    try {
      engine.endpoints_.get(address);
    } catch (const std::exception& e) {
      engine.watch_.report(address, std::string("cannot connect to it: ") + e.what());
    }
  });
  waker_.handOff();
}

std::uint64_t Engine::addFailureListener(FailureListener listener) {
  std::lock_guard<std::mutex> lock(failureMutex_);
  const std::uint64_t id = nextFailureListener_++;
  failureListeners_.emplace(id, std::move(listener));
  return id;
}

void Engine::removeFailureListener(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(failureMutex_);
  failureListeners_.erase(id);
}

void Engine::deliverFailure(const std::string& address, const std::string& why) {
  std::lock_guard<std::mutex> lock(failureMutex_);
  if (stopping_.load()) return;
  for (auto& entry : failureListeners_) entry.second(address, why);
}

Engine::Stats Engine::stats() {
  Driving driving(workerMutex_, driver_, /*locked=*/false);
  return Stats{activeCount_, inflightRequests_ + transferCount_, endpoints_.size(), purged_};
}

std::size_t Engine::dropUnexpected(std::uint32_t context) {
  std::size_t dropped = 0;
  // The group's messages, and the control notices addressed to it.
  const std::pair<wire::Tag, wire::Tag> kinds[] = {
      {wire::Tag{context} << wire::kContextShift, wire::kContextMask},
      {wire::controlTag(context, 0), wire::kControlMask}};
  // Messages already delivered to this process but not yet matched only show in the queue
  // after a progress call.
  while (worker_.progress() != 0) {
  }
  for (std::size_t kind = 0; kind < 2;) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h message =
        ucp_tag_probe_nb(worker_.get(), kinds[kind].first, kinds[kind].second, /*remove=*/1, &info);
    if (message == nullptr) {
      ++kind;
      continue;
    }
    ++dropped;
    auto sink = std::make_unique<char[]>(std::max<std::size_t>(info.length, 1));
    ucp_request_param_t params{};
    void* request = ucp_tag_msg_recv_nbx(worker_.get(), sink.get(), info.length, message, &params);
    if (!UCS_PTR_IS_PTR(request)) continue;
    // A rendezvous message fetches its data from the sender, which may be gone: bound it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (ucp_request_check_status(request) == UCS_INPROGRESS &&
           std::chrono::steady_clock::now() < deadline) {
      worker_.progress();
    }
    if (ucp_request_check_status(request) == UCS_INPROGRESS) {
      ucp_request_cancel(worker_.get(), request);
      purgeSinks_.push_back(std::move(sink));  // UCX may still write it; freed at teardown
    }
    ucp_request_free(request);
  }
  purged_ += dropped;
  return dropped;
}

void Engine::report(const std::shared_ptr<Op>& op, const std::exception_ptr& error) {
  if (error) {
    op->fail(*this, error);
  } else {
    op->succeed();
  }
}

std::uint64_t Engine::addHandOffHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(hooksMutex_);
  const std::uint64_t id = nextHook_++;
  hooks_.emplace(id, std::move(hook));
  haveHooks_.store(true);
  return id;
}

void Engine::removeHandOffHook(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(hooksMutex_);
  hooks_.erase(id);
  haveHooks_.store(!hooks_.empty());
}

void Engine::runHandOffHooks() {
  if (!haveHooks_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(hooksMutex_);
  for (auto& entry : hooks_) entry.second();
}

ucx::Endpoint::OnError Engine::endpointErrorHandler(const std::string& address) {
  std::lock_guard<std::mutex> lock(remoteMutex_);
  if (remoteWatched_.count(address) == 0) return nullptr;
  return [this, address](ucs_status_t status) {
    watch_.report(address, std::string("UCX reports its connection failed (") +
                               ucs_status_string(status) + ")");
  };
}

void Engine::queueCompletion(Pending* pending, ucs_status_t status, const RecvInfo& info) {
  // The worker's destruction purging what UCX still held: the engine is gone but for this
  // flag; the Pending (and the Op it holds) is left to the process's end.
  if (callbacksClosed_.load(std::memory_order_acquire)) return;
  {
    std::lock_guard<std::mutex> lock(completionMutex_);
    completions_.push_back(Completion{pending, status, info});
    haveCompletions_.store(true, std::memory_order_release);
  }
  // A callback on UCX's own async thread: whoever sleeps on the event fd must look again.
  if (!drivenByThisThread()) port_->signal();
}

bool Engine::drainSubmissions() {
  if (submitted_.load(std::memory_order_relaxed) == 0) return false;
  std::vector<std::function<void(Engine&)>> batch;
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    batch.swap(submissions_);
    submitted_.store(0, std::memory_order_relaxed);
  }
  for (auto& command : batch) command(*this);
  return !batch.empty();
}

bool Engine::drainCompletions() {
  // Handlers may post new requests that complete at once and queue more completions;
  // swap so that this loop and any nested progressOnce() never share a vector.
  // The spare keeps its capacity, so a steady stream of completions allocates nothing (a
  // nested call finds it taken and uses a fresh vector).
  // An idle round (a spinning waiter makes millions) takes no lock: a completion queued
  // while this looks is seen by the next round, which its queueing wakes up if needed.
  if (!haveCompletions_.load(std::memory_order_acquire)) return false;
  std::vector<Completion> batch = std::move(spareCompletions_);
  batch.clear();
  {
    std::lock_guard<std::mutex> lock(completionMutex_);
    haveCompletions_.store(false, std::memory_order_relaxed);
    if (completions_.empty()) {
      spareCompletions_ = std::move(batch);
      return false;
    }
    batch.swap(completions_);
  }
  for (auto& c : batch) {
    std::unique_ptr<Pending> pending(c.pending);
    --inflightRequests_;
    // `pending` holds the op until it is recycled.
    pending->op->handle(*this, *pending, c.status, c.info);
    if (pending->request != nullptr) ucp_request_free(pending->request);
    recycle(std::move(pending));
  }
  batch.clear();
  if (batch.capacity() > spareCompletions_.capacity()) spareCompletions_ = std::move(batch);
  return true;
}

bool Engine::progressRound() {
  bool active = drainSubmissions();
  while (port_->progress() != 0) active = true;
  // A handler may start the next step of a collective whose requests complete at once and
  // queue new completions. Drain until none are left: a waiter that parks on the event fd
  // with completions still queued sleeps until the safety net (this was the ~100 ms
  // stall of 8-rank collectives).
  while (drainCompletions()) {
    active = true;
    while (port_->progress() != 0) {
    }
  }
  releaseQueuedRequests();
  return active;
}

void Engine::progressOnce() { progressRound(); }

bool Engine::parkUntil(const std::atomic<bool>& done,
                       std::chrono::steady_clock::time_point deadline) {
  if (!waker_.tryPark()) return false;  // another waiter is parked, or no event fd
  while (!done.load(std::memory_order_acquire)) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline || stopping_.load()) break;
    bool armed;
    {
      Driving driving(workerMutex_, driver_, /*locked=*/false);
      progressRound();
      if (done.load(std::memory_order_acquire)) break;
      armed = port_->arm();
    }
    if (!armed) continue;
    waker_.waitForEvent(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                        std::chrono::milliseconds(1));
  }
  waker_.unpark();
  return true;
}

void Engine::setDone(DoneFlag& flag) {
  {
    // Under the flag's lock: a waiter on the condition variable either sees it set or is
    // asleep when the notification comes.
    std::lock_guard<std::mutex> lock(flag.mutex_);
    // seq_cst, as the waiter's count of itself: either it sees the flag or this sees it.
    flag.done_.store(true, std::memory_order_seq_cst);
  }
  flag.cv_.notify_all();
  if (flag.parked_.load(std::memory_order_seq_cst) != 0) waker_.wakeParked();
}

std::chrono::microseconds Engine::transferSpin(std::uint64_t bytes) noexcept {
  // 4 GB/s: below what this kind of machine copies between processes, so the spin ends
  // after the data could have arrived. 2 ms: from 16 MiB on, sleeping costs nothing
  // measurable against the transfer itself.
  constexpr std::uint64_t kSpinBytesPerMicro = 4000;
  constexpr std::chrono::microseconds kMaxTransferSpin{2000};
  return std::min(std::chrono::microseconds(bytes / kSpinBytesPerMicro), kMaxTransferSpin);
}

bool Engine::wait(DoneFlag& flag, std::chrono::steady_clock::time_point deadline, Op* assist,
                  std::uint64_t bytes) {
  return waitFor(flag, deadline, assist, bytes, /*spin=*/true);
}

bool Engine::waitStretch(DoneFlag& flag, std::chrono::steady_clock::time_point until, bool first,
                         Op* assist, std::uint64_t bytes) {
  if (waitFor(flag, until, first ? assist : nullptr, first ? bytes : 0, first)) return true;
  if (stopping_.load() && !flag.done()) {
    // The engine stops: nobody parks any more and waitFor returns at once, so sleep on the
    // flag itself until the next look instead of asking in a busy loop.
    std::unique_lock<std::mutex> lock(flag.mutex_);
    return flag.cv_.wait_until(lock, until, [&] { return flag.done(); });
  }
  return false;
}

bool Engine::waitFor(DoneFlag& flag, std::chrono::steady_clock::time_point deadline, Op* assist,
                     std::uint64_t bytes, bool spin) {
  if (flag.done()) return true;
  if (drivenByThisThread()) {
    // Inside a completion callback: this thread holds the worker, so nobody else can
    // finish the operation; progress inline.
    while (!flag.done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      progressOnce();
    }
    return true;
  }
  // An operation this thread can run itself (a shared-memory collective) runs here, saving
  // two thread hand-offs.
  if (assist != nullptr) {
    assist->assist(deadline);
    if (flag.done()) return true;
  }
  const bool drives = policy.neverDrivesDepth == 0;
  if (drives && spin) {
    // Drive the worker for a short while: a reply that arrives within the spin is picked
    // up with no thread hand-off at all. Meanwhile the progress thread rests unarmed.
    {
      const Waker::Driver driving(waker_);
      const auto spinEnd = std::min(
          std::chrono::steady_clock::now() + settings_.waitSpin + transferSpin(bytes), deadline);
      // Yield the core every few passes: when the peer rank (or this rank's other threads)
      // shares the core, a spin that never yields makes it wait out the whole spin before
      // it can send the reply, a stable ~100 us per message. With the core to itself,
      // sched_yield returns at once. The clock is read every 8 passes: read on every pass
      // it was a twentieth of a small send's time.
      for (unsigned pass = 1; !flag.done(); ++pass) {
        if ((pass & 7u) == 0 && std::chrono::steady_clock::now() >= spinEnd) break;
        if (!tryProgress() || (pass & 15u) == 0) std::this_thread::yield();
      }
    }
    if (flag.done()) {
      // The progress thread looks again soon, unless the caller comes straight back with
      // its next operation.
      waker_.driverLeft();
      return true;
    }
  }
  // About to block: operations this thread queued but did not run (shared-memory ones
  // behind a UCX wait) must not wait for a hand-off while it sleeps.
  runHandOffHooks();
  bool parked = false;
  if (drives) {
    // Sleep on the worker's event fd, still driving it, so the completion wakes this thread
    // directly. If another waiter is parked already, sleep on the flag; the parked waiter
    // or the progress thread completes it.
    flag.parked_.fetch_add(1, std::memory_order_seq_cst);
    // Pairs with setDone's store and load: either it sees this waiter, or this sees the flag.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    parked = parkUntil(flag.done_, deadline);
    flag.parked_.fetch_sub(1, std::memory_order_seq_cst);
    // Either way this thread stops driving: let the progress thread look again.
    waker_.handOff();
  }
  if (parked) return flag.done();
  std::unique_lock<std::mutex> lock(flag.mutex_);
  return flag.cv_.wait_until(lock, deadline, [&] { return flag.done(); });
}

void Engine::run() {
  pthread_setname_np(pthread_self(), "commux-progress");
  const std::function<bool()> arm = [this] {
    Driving driving(workerMutex_, driver_, /*locked=*/false);
    return port_->arm();
  };
  const std::function<bool()> hasWork = [this] {
    return submitted_.load(std::memory_order_seq_cst) != 0 || stopping_.load();
  };
  // Standing by must not stop hand-offs of work that is not UCX's (a shared-memory lane):
  // the parked waiter may be waiting for a peer that waits for that work.
  const std::function<void()> duty = [this] { runHandOffHooks(); };
  auto lastActive = std::chrono::steady_clock::now();
  auto lastHooks = lastActive;
  while (!stopping_.load(std::memory_order_relaxed)) {
    bool active;
    {
      Driving driving(workerMutex_, driver_, /*locked=*/false);
      active = progressRound();
    }
    if (active) {
      lastActive = std::chrono::steady_clock::now();
      if (lastActive - lastHooks > std::chrono::milliseconds(2)) {
        runHandOffHooks();
        lastHooks = lastActive;
      }
      continue;
    }
    if (std::chrono::steady_clock::now() - lastActive < settings_.progressSpin) {
      cpuRelax();
      continue;
    }
    // Always with the duty (it checks for hooks itself): a channel made while this thread
    // stands by must still get its hand-offs.
    waker_.sleep(arm, hasWork, duty);
    runHandOffHooks();
    lastActive = lastHooks = std::chrono::steady_clock::now();
  }
  teardown();
}

void Engine::teardown() {
  Driving driving(workerMutex_, driver_, /*locked=*/false);
  // Fail whatever is still in flight, give UCX a moment to return cancelled requests, then
  // release endpoints while the worker still exists.
  auto error = commError("commux: the process group was shut down with this operation in flight");
  // Held while failing: failing a part of an operation made of parts (HierarchicalOp) can
  // release the whole, and the whole its other parts.
  std::vector<std::shared_ptr<Op>> live;
  for (Op* op = activeHead_; op != nullptr; op = op->nextActive_) {
    if (auto held = op->weak_from_this().lock()) live.push_back(std::move(held));
  }
  for (const auto& op : live) op->fail(*this, error);
  runQueuedWhileStopping();
  // The blocking path's requests: cancelled, their callers' waits end (with
  // UCS_ERR_CANCELED) instead of running into a worker that is gone.
  // A cancel may end its transfer at once, and its owner may then free it: read the next
  // one first.
  for (BlockingTransfer *t = transfersHead_, *next = nullptr; t != nullptr; t = next) {
    next = t->nextPosted_;
    if (t->request_ != nullptr) ucp_request_cancel(worker_.get(), t->request_);
  }
  const auto transfersOwed = [this] {
    for (BlockingTransfer* t = transfersHead_; t != nullptr; t = t->nextPosted_) {
      if (!t->ended()) return true;
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while ((inflightRequests_ != 0 || transfersOwed()) &&
         std::chrono::steady_clock::now() < deadline) {
    while (port_->progress() != 0) {
    }
    drainCompletions();
  }
  releaseQueuedRequests();
  flushEndpoints(std::chrono::milliseconds(500));
  releaseQueuedRequests();
  endpoints_.clear();
  purgeSinks_.clear();
}

void Engine::flushEndpoints(std::chrono::milliseconds limit) {
  // A send that completed here may still sit in UCX's or the kernel's queues (TCP): closing
  // the endpoints by force at once can drop it, and the peer, still waiting for it (the
  // last message of a collective, a window's close), sees this rank die instead. A flush
  // returns once every operation reached the peer; a dead peer only costs `limit`.
  ucp_request_param_t params{};
  void* request = ucp_worker_flush_nbx(worker_.get(), &params);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (ucp_request_check_status(request) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < deadline) {
    worker_.progress();
  }
  if (ucp_request_check_status(request) == UCS_INPROGRESS)
    ucp_request_cancel(worker_.get(), request);
  ucp_request_free(request);
}

}  // namespace commux::engine
