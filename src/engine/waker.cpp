#include "engine/waker.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

namespace commux::engine {
namespace {

constexpr std::uint32_t kWorkerEvent = 0;
constexpr std::uint32_t kTimerEvent = 1;
// Standing by, the progress thread still runs its duty (hand-offs of shared-memory work)
// this often: the parked waiter may be waiting for a peer that waits for that work.
constexpr auto kDutyPeriod = std::chrono::milliseconds(5);

std::int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int toMs(std::chrono::milliseconds ms) {
  return static_cast<int>(std::max<long long>(0, std::min<long long>(ms.count(), 1 << 30)));
}

}  // namespace

const char* Waker::name(Progress progress) noexcept {
  switch (progress) {
    case Progress::Driving: return "driving";
    case Progress::Sleeping: return "sleeping";
    case Progress::Resting: return "resting";
    case Progress::StandingBy: return "standing by";
  }
  return "?";
}

Waker::Waker(int eventFd, std::function<void()> signal, std::chrono::nanoseconds handOffDelay,
             std::chrono::milliseconds safetyNet)
    : eventFd_(eventFd),
      signal_(std::move(signal)),
      handOffDelayNs_(handOffDelay.count()),
      safetyNet_(safetyNet) {
  if (eventFd_ < 0) return;
  epollFd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epollFd_ < 0) throw std::runtime_error("commux: epoll_create1 failed");
  timerFd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = kWorkerEvent;
  epoll_event timerEv{};
  timerEv.events = EPOLLIN;
  timerEv.data.u32 = kTimerEvent;
  if (timerFd_ < 0 || epoll_ctl(epollFd_, EPOLL_CTL_ADD, eventFd_, &ev) != 0 ||
      epoll_ctl(epollFd_, EPOLL_CTL_ADD, timerFd_, &timerEv) != 0) {
    if (timerFd_ >= 0) ::close(timerFd_);
    ::close(epollFd_);
    throw std::runtime_error("commux: cannot watch the UCX worker's event fd");
  }
}

Waker::~Waker() {
  if (timerFd_ >= 0) ::close(timerFd_);
  if (epollFd_ >= 0) ::close(epollFd_);
}

void Waker::handOff() {
  // Pairs with the store of the state in sleep(): either the sleeper sees the caller's
  // work (hasWork) or the caller sees the sleeper here.
  const Progress progress = progress_.load(std::memory_order_seq_cst);
  if (progress == Progress::Sleeping || parked_.load(std::memory_order_seq_cst)) signal_();
  if (progress == Progress::Resting) fireTimer();
}

void Waker::fireTimer() {
  if (timerFd_ < 0) return;
  itimerspec spec{};
  spec.it_value.tv_nsec = 1;
  handOffDue_.store(nowNs(), std::memory_order_relaxed);
  timerfd_settime(timerFd_, 0, &spec, nullptr);
}

void Waker::deferHandOff() {
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

void Waker::wakeParked() {
  if (parked_.load(std::memory_order_seq_cst)) signal_();
}

void Waker::driverLeft() {
  if (parked_.load(std::memory_order_seq_cst)) signal_();
  deferHandOff();
}

void Waker::stop() {
  stopped_.store(true);
  signal_();
  fireTimer();
  {
    std::lock_guard<std::mutex> lock(parkMutex_);
  }
  parkCv_.notify_all();
}

bool Waker::tryPark() {
  if (epollFd_ < 0) return false;
  bool expected = false;
  if (!parked_.compare_exchange_strong(expected, true)) return false;
  parks_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Waker::unpark() {
  {
    std::lock_guard<std::mutex> lock(parkMutex_);
    parked_.store(false, std::memory_order_seq_cst);
  }
  parkCv_.notify_all();
}

void Waker::waitForEvent(std::chrono::milliseconds timeout) {
  epollWait(std::min(timeout, safetyNet_));
}

void Waker::epollWait(std::chrono::milliseconds timeout) {
  epoll_event ev{};
  const int ready = epoll_wait(epollFd_, &ev, 1, toMs(timeout));
  if (ready == 0 && timeout >= safetyNet_) safetyNetWakes_.fetch_add(1, std::memory_order_relaxed);
  if (ready > 0 && ev.data.u32 == kTimerEvent) consumeTimer();
}

void Waker::consumeTimer() {
  std::uint64_t expirations = 0;
  if (::read(timerFd_, &expirations, sizeof(expirations)) > 0) {
    handOffDue_.store(0, std::memory_order_relaxed);
    timerWakes_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Waker::restOnTimer() {
  pollfd timer{timerFd_, POLLIN, 0};
  const int ready = ::poll(&timer, 1, toMs(safetyNet_));
  if (ready == 0) safetyNetWakes_.fetch_add(1, std::memory_order_relaxed);
  if (ready > 0) consumeTimer();
}

void Waker::standBy(const std::function<void()>& duty) {
  standBys_.fetch_add(1, std::memory_order_relaxed);
  progress_.store(Progress::StandingBy, std::memory_order_seq_cst);
  // This thread may have taken the event the waiter armed for (epoll wakes one sleeper)
  // and driven the worker since: UCX's arming is one-shot, so the waiter must re-arm, or
  // it sleeps through its completion until the safety net (~100 ms stalls at 8 ranks on 2
  // cores).
  signal_();
  std::unique_lock<std::mutex> lock(parkMutex_);
  const auto leftPark = [this] { return !parked_.load() || stopped_.load(); };
  if (!duty) {
    parkCv_.wait(lock, leftPark);
  } else {
    while (!parkCv_.wait_for(lock, kDutyPeriod, leftPark)) {
      lock.unlock();
      duty();
      lock.lock();
    }
  }
  progress_.store(Progress::Driving, std::memory_order_seq_cst);
}

void Waker::sleep(const std::function<bool()>& arm, const std::function<bool()>& hasWork,
                  const std::function<void()>& duty) {
  if (parked_.load(std::memory_order_seq_cst)) {
    // Events should wake one thread, not two: the parked waiter drives meanwhile.
    standBy(duty);
    return;
  }
  // A waiter drives the worker right now. An armed worker would make every message from a
  // peer signal this thread (a system call on the sender, a wake-up here, a fight for the
  // worker), all for nothing: rest on the hand-off timer alone, which a leaving waiter
  // sets (deferHandOff) and handOff() fires.
  const bool rest = epollFd_ >= 0 && drivers_.load(std::memory_order_seq_cst) > 0;
  progress_.store(rest ? Progress::Resting : Progress::Sleeping, std::memory_order_seq_cst);
  if (!hasWork() && !stopped_.load()) {
    if (epollFd_ < 0) {
      // The worker cannot wake anyone: poll gently.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else if (rest) {
      if (drivers_.load(std::memory_order_seq_cst) > 0) {
        rests_.fetch_add(1, std::memory_order_relaxed);
        restOnTimer();
      }
    } else if (arm()) {
      // Without the worker lock: others may drive meanwhile; they hand off when they stop.
      sleeps_.fetch_add(1, std::memory_order_relaxed);
      epollWait(safetyNet_);
    }
  }
  progress_.store(Progress::Driving, std::memory_order_seq_cst);
}

Waker::Counts Waker::counts() const {
  Counts c;
  c.sleeps = sleeps_.load();
  c.rests = rests_.load();
  c.standBys = standBys_.load();
  c.parks = parks_.load();
  c.timerWakes = timerWakes_.load();
  c.safetyNetWakes = safetyNetWakes_.load();
  return c;
}

}  // namespace commux::engine
