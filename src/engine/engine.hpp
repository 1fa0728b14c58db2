#pragma once
// The progress engine: one per process, shared by every process group in it. It owns the
// UCP context and a single-threaded worker driven by one progress thread. Callers hand
// it Ops; the thread posts them to UCX, reacts to completions and, when nothing is
// happening, sleeps on the worker's event fd, so an idle or blocked rank burns no CPU.
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "engine/op.hpp"
#include "ucx/context.hpp"
#include "ucx/worker.hpp"

namespace commux::engine {

class Engine {
 public:
  /// The process-wide engine, created on first use and destroyed when the last holder
  /// (a process group) lets go.
  static std::shared_ptr<Engine> instance();
  /// Stops the live engine's progress thread, if any (at interpreter or process exit).
  static void shutdownInstance();

  explicit Engine(std::chrono::microseconds progressSpin);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// This worker's address, published to peers through the store.
  const std::string& address() const noexcept { return worker_.address(); }
  std::vector<std::string> transports() const { return context_.transports(); }

  /// Communicator ids are local to this process (see wire/tag.hpp).
  std::uint32_t acquireContext();
  void releaseContext(std::uint32_t id);

  /// Any thread: start `op` on the progress thread.
  void submit(std::shared_ptr<Op> op);
  /// Any thread: fail `op` with `error` (used for timeouts and aborts).
  void cancel(std::shared_ptr<Op> op, std::exception_ptr error);

  bool onProgressThread() const noexcept;
  /// Progress thread only: one round of progress without sleeping, for a wait() that runs
  /// on the progress thread itself (a future callback waiting on another operation).
  void progressOnce();

  // Progress-thread-only services for Ops.
  ucp_worker_h worker() noexcept { return worker_.get(); }
  ucp_ep_h endpoint(const std::string& peerAddress);
  void queueCompletion(Pending* pending, ucs_status_t status, const RecvInfo& info);
  void opStarted(Op* op) { active_.insert(op); }
  void opFinished(Op* op) { active_.erase(op); }

 private:
  struct Completion {
    Pending* pending;
    ucs_status_t status;
    RecvInfo info;
  };

  void run();
  bool drainSubmissions();
  bool drainCompletions();
  void sleep();
  void post(std::function<void(Engine&)> command);
  void stop();
  void teardown();

  ucx::Context context_;
  ucx::Worker worker_;
  const std::chrono::microseconds progressSpin_;
  int epollFd_ = -1;

  std::mutex submitMutex_;
  std::vector<std::function<void(Engine&)>> submissions_;
  std::atomic<std::size_t> submitted_{0};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stopping_{false};

  std::mutex contextMutex_;
  std::vector<bool> contextsInUse_;
  std::uint32_t nextContext_ = 0;

  // Progress thread state.
  std::vector<Completion> completions_;
  std::map<std::string, std::unique_ptr<ucx::Endpoint>> endpoints_;
  std::unordered_set<Op*> active_;
  std::size_t inflightRequests_ = 0;  // posted and not yet handled
  friend class Op;
  std::thread thread_;
  std::atomic<std::thread::id> threadId_{};
};

}  // namespace commux::engine
