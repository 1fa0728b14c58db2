#pragma once
// The queue of a channel's collectives and the rule for who runs them. A channel's step
// protocol must be run by exactly one thread at a time, in issue order: the lane's own
// thread, or a thread that waits for one of the queued collectives and runs it (and the
// ones before it) itself, which saves two thread hand-offs on the common path.
//
// Who runs is one field, `holder_`, changed only under the lock:
//   None ----(a waiter whose task is queued)----> Waiter ----(queue empty)-----> None
//   None ----(wake(): tasks are queued)---------> Thread ----(queue empty)-----> None
//   Waiter --(it ran its own task; more queued)-> Thread
// Only the holder pops tasks, so the step protocol has one runner by construction. A task
// never waits for a wake-up that nobody sends: a waiter that finds a holder leaves the
// task to it, and a holder never lets go while tasks are queued, except to the thread.
// (The lane this replaces had two flags, `busy_` and `kicked_`; a waiter that drained the
// queue left `kicked_` set, which swallowed every later wake-up: docs/design.md, "The
// shared-memory hang".)
//
// No torch and no engine here, so the rule is unit-tested with plain tasks
// (tests/cpp/test_lane.cpp).
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace commux::shm {

template <typename Task>
class Lane {
 public:
  using Clock = std::chrono::steady_clock;
  /// Runs one task on the holder's thread: the lane's own (`onLane`, no deadline) or a
  /// waiter's (until its wait's `deadline`; `mine`: the task it waits for). It reports the
  /// task's outcome itself, or returns what reports it: a waiter runs that after it let go
  /// of the lane, so whatever the report runs (a future's callbacks, which may wait for
  /// another of the lane's tasks) never runs while this thread holds the lane. Must not
  /// throw (a throw is swallowed, so the holder is always handed on).
  using Report = std::function<void()>;
  using Run = std::function<Report(const std::shared_ptr<Task>& task, Clock::time_point deadline,
                                   bool onLane, bool mine)>;

  Lane(Run run, std::string threadName) : run_(std::move(run)), name_(std::move(threadName)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Lane() { stop(); }
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  /// Queues `task` after the others. `wake`: hand it to the lane's thread now (the caller
  /// will not run it); else it waits for a waiter or the next wake().
  void push(std::shared_ptr<Task> task, bool wake) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) throw std::logic_error("commux: the lane has stopped");  // nobody would run it
    queue_.push_back(std::move(task));
    if (wake) wakeLocked();
  }
  /// Whatever is queued and not being run goes to the lane's thread.
  void wake() {
    std::lock_guard<std::mutex> lock(mutex_);
    wakeLocked();
  }
  /// A thread about to wait for `task`: runs it here, with the tasks queued before it,
  /// when nobody runs the queue. False when it did not (another holder runs the queue, or
  /// `task` is not queued: done already, or not queued yet).
  bool runFromWaiter(const std::shared_ptr<Task>& task, Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (holder_ != Holder::None || stopping_ ||
        std::find(queue_.begin(), queue_.end(), task) == queue_.end()) {
      return false;
    }
    holder_ = Holder::Waiter;
    Report report;
    for (bool mine = false; !mine;) {
      auto next = std::move(queue_.front());
      queue_.pop_front();
      mine = next == task;
      lock.unlock();
      Report done = runSafely(next, deadline, false, mine);
      if (done) {
        if (mine) {
          report = std::move(done);
        } else {
          runSafely(done);
        }
      }
      next.reset();
      lock.lock();
    }
    // What was queued meanwhile is somebody else's: the lane's thread runs it.
    holder_ = Holder::None;
    wakeLocked();
    if (stopping_) cv_.notify_one();  // the lane's thread may be waiting to exit
    lock.unlock();
    if (report) runSafely(report);
    return true;
  }
  /// Runs what is still queued on the lane's thread and joins it, through `join` (the
  /// caller may need to release a lock the lane's last task needs, e.g. Python's GIL).
  void stop(const std::function<void(std::thread&)>& join = [](std::thread& t) { t.join(); }) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    join(thread_);
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
  }

  /// True on the lane's own thread.
  bool onThread() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }

  /// For tests: tasks queued and not yet taken.
  std::size_t queued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.size();
  }

 private:
  void wakeLocked() {
    if (holder_ != Holder::None || queue_.empty()) return;
    holder_ = Holder::Thread;
    cv_.notify_one();
  }

  void loop() {
    pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      // Stopping: what nobody runs goes to this thread, so every task is reported.
      if (stopping_) wakeLocked();
      if (holder_ == Holder::Thread) {
        while (!queue_.empty()) {
          auto task = std::move(queue_.front());
          queue_.pop_front();
          lock.unlock();
          if (Report done = runSafely(task, Clock::time_point::max(), true, false)) runSafely(done);
          task.reset();
          lock.lock();
        }
        holder_ = Holder::None;
        continue;
      }
      if (stopping_ && holder_ == Holder::None) return;
      cv_.wait(lock);
    }
  }

  Report runSafely(const std::shared_ptr<Task>& task, Clock::time_point deadline, bool onLane,
                   bool mine) noexcept {
    try {
      return run_(task, deadline, onLane, mine);
    } catch (...) {
      return {};
    }
  }
  static void runSafely(const Report& report) noexcept {
    try {
      report();
    } catch (...) {
    }
  }

  enum class Holder { None, Thread, Waiter };

  const Run run_;
  const std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  Holder holder_ = Holder::None;
  bool stopping_ = false;
  bool stopped_ = false;  // the thread has exited: nothing pushed now would run
  std::thread thread_;
};

}  // namespace commux::shm
