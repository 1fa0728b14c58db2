#include "engine/engine.hpp"

#include <pthread.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "engine/errors.hpp"

#include <chrono>
#include <optional>
#include <stdexcept>

#include "commux/options.hpp"
#include "ucx/status.hpp"

namespace commux::engine {
namespace {

std::mutex instanceMutex;
std::weak_ptr<Engine> instanceRef;
std::atomic<Engine::BlockingWrapper> blockingWrapper{nullptr};

constexpr int kSleepSafetyNetMs = 100;
constexpr std::uint32_t kWorkerEvent = 0;
constexpr std::uint32_t kTimerEvent = 1;

std::int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Engines whose last reference went on a thread that may not join the progress thread are
// deleted on a helper thread. Process exit joins the helpers (Engine::shutdownInstance):
// a detached one could still be deleting the engine while the UCX libraries unload.
struct Reaper {
  std::thread thread;
  std::shared_ptr<std::atomic<bool>> done;
};
std::mutex reapersMutex;
std::vector<Reaper> reapers;

void deleteOnHelperThread(Engine* engine) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard<std::mutex> lock(reapersMutex);
  // Helpers that finished are joined here, so a process that rebuilds groups for weeks
  // keeps no more than the few in progress.
  for (auto it = reapers.begin(); it != reapers.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = reapers.erase(it);
    } else {
      ++it;
    }
  }
  reapers.push_back(Reaper{std::thread([engine, done] {
                             delete engine;
                             done->store(true);
                           }),
                           done});
}

void joinReapers() {
  std::vector<Reaper> all;
  {
    std::lock_guard<std::mutex> lock(reapersMutex);
    all.swap(reapers);
  }
  for (auto& reaper : all) {
    if (reaper.thread.get_id() == std::this_thread::get_id()) {
      reaper.thread.detach();  // an engine's teardown ran exit code on its own helper
    } else {
      Engine::runBlocking([](void* t) { static_cast<std::thread*>(t)->join(); }, &reaper.thread);
    }
  }
}

// Stops the progress thread before the UCX libraries unload, for processes that exit with
// process groups still alive. Declared after the reapers: it runs before they are destroyed.
struct ExitGuard {
  ~ExitGuard() { Engine::shutdownInstance(); }
} exitGuard;

}  // namespace

std::shared_ptr<Engine> Engine::instance() {
  std::lock_guard<std::mutex> lock(instanceMutex);
  auto engine = instanceRef.lock();
  if (!engine) {
    // The last reference can drop inside a completion callback (a Work released there),
    // on the progress thread or on a thread that holds the worker lock. Neither may join
    // the progress thread (it cannot join itself; the other would wait for the lock it
    // holds), so delete from a helper thread.
    engine = std::shared_ptr<Engine>(new Engine(Config::get().progressSpin, Config::get().handOffDelay), [](Engine* e) {
      if (e->onProgressThread() || e->drivenByThisThread()) {
        deleteOnHelperThread(e);
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
  if (engine) engine->stop();
  joinReapers();
}

Engine::Engine(std::chrono::microseconds progressSpin, std::chrono::microseconds handOffDelay)
    : context_(Config::get().loopbackOnly),
      worker_(context_),
      progressSpin_(progressSpin),
      handOffDelayNs_(std::chrono::duration_cast<std::chrono::nanoseconds>(handOffDelay).count()),
      contextsInUse_(wire::kMaxContexts, false),
      // Never refused: commands pushed while the engine stops are run by failStranded().
      streamWaits_([this](StreamWaits::Command command) {
        append(std::move(command));
        handOff();
      }),
      watch_([this](const std::string& address, const std::string& why) {
        deliverFailure(address, why);
      }) {
  if (worker_.eventFd() >= 0) {
    epollFd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epollFd_ < 0) throw std::runtime_error("commux: epoll_create1 failed");
    timerFd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = kWorkerEvent;
    epoll_event timerEv{};
    timerEv.events = EPOLLIN;
    timerEv.data.u32 = kTimerEvent;
    if (timerFd_ < 0 || epoll_ctl(epollFd_, EPOLL_CTL_ADD, worker_.eventFd(), &ev) != 0 ||
        epoll_ctl(epollFd_, EPOLL_CTL_ADD, timerFd_, &timerEv) != 0) {
      if (timerFd_ >= 0) ::close(timerFd_);
      ::close(epollFd_);
      throw std::runtime_error("commux: cannot watch the UCX worker's event fd");
    }
  }
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  stop();
  if (timerFd_ >= 0) ::close(timerFd_);
  if (epollFd_ >= 0) ::close(epollFd_);
}

void Engine::stop() {
  // Process exit (ExitGuard, atexit) and the last reference may race to stop.
  std::lock_guard<std::mutex> once(stopMutex_);
  if (!thread_.joinable()) return;
  stopping_.store(true);
  worker_.signal();
  fireTimer();
  {
    std::lock_guard<std::mutex> lock(parkMutex_);
  }
  parkCv_.notify_all();
  runBlocking([](void* thread) { static_cast<std::thread*>(thread)->join(); }, &thread_);
  failStranded();
}

std::uint32_t Engine::acquireContext() {
  // Round robin, so an id comes back only after all others were used: messages still in
  // flight for a destroyed group can then never match the group that reuses its id.
  std::lock_guard<std::mutex> lock(contextMutex_);
  const auto n = static_cast<std::uint32_t>(contextsInUse_.size());
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t id = (nextContext_ + i) % n;
    if (!contextsInUse_[id]) {
      contextsInUse_[id] = true;
      nextContext_ = (id + 1) % n;
      return id;
    }
  }
  throw std::runtime_error("commux: more than " + std::to_string(wire::kMaxContexts) +
                           " live process groups in one process");
}

void Engine::releaseContext(std::uint32_t id) {
  std::lock_guard<std::mutex> lock(contextMutex_);
  if (id < contextsInUse_.size()) contextsInUse_[id] = false;
}

bool Engine::drivenByThisThread() const noexcept {
  return driver_.load(std::memory_order_relaxed) == std::this_thread::get_id();
}

namespace {

// What this thread runs once it lets go of the worker (Engine::afterRelease), and how
// deeply it holds it.
thread_local std::vector<std::function<void()>> afterReleaseQueue;
thread_local int drivingDepth = 0;

void runAfterRelease() {
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
    if (!locked) mutex_.lock();
    // Read only under the lock: the previous driver is this thread (nested) or nobody.
    previous_ = driver_.load(std::memory_order_relaxed);
    driver_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    ++drivingDepth;
  }
  ~Driving() {
    driver_.store(previous_, std::memory_order_relaxed);
    mutex_.unlock();
    if (--drivingDepth == 0 && !afterReleaseQueue.empty()) runAfterRelease();
  }

 private:
  std::recursive_mutex& mutex_;
  std::atomic<std::thread::id>& driver_;
  std::thread::id previous_;
};

}  // namespace

void Engine::afterRelease(std::function<void()> fn) {
  if (drivingDepth > 0) {
    afterReleaseQueue.push_back(std::move(fn));
  } else {
    fn();
  }
}

bool Engine::tryProgress() {
  if (!workerMutex_.try_lock()) return false;
  Driving driving(workerMutex_, driver_, /*locked=*/true);
  progressOnce();
  return true;
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

void Engine::submitAfter(const c10::Stream& stream, std::shared_ptr<Op> op) {
  auto command = [op](Engine& engine) { engine.startOp(op); };
  continueAfter(stream, std::move(op), std::move(command));
}

void Engine::continueAfter(const c10::Stream& stream, std::shared_ptr<Op> op,
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

void Engine::post(std::function<void(Engine&)> command) {
  enqueue(std::move(command));
  if (tryProgress()) return;
  // Someone else drives the worker. Pairs with the store to sleeping_ in sleep(): either
  // the progress thread sees our submission before it sleeps, or we see it asleep and
  // wake it. A parked waiter (whose round may have drained the queue just before ours
  // arrived) is woken too, or the command would wait for the 100 ms safety net.
  handOff();
}

void Engine::handOff() {
  if (sleeping_.load(std::memory_order_seq_cst) || parked_.load(std::memory_order_seq_cst)) {
    worker_.signal();
  }
  if (resting_.load(std::memory_order_seq_cst)) fireTimer();
}

void Engine::fireTimer() {
  if (timerFd_ < 0) return;
  itimerspec spec{};
  spec.it_value.tv_nsec = 1;
  handOffDue_.store(nowNs(), std::memory_order_relaxed);
  timerfd_settime(timerFd_, 0, &spec, nullptr);
}

void Engine::deferHandOff() {
  if (timerFd_ < 0) return;  // no event fd: the progress thread polls on its own
  const std::int64_t now = nowNs();
  const std::int64_t due = handOffDue_.load(std::memory_order_relaxed);
  // Pushing the timer back costs a system call; a loop of short operations does it about
  // twice per delay, not once per operation. A timer that is due already (fired, or fired
  // at once by handOff) has a wake-up on its way: re-arming it would cancel that.
  if (due != 0 && (due <= now || due - now > handOffDelayNs_ / 2)) return;
  if (handOffDelayNs_ <= 0) {
    handOff();
    return;
  }
  itimerspec spec{};
  spec.it_value.tv_sec = handOffDelayNs_ / 1000000000;
  spec.it_value.tv_nsec = handOffDelayNs_ % 1000000000;
  handOffDue_.store(now + handOffDelayNs_, std::memory_order_relaxed);
  timerfd_settime(timerFd_, 0, &spec, nullptr);
}

void Engine::consumeWake(const epoll_event& event, int ready) {
  if (ready <= 0 || event.data.u32 != kTimerEvent) return;
  std::uint64_t expirations = 0;
  if (::read(timerFd_, &expirations, sizeof(expirations)) > 0) {
    handOffDue_.store(0, std::memory_order_relaxed);
  }
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
    std::optional<c10::DeviceGuard> onDevice;
    if (const auto& device = op->cudaDevice()) {
      if (onProgressThread()) {
        c10::impl::getDeviceGuardImpl(device->type())->setDevice(*device);
      } else {
        onDevice.emplace(*device);
      }
    }
    op->start(*this);
  } catch (...) {
    op->fail(*this, std::current_exception());
  }
}

void Engine::submit(std::shared_ptr<Op> op) {
  // A reference of our own: an operation that completes inside post() may be released by
  // its Work right there (AddressSanitizer caught the read of a freed Op here).
  std::shared_ptr<Op> mine = op;
  post([op = std::move(op)](Engine& engine) { engine.startOp(op); });
  // Posted inline but still in flight: the progress thread must carry it on, unless the
  // caller waits for it right away (then the caller drives it).
  if (!mine->finished()) deferHandOff();
}

void Engine::submit(std::vector<std::shared_ptr<Op>> ops) {
  auto shared = std::make_shared<std::vector<std::shared_ptr<Op>>>(std::move(ops));
  post([shared](Engine& engine) {
    for (const auto& op : *shared) engine.startOp(op);
  });
  for (const auto& op : *shared) {
    if (!op->finished()) {
      deferHandOff();
      break;
    }
  }
}

void Engine::cancel(std::shared_ptr<Op> op, std::exception_ptr error) {
  post([op = std::move(op), error](Engine& engine) { op->fail(engine, error); });
}

void Engine::cancelQuietly(std::shared_ptr<Op> op, std::exception_ptr error) {
  postQuietly([op = std::move(op), error](Engine& engine) { op->fail(engine, error); });
}

void Engine::failAfterDraining(std::shared_ptr<Op> op, std::exception_ptr error) {
  postQuietly([op = std::move(op), error](Engine& engine) {
    // A collective may need a few rounds: each step's receives match messages already here.
    for (int round = 0; round < 64 && !op->finished(); ++round) {
      if (!engine.progressRound()) break;
    }
    if (!op->finished()) op->fail(engine, error);
  });
}

void Engine::watchPeer(const std::string& address, const ProcessId& id) {
  const auto mode = Config::get().failureDetection;
  if (mode == FailureDetection::Off || address == worker_.address()) return;
  if (mode == FailureDetection::Auto && watch_.watch(address, id)) return;
  {
    std::lock_guard<std::mutex> lock(remoteMutex_);
    if (!remoteWatched_.insert(address).second) return;
  }
  // UCX notices a failure only on an endpoint, so make one now, also for a peer this
  // process only ever receives from.
  postQuietly([address](Engine& engine) {
    try {
      engine.endpoint(address);
    } catch (const std::exception& e) {
      engine.watch_.report(address, std::string("cannot connect to it: ") + e.what());
    }
  });
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
  for (auto& entry : failureListeners_) entry.second(address, why);
}

Engine::Stats Engine::stats() {
  Driving driving(workerMutex_, driver_, /*locked=*/false);
  return Stats{active_.size(), inflightRequests_, endpoints_.size(), purged_};
}

void Engine::purgeContext(std::uint32_t context) {
  // Queued for the driver, never done here: the caller may hold the GIL (a group destroyed
  // from Python), and the thread that holds the worker lock may be waiting for it.
  try {
    postQuietly([context](Engine& engine) { engine.dropUnexpected(context); });
  } catch (const std::exception&) {
    // The engine is shutting down: its worker and every queued message go with it.
  }
}

std::size_t Engine::dropUnexpected(std::uint32_t context) {
  std::size_t dropped = 0;
  const wire::Tag tag = wire::Tag{context} << wire::kContextShift;
  // Messages already delivered to this process but not yet matched only show in the queue
  // after a progress call.
  while (worker_.progress() != 0) {
  }
  for (;;) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h message =
        ucp_tag_probe_nb(worker_.get(), tag, wire::kContextMask, /*remove=*/1, &info);
    if (message == nullptr) break;
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

void Engine::finish(std::shared_ptr<Op> op, std::exception_ptr error, bool drive) {
  auto report = [op = std::move(op), error](Engine& engine) {
    if (error) {
      op->fail(engine, error);
    } else {
      op->succeed();
    }
  };
  if (drive) {
    post(std::move(report));
  } else {
    postQuietly(std::move(report));
  }
}

void Engine::postQuietly(std::function<void(Engine&)> command) {
  enqueue(std::move(command));
  // Whoever drives the worker drains submissions each round; only a sleeper needs waking,
  // which is what a hand-off does (the pairing with sleep() is as in post()).
  handOff();
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

ucp_ep_h Engine::endpoint(const std::string& peerAddress) {
  auto it = endpoints_.find(peerAddress);
  if (it == endpoints_.end()) {
    ucx::Endpoint::OnError onError;
    {
      std::lock_guard<std::mutex> lock(remoteMutex_);
      if (remoteWatched_.count(peerAddress) != 0) {
        onError = [this, peerAddress](ucs_status_t status) {
          watch_.report(peerAddress, std::string("UCX reports its connection failed (") +
                                         ucs_status_string(status) + ")");
        };
      }
    }
    it = endpoints_
             .emplace(peerAddress,
                      std::make_unique<ucx::Endpoint>(worker_, peerAddress, std::move(onError)))
             .first;
  }
  return it->second->get();
}

void Engine::queueCompletion(Pending* pending, ucs_status_t status, const RecvInfo& info) {
  {
    std::lock_guard<std::mutex> lock(completionMutex_);
    completions_.push_back(Completion{pending, status, info});
  }
  // A callback on UCX's own async thread: whoever sleeps on the event fd must look again.
  if (!drivenByThisThread()) worker_.signal();
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
  std::vector<Completion> batch;
  {
    std::lock_guard<std::mutex> lock(completionMutex_);
    if (completions_.empty()) return false;
    batch.swap(completions_);
  }
  for (auto& c : batch) {
    std::unique_ptr<Pending> pending(c.pending);
    --inflightRequests_;
    auto op = pending->op;
    op->handle(*this, *pending, c.status, c.info);
    if (pending->request != nullptr) ucp_request_free(pending->request);
  }
  return true;
}

bool Engine::progressRound() {
  bool active = drainSubmissions();
  while (worker_.progress() != 0) active = true;
  // A handler may start the next step of a collective whose requests complete at once and
  // queue new completions. Drain until none are left: a waiter that parks on the event fd
  // with completions still queued sleeps until the safety net (this was the ~100 ms
  // stall of 8-rank collectives).
  while (drainCompletions()) {
    active = true;
    while (worker_.progress() != 0) {
    }
  }
  return active;
}

void Engine::progressOnce() { progressRound(); }

void Engine::sleep() {
  if (parked_.load(std::memory_order_seq_cst)) {
    // A waiter sleeps on the event fd and drives the worker; stand by until it leaves, so
    // events wake one thread instead of two. This thread may have taken the event the
    // waiter armed for (epoll wakes one sleeper) and driven the worker since: UCX's arming
    // is one-shot, so wake the waiter to re-arm, or it sleeps through its completion until
    // the safety net (~100 ms stalls at 8 ranks on 2 cores).
    worker_.signal();
    std::unique_lock<std::mutex> lock(parkMutex_);
    const auto leftPark = [this] { return !parked_.load() || stopping_.load(); };
    if (!haveHooks_.load()) {
      parkCv_.wait(lock, leftPark);
      return;
    }
    // Standing by must not stop hand-offs of work that is not UCX's (a shared-memory
    // lane): the parked waiter may be waiting for a peer that waits for that work.
    while (!parkCv_.wait_for(lock, std::chrono::milliseconds(5), leftPark)) {
      lock.unlock();
      runHandOffHooks();
      lock.lock();
    }
    return;
  }
  sleeping_.store(true, std::memory_order_seq_cst);
  if (submitted_.load(std::memory_order_seq_cst) != 0 || stopping_.load()) {
    sleeping_.store(false);
    return;
  }
  if (epollFd_ < 0) {
    // Transports without wakeup support: poll gently.
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  } else if (drivers_.load(std::memory_order_seq_cst) > 0) {
    // A waiter drives the worker right now. An armed worker would make every message from
    // a peer signal this thread (a system call on the sender, a wake-up here, a fight for
    // the worker lock), all for nothing: rest on the hand-off timer alone, which a leaving
    // waiter sets (deferHandOff) and handOff() fires.
    resting_.store(true, std::memory_order_seq_cst);
    if (drivers_.load(std::memory_order_seq_cst) > 0 && submitted_.load() == 0 && !stopping_.load()) {
      pollfd timer{timerFd_, POLLIN, 0};
      if (::poll(&timer, 1, kSleepSafetyNetMs) > 0) {
        epoll_event ev{};
        ev.data.u32 = kTimerEvent;
        consumeWake(ev, 1);
      }
    }
    resting_.store(false, std::memory_order_relaxed);
  } else {
    bool armed;
    {
      Driving driving(workerMutex_, driver_, /*locked=*/false);
      armed = worker_.arm();
    }
    if (armed) {
      // Without the lock: others may drive the worker meanwhile; they hand off (signal)
      // when they stop. The timeout is a safety net only.
      epoll_event ev{};
      consumeWake(ev, epoll_wait(epollFd_, &ev, 1, kSleepSafetyNetMs));
    }
  }
  sleeping_.store(false, std::memory_order_relaxed);
}

bool Engine::parkUntil(const std::atomic<bool>& done,
                       std::chrono::steady_clock::time_point deadline) {
  if (epollFd_ < 0) return false;
  bool expected = false;
  if (!parked_.compare_exchange_strong(expected, true)) return false;  // another waiter is
  while (!done.load(std::memory_order_acquire)) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline || stopping_.load()) break;
    bool armed;
    {
      Driving driving(workerMutex_, driver_, /*locked=*/false);
      progressRound();
      if (done.load(std::memory_order_acquire)) break;
      armed = worker_.arm();
    }
    if (!armed) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    epoll_event ev{};
    consumeWake(ev, epoll_wait(epollFd_, &ev, 1,
                               static_cast<int>(std::min<long long>(left, kSleepSafetyNetMs))));
  }
  {
    std::lock_guard<std::mutex> lock(parkMutex_);
    parked_.store(false, std::memory_order_seq_cst);
  }
  parkCv_.notify_all();
  return true;
}

void Engine::wakeParked() {
  if (parked_.load(std::memory_order_seq_cst)) worker_.signal();
}

void Engine::run() {
  pthread_setname_np(pthread_self(), "commux-progress");
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
    if (std::chrono::steady_clock::now() - lastActive < progressSpin_) {
      cpuRelax();
      continue;
    }
    sleep();
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
  std::vector<Op*> live(active_.begin(), active_.end());
  for (Op* op : live) op->fail(*this, error);
  runQueuedWhileStopping();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (inflightRequests_ != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    while (worker_.progress() != 0) {
    }
    drainCompletions();
  }
  endpoints_.clear();
  purgeSinks_.clear();
}

}  // namespace commux::engine
