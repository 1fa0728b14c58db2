#pragma once
// What every waiter waits on: a Work, the part of a hierarchical collective between hosts,
// any thread blocked on an operation. It is set once, by whoever completes the operation,
// through Engine::setDone, which wakes the waiter wherever it sleeps (parked on the
// worker's event fd, or on the condition variable); Engine::wait is the one way to wait
// for it.
#include <atomic>
#include <condition_variable>
#include <mutex>

namespace commux::engine {

class DoneFlag {
 public:
  bool done() const noexcept { return done_.load(std::memory_order_acquire); }

 private:
  friend class Engine;
  std::atomic<bool> done_{false};
  std::atomic<int> parked_{0};  // waiters that may sleep on the worker's event fd
  std::mutex mutex_;
  std::condition_variable cv_;
};

}  // namespace commux::engine
