#pragma once
// The progress engine: one per process, shared by every process group in it. It owns the
// UCP context and one single-threaded worker. Whoever holds the worker lock drives it:
//  - a caller submitting an Op starts it itself when the lock is free, so a send leaves
//    without waking another thread;
//  - a waiter polls the worker itself for a short while (COMMUX_WAIT_SPIN_US), so a reply
//    is picked up without a thread hand-off, then sleeps on the worker's event fd itself
//    ("parks"), so the completion wakes it directly;
//  - the progress thread moves everything else (operations nobody waits on, connection
//    set-up, rendezvous hand-shakes) and, when idle, sleeps.
// Who sleeps where, and who wakes whom, is the Waker's state machine (waker.hpp).
// A thread hand-off costs ~7.5 us on a 2-vCPU VM, against ~0.5 us for a UCX message, which is
// why the hand-offs are off the common paths. Nobody spins without a bound, so a blocked
// or idle rank burns no CPU.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "engine/context_ids.hpp"
#include "engine/done_flag.hpp"
#include "engine/endpoint_cache.hpp"
#include "engine/fork_guard.hpp"
#include "engine/op.hpp"
#include "engine/peer_watch.hpp"
#include "engine/settings.hpp"
#include "engine/stream_waits.hpp"
#include "engine/submission.hpp"
#include "engine/waker.hpp"
#include "engine/worker_port.hpp"
#include "ucx/context.hpp"
#include "ucx/worker.hpp"

namespace commux::engine {

class BlockingTransfer;

class Engine {
 public:
  /// The process-wide engine, created on first use (with `settings`) and destroyed when
  /// the last holder (a process group) lets go. `groupSize`: the size of the group that
  /// asks, UCX's endpoint estimate when the launcher's WORLD_SIZE is not there.
  static std::shared_ptr<Engine> instance(std::size_t groupSize, const Settings& settings);
  /// Stops the live engine's progress thread, if any, and waits for what
  /// destroyOnHelperThread still destroys (at interpreter or process exit).
  static void shutdownInstance();
  /// Runs `destroy` on a helper thread: for an object whose last reference went on a
  /// thread that its destructor joins.
  static void destroyOnHelperThread(std::function<void()> destroy);
  /// True in a child forked after this engine was made: its threads are the parent's, and
  /// its UCX worker and sockets are shared with it, so the child must not use, stop or
  /// free it (fork_guard.hpp).
  bool inherited() const noexcept { return generation_ != forkGeneration(); }
  /// Runs calls that block on the progress thread (joining it). The Python binding installs
  /// one that releases the GIL first: the progress thread may need the GIL (freeing a tensor
  /// that owns its Python object, running a future callback), and a process group is often
  /// destroyed from Python with the GIL held.
  using BlockingWrapper = void (*)(void (*call)(void*), void* arg);
  static void setBlockingWrapper(BlockingWrapper wrapper);
  /// Runs `call(arg)` through the blocking wrapper (GIL released when Python installed one).
  static void runBlocking(void (*call)(void*), void* arg);

  /// `port`: what drives the worker's progress and sleep (UCX's worker when null; a test's
  /// fake, to run the drive and wake protocol without UCX traffic).
  explicit Engine(const Settings& settings, ucx::JobHints hints = {},
                  std::unique_ptr<WorkerPort> port = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// This worker's address, published to peers through the store.
  const std::string& address() const noexcept { return worker_.address(); }
  std::vector<std::string> transports() const { return context_.transports(); }
  /// The UCP context, for registering memory with it (the C API's commuxCommRegister).
  ucp_context_h ucpContext() const noexcept { return context_.get(); }
  /// What UCX was told about the job when the context was made.
  const ucx::JobHints& jobHints() const noexcept { return context_.hints(); }

  /// Communicator ids are local to this process (see wire/tag.hpp).
  ContextIds& contexts() noexcept { return contexts_; }

  /// Whether a thread that queues a command may run it (and drive the worker) itself.
  using Drive = engine::Drive;
  /// Held by a thread that must never drive the worker, and so never run user callbacks
  /// or futures (the shared-memory lane's thread, the peer watch): every Drive::IfFree
  /// becomes Drive::Never there, waits sleep without driving, and anything that would
  /// take the worker lock anyway fails an internal assertion.
  class NeverDrives {
   public:
    NeverDrives();
    ~NeverDrives();
    NeverDrives(const NeverDrives&) = delete;
    NeverDrives& operator=(const NeverDrives&) = delete;
  };
  /// Held by a waiter while it runs a shared-memory lane: what would run once it lets go of
  /// the worker (a future's callbacks, afterRelease) waits until it lets go of the lane
  /// too, so a callback that waits for a later collective of that lane can still run it.
  class HoldsLane {
   public:
    HoldsLane();
    ~HoldsLane();
    HoldsLane(const HoldsLane&) = delete;
    HoldsLane& operator=(const HoldsLane&) = delete;
  };
  /// True inside an Op's start() when submit() starts it on the thread of the caller that
  /// submitted it (who may wait for it next); false when the progress thread, a parked
  /// waiter or a queued command starts it.
  static bool startingForCaller() noexcept;

  /// The one way into the engine, from any thread: start an operation (or several, or one
  /// after a CUDA stream), cancel one, fail one after draining, report one finished, purge
  /// a communicator, or run a blocking transfer's call (submission.hpp says what each
  /// does and how every one runs). Raises once the engine has stopped (a finish and a
  /// waited-for call only when they must be queued; a purge never). False only for a
  /// refused call.
  bool submit(Submission submission);
  /// Worker-lock holders (an operation made of parts, in its start() or a part's
  /// completion): start `part` now, on this thread.
  void startPart(const std::shared_ptr<Op>& part);
  /// Worker-lock holders (ops): run `command` on the driver once `stream` has run what is
  /// queued on it now, without holding the worker while the GPU works. `command` must hold
  /// a reference to `op`; `op` fails if the engine stops first.
  void continueAfter(const core::Stream& stream, std::shared_ptr<Op> op,
                     std::function<void(Engine&)> command);

  /// The one way to wait, for every waiter: until `flag` is set or `deadline`. It lets
  /// `assist` (the operation waited for, if it has work a waiter can do: a shared-memory
  /// collective) run here first, then drives the worker itself for a short spin, then
  /// sleeps: parked on the worker's event fd (still driving it, so a completion wakes it
  /// directly), or on the flag's condition variable when another waiter is parked or this
  /// thread never drives. False at the deadline. docs/design.md, "Progress: who drives
  /// the worker", has the whole protocol. `bytes`, what the operation moves, lengthens
  /// the spin by the time those bytes take to copy (transferSpin). It may also return false
  /// early when the engine stops.
  bool wait(DoneFlag& flag, std::chrono::steady_clock::time_point deadline, Op* assist = nullptr,
            std::uint64_t bytes = 0);
  enum class WaitEnd { Done, Deadline, Interrupted };
  /// As wait(), and also ends when `interrupted()` says so: asked before the wait sleeps and
  /// again every `every` while it sleeps (only the first stretch spins). For what nothing
  /// here is woken by: another process leaving a shared-memory channel, a group aborted or
  /// a peer found dead while a caller blocks in the blocking path. Callers wait once, not
  /// in slices of their own.
  /// `interrupted` is any callable returning bool (a template: no std::function to allocate
  /// on the blocking path).
  template <typename Interrupted>
  WaitEnd waitUnless(DoneFlag& flag, std::chrono::steady_clock::time_point deadline,
                     Interrupted&& interrupted, std::chrono::milliseconds every,
                     Op* assist = nullptr, std::uint64_t bytes = 0) {
    for (bool first = true;; first = false) {
      if (flag.done()) return WaitEnd::Done;
      if (interrupted()) return WaitEnd::Interrupted;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return WaitEnd::Deadline;
      const auto until = deadline - now > every ? now + every : deadline;
      if (waitStretch(flag, until, first, assist, bytes)) return WaitEnd::Done;
    }
  }
  /// How much longer than COMMUX_WAIT_SPIN_US a wait for an operation moving `bytes`
  /// spins: their copy time at kSpinBytesPerMicro, at most kMaxTransferSpin. Such a wait
  /// cannot end sooner, and one that parks just before its end pays a wake-up through
  /// UCX's event fd on top (1 MiB p2p one way: 180 us parked, 146 us spinning).
  static std::chrono::microseconds transferSpin(std::uint64_t bytes) noexcept;
  /// Sets `flag` and wakes whoever waits on it.
  void setDone(DoneFlag& flag);
  /// Someone may now wait without driving (a caller holding a future): the progress
  /// thread looks at the worker now instead of after the hand-off delay.
  void handOff() { waker_.handOff(); }

  // Peer failures (see peer_watch.hpp and docs/design.md, "When a peer dies").
  /// Caller threads: start watching the peer at `address` (its process `id`) for death, by
  /// pidfd on this host and through UCX's peer error handling elsewhere
  /// (COMMUX_FAILURE_DETECTION). Cheap when already watched.
  void watchPeer(const std::string& address, const ProcessId& id);
  /// True once the peer at `address` was found dead.
  bool peerFailed(const std::string& address) const { return watch_.failed(address); }
  /// `listener(address, why)` runs on the watch thread when a peer dies. It must be quick
  /// and must not add or remove listeners; it may cancel operations (the thread never
  /// drives: Engine::NeverDrives). No
  /// listener runs once stop() has begun (process exit), and stop() waits for a running one.
  using FailureListener = std::function<void(const std::string& address, const std::string& why)>;
  std::uint64_t addFailureListener(FailureListener listener);
  /// After this returns, the listener is not running and will not run again.
  void removeFailureListener(std::uint64_t id);
  /// Operations and UCX requests in flight (for leak checks in soaks and tests).
  struct Stats {
    std::size_t activeOps = 0;
    std::size_t inflightRequests = 0;  // an Op's, and the blocking path's (BlockingTransfer)
    std::size_t endpoints = 0;
    std::size_t purgedMessages = 0;  // dropped by purge submissions so far
  };
  Stats stats();
  /// Work that is not UCX's (a shared-memory lane) waits to be handed off like UCX
  /// operations: the progress thread calls every hook each time it takes over (after a
  /// hand-off, and every few ms while busy). A hook must be quick and must not block.
  std::uint64_t addHandOffHook(std::function<void()> hook);
  /// After this returns, the hook is not running and will not run again.
  void removeHandOffHook(std::uint64_t id);
  bool onProgressThread() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }
  bool onWatchThread() const noexcept { return watch_.onThread(); }
  /// Drives the worker once if its lock is free; false if another thread holds it.
  bool tryProgress();
  /// True inside a completion callback (this thread drives the worker): a wait() there must
  /// progress inline, since nobody else can.
  bool drivenByThisThread() const noexcept;
  /// Runs `fn` once this thread lets go of the worker (at once if it does not hold it).
  /// A Work's future runs user callbacks: under the worker they would stall every
  /// operation of the process while they run, and deadlock if they wait for another
  /// thread that needs the worker.
  static void afterRelease(std::function<void()> fn);
  /// True while this thread runs what afterRelease queued (a future's callbacks).
  static bool inAfterRelease() noexcept;
  /// Worker-lock holders only: one round of progress without sleeping.
  void progressOnce();

  // Services for Ops, called with the worker lock held.
  ucp_worker_h worker() noexcept { return worker_.get(); }
  ucp_ep_h endpoint(const Route& route) { return endpoints_.get(route); }
  /// Any thread: whether this process has an endpoint to `address` (EndpointCache).
  bool connected(const std::string& address) const { return endpoints_.connected(address); }
  void queueCompletion(Pending* pending, ucs_status_t status, const RecvInfo& info);
  /// Inside a UCX callback on the driving thread: gives `request` back to UCX once the
  /// progress call that runs the callback has returned (freed inside its own callback, a
  /// request can go back to UCX's pool twice).
  void releaseAfterProgress(void* request) { releaseLater_.push_back(request); }
  // The started, unfinished operations: an intrusive list (no allocation per operation),
  // failed at teardown and counted in stats().
  void opStarted(Op* op);
  void opFinished(Op* op);
  /// Worker-lock holders: an unused Pending for `op`'s request in `slot` (pooled: one per
  /// UCX request was a heap allocation per message).
  Pending* makePending(std::shared_ptr<Op> op, std::uint32_t slot);
  void recycle(std::unique_ptr<Pending> pending);
  /// Worker-lock holders: a BlockingTransfer whose request UCX still owns, so that
  /// teardown cancels it (its caller's wait then ends) and stats() counts it; and its end.
  void transferPosted(BlockingTransfer* transfer);
  void transferEnded(BlockingTransfer* transfer);

 private:
  struct Completion {
    Pending* pending;
    ucs_status_t status;
    RecvInfo info;
  };

  void run();
  void startOp(const std::shared_ptr<Op>& op);
  /// Runs `work` holding the worker lock if it is free; false (nothing run) if not.
  template <typename Work>
  bool driveIfFree(Work&& work);
  void report(const std::shared_ptr<Op>& op, const std::exception_ptr& error);
  /// What an endpoint to `address` does when UCX finds the peer unreachable (nothing,
  /// unless that peer is watched through UCX's peer error handling).
  ucx::Endpoint::OnError endpointErrorHandler(const std::string& address);
  bool progressRound();
  /// Worker-lock holders: frees what releaseAfterProgress queued.
  void releaseQueuedRequests();
  bool drainSubmissions();
  bool drainCompletions();
  /// Runs every hand-off hook now: the progress thread does it when it takes over, and a
  /// waiter before it blocks (what it queued must not wait for a hand-off that its own
  /// blocking holds back).
  void runHandOffHooks();
  /// A waiter's slow path: sleep on the worker's event fd and drive the worker until
  /// `done` or `deadline`, so a completion wakes exactly this thread. Only one waiter
  /// parks at a time; returns false (without waiting) when another one already does.
  bool parkUntil(const std::atomic<bool>& done, std::chrono::steady_clock::time_point deadline);
  /// wait()'s body; `spin`: drive the worker for a while before sleeping.
  bool waitFor(DoneFlag& flag, std::chrono::steady_clock::time_point deadline, Op* assist,
               std::uint64_t bytes, bool spin);
  /// One stretch of waitUnless (the first spins and assists).
  bool waitStretch(DoneFlag& flag, std::chrono::steady_clock::time_point until, bool first,
                   Op* assist, std::uint64_t bytes);
  /// Appends `command` to the submissions (throws once the engine stops).
  void enqueue(std::function<void(Engine&)> command);
  /// Appends `command` to the submissions, stopping or not.
  void append(std::function<void(Engine&)> command);
  /// What a submission does on the thread that holds the worker lock; true when the driver
  /// must be told this thread left (it may have left work in flight).
  bool runHere(Submission& submission);
  /// What a submission does once queued, on whichever thread drives next.
  static std::function<void(Engine&)> queued(Submission&& submission);
  /// After a batch is submitted: its caller drives it first when some of it is in flight.
  void deferHandOffFor(const std::vector<std::shared_ptr<Op>>& ops);
  void stop();
  void teardown();
  /// Teardown, worker-lock holder: waits up to `limit` for what was sent to reach its peers.
  void flushEndpoints(std::chrono::milliseconds limit);
  /// After the progress thread is gone: fails the operations still behind a CUDA stream and
  /// runs what was queued after teardown, so that every Work completes.
  void failStranded();
  /// Worker-lock holders, once stopping: runs (and so fails) every queued command.
  void runQueuedWhileStopping();
  void deliverFailure(const std::string& address, const std::string& why);
  /// Worker-lock holders: the work of a purge submission; returns how many messages it dropped.
  std::size_t dropUnexpected(std::uint32_t context);

  const std::uint32_t generation_ = forkGeneration();
  // Set once the engine is being destroyed: UCX calls back the sends it still holds (to a
  // peer that never received them; UCX cannot cancel a send) when worker_ is destroyed,
  // after the members below it are gone; those completions are dropped. Declared before
  // worker_, so it outlives it.
  std::atomic<bool> callbacksClosed_{false};
  ucx::Context context_;
  ucx::Worker worker_;
  std::unique_ptr<WorkerPort> port_;  // drives worker_ unless a test gave a fake
  const Settings settings_;
  Waker waker_;

  // Recursive: a completion callback may wait on another operation and progress inline.
  std::recursive_mutex workerMutex_;
  std::atomic<std::thread::id> driver_{};

  std::mutex submitMutex_;
  std::vector<std::function<void(Engine&)>> submissions_;
  std::atomic<std::size_t> submitted_{0};
  std::atomic<bool> stopping_{false};
  std::mutex stopMutex_;

  std::mutex hooksMutex_;
  std::map<std::uint64_t, std::function<void()>> hooks_;
  std::uint64_t nextHook_ = 0;
  std::atomic<bool> haveHooks_{false};

  ContextIds contexts_;

  // UCX may run request callbacks on its own async thread (connection and rendezvous
  // events), outside any worker lock of ours, so the completion queue has its own lock.
  std::mutex completionMutex_;
  std::vector<Completion> completions_;
  std::atomic<bool> haveCompletions_{false};  // completions_ may be non-empty

  std::mutex failureMutex_;  // held while listeners run
  std::map<std::uint64_t, FailureListener> failureListeners_;
  std::uint64_t nextFailureListener_ = 0;
  // Peers to reach with UCX's peer error handling (not watchable by pidfd).
  std::mutex remoteMutex_;
  std::unordered_set<std::string> remoteWatched_;

  // Worker-lock state.
  EndpointCache endpoints_;
  Op* activeHead_ = nullptr;
  std::size_t activeCount_ = 0;
  std::vector<std::unique_ptr<Pending>> pendingPool_;
  std::vector<Completion> spareCompletions_;  // drainCompletions' batch, kept for its capacity
  std::vector<std::unique_ptr<char[]>> purgeSinks_;  // purged messages UCX may still write
  std::size_t purged_ = 0;
  std::size_t inflightRequests_ = 0;           // posted and not yet handled
  std::vector<void*> releaseLater_;            // releaseAfterProgress's requests
  BlockingTransfer* transfersHead_ = nullptr;  // posted blocking transfers UCX still owns
  std::size_t transferCount_ = 0;
  StreamWaits streamWaits_;
  friend class Op;
  friend class BlockingTransfer;
  std::thread thread_;
  // Declared last: its thread stops first, so no report arrives at a dying engine.
  PeerWatch watch_;
};

}  // namespace commux::engine
