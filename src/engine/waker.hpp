#pragma once
// Who sleeps where while nobody has work for the UCX worker, and how each one is woken.
// The engine's whole sleep/wake protocol is this one state machine (diagram in
// docs/design.md, "Progress: who drives the worker"):
//
//   progress thread   Driving --(idle, a waiter is parked)------> StandingBy --(unpark)--> Driving
//                     Driving --(idle, a waiter spins)----------> Resting   --(timer)----> Driving
//                     Driving --(idle, nobody drives)--> [arm] -> Sleeping  --(event)----> Driving
//   waiters           Spinning (a Driver, counted) -> Parked (at most one, on the event fd)
//   hand-off timer    Disarmed -> Armed (deferHandOff, pushed back) -> Due (fired) -> Disarmed
//
// Events, from any thread: handOff() (work was queued for the driver, or a thread stopped
// driving: whoever sleeps must look again now), deferHandOff() (the same, after a delay
// that the next operation pushes back), wakeParked() (the parked waiter's operation was
// completed by someone else), stop().
//
// The worker is not known here: it is an event fd that becomes readable on a message or a
// signal(), and an arm() that fails while events are pending. So the protocol is tested
// on its own (tests/cpp/test_waker.cpp drives every transition from many threads).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

namespace commux::engine {

class Waker {
 public:
  /// Where the progress thread is.
  enum class Progress : std::uint8_t {
    Driving,     // running progress rounds, or spinning briefly before it sleeps
    Sleeping,    // in epoll on the (armed) worker event fd and the hand-off timer
    Resting,     // in poll on the hand-off timer alone: a waiter drives the worker
    StandingBy,  // on a condition variable: the parked waiter sleeps on the event fd
  };
  static const char* name(Progress progress) noexcept;

  /// How often each transition was taken (for tests and diagnostics).
  struct Counts {
    std::uint64_t sleeps = 0;          // Driving -> Sleeping
    std::uint64_t rests = 0;           // Driving -> Resting
    std::uint64_t standBys = 0;        // Driving -> StandingBy
    std::uint64_t parks = 0;           // a waiter parked
    std::uint64_t timerWakes = 0;      // woken by the hand-off timer
    std::uint64_t safetyNetWakes = 0;  // a sleep that ended on its timeout, woken by nobody
  };

  /// `eventFd` (-1: the worker cannot wake anyone; the progress thread then polls) and
  /// `signal` (makes it readable, any thread) are the worker's. `handOffDelay`: see
  /// deferHandOff(). `safetyNet`: the longest any sleep lasts, should a wake-up be lost.
  Waker(int eventFd, std::function<void()> signal, std::chrono::nanoseconds handOffDelay,
        std::chrono::milliseconds safetyNet);
  ~Waker();
  Waker(const Waker&) = delete;
  Waker& operator=(const Waker&) = delete;

  // ---- Events (any thread) ----
  /// Whoever sleeps looks at the worker again now: the sleeping progress thread (event
  /// fd), the resting one (timer), the parked waiter (event fd; it drives). Call after
  /// queueing work for the driver, and when a thread stops driving the worker (UCX defers
  /// wake-up events that arrive while another thread is inside the worker).
  void handOff();
  /// handOff() after the hand-off delay. A caller that posts and then waits drives the
  /// worker itself, so waking the progress thread at once would only make it fight the
  /// waiter for the worker (and, on a small machine, for the peer's core). In a loop of
  /// short operations the timer keeps being pushed back and never fires.
  void deferHandOff();
  /// The parked waiter's operation was completed by another thread: wake it.
  void wakeParked();
  /// A thread that drove the worker (not the parked waiter, not the progress thread) stops
  /// driving. Driving uses up the worker's arming, so a parked waiter would sleep through
  /// its next message: it is woken at once to re-arm. The progress thread gets a deferred
  /// hand-off (a loop of inline operations pushes it back, so it costs nothing there).
  void driverLeft();
  /// Wakes everyone for good: every sleep and stand-by returns at once from now on.
  void stop();
  bool stopped() const noexcept { return stopped_.load(std::memory_order_relaxed); }

  // ---- Waiters ----
  /// Held by a waiter while it spins on the worker, so the progress thread rests unarmed
  /// instead of being signalled by every message the waiter picks up itself.
  class Driver {
   public:
    explicit Driver(Waker& waker) : waker_(waker) {
      waker_.drivers_.fetch_add(1, std::memory_order_seq_cst);
    }
    ~Driver() { waker_.drivers_.fetch_sub(1, std::memory_order_seq_cst); }
    Driver(const Driver&) = delete;
    Driver& operator=(const Driver&) = delete;

   private:
    Waker& waker_;
  };
  /// Becomes the parked waiter: the one that sleeps on the event fd (see waitForEvent)
  /// while the progress thread stands by. False when another waiter is parked already,
  /// or when the worker has no event fd.
  bool tryPark();
  /// Stops being the parked waiter; a standing-by progress thread resumes.
  void unpark();
  bool parked() const noexcept { return parked_.load(std::memory_order_seq_cst); }
  int drivers() const noexcept { return drivers_.load(std::memory_order_seq_cst); }
  /// The parked waiter (after arming the worker): sleeps until an event, the timer, or
  /// `timeout` (at most the safety net).
  void waitForEvent(std::chrono::milliseconds timeout);

  // ---- The progress thread ----
  /// Nothing to do: sleeps until woken, in the state the others' activity calls for.
  /// `arm` arms the worker (under the worker lock; false: events are pending, do not
  /// sleep), `hasWork` says whether work was queued meanwhile (checked after the state is
  /// published, so a poster either sees the sleeper or the sleeper sees the work), and
  /// `duty` (may be empty) runs every few ms while standing by.
  void sleep(const std::function<bool()>& arm, const std::function<bool()>& hasWork,
             const std::function<void()>& duty);
  Progress progress() const noexcept { return progress_.load(std::memory_order_seq_cst); }
  Counts counts() const;

 private:
  void fireTimer();
  /// epoll on the event fd and the timer; consumes the timer if it fired.
  void epollWait(std::chrono::milliseconds timeout);
  void restOnTimer();
  /// Reads the fired hand-off timer, which disarms it.
  void consumeTimer();
  void standBy(const std::function<void()>& duty);

  const int eventFd_;
  const std::function<void()> signal_;
  const std::int64_t handOffDelayNs_;
  const std::chrono::milliseconds safetyNet_;
  int epollFd_ = -1;
  int timerFd_ = -1;

  std::atomic<Progress> progress_{Progress::Driving};
  std::atomic<int> drivers_{0};
  std::atomic<bool> parked_{false};
  std::atomic<bool> stopped_{false};
  // Steady-clock time (ns) the hand-off timer fires at; 0 when disarmed.
  std::atomic<std::int64_t> handOffDue_{0};
  std::mutex parkMutex_;
  std::condition_variable parkCv_;

  std::atomic<std::uint64_t> sleeps_{0}, rests_{0}, standBys_{0}, parks_{0}, timerWakes_{0},
      safetyNetWakes_{0};
};

}  // namespace commux::engine
