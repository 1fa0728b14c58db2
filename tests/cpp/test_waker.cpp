// The engine's sleep/wake protocol (engine/waker.hpp) against a model of the UCX worker:
// an eventfd that signal() makes readable, and so does a peer's message, but only while
// the worker is armed (arming is one-shot: driving the worker uses it up, as in UCX); arm()
// fails while events are pending (as ucp_worker_arm does). A lost wake-up shows as an item that
// waits for the safety net, which these tests set far above any honest latency.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "engine/waker.hpp"

using namespace std::chrono_literals;
using commux::engine::Waker;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kSafetyNet = 5000ms;
// Far below the safety net, far above what a loaded 2-core machine under TSan takes.
constexpr auto kLostWakeUp = kSafetyNet / 2;

struct Item {
  // The model completes an item under its lock: whoever frees it waits until that is over.
  ~Item() { std::lock_guard<std::mutex> lock(mutex); }
  std::atomic<bool> done{false};
  Clock::time_point posted;
  std::atomic<std::int64_t> latencyNs{0};
  std::mutex mutex;
  std::condition_variable cv;
};

// The worker and everything queued for it, plus the engine-like threads around a Waker.
class Model {
 public:
  explicit Model(std::chrono::microseconds handOffDelay = 200us)
      : eventFd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        waker_(eventFd_, [this] { signal(); }, handOffDelay, kSafetyNet) {}
  ~Model() {
    stopProgressThread();
    ::close(eventFd_);
  }

  Waker& waker() { return waker_; }

  void startProgressThread(bool withDuty = false) {
    progress_ = std::thread([this, withDuty] {
      const std::function<bool()> arm = [this] {
        std::lock_guard<std::mutex> lock(worker_);
        return armWorker();
      };
      const std::function<bool()> hasWork = [this] { return submitted_.load() != 0 || stop_.load(); };
      const std::function<void()> duty = [this] { duties_.fetch_add(1); };
      while (!stop_.load()) {
        bool active;
        {
          std::lock_guard<std::mutex> lock(worker_);
          active = round();
        }
        if (!active) waker_.sleep(arm, hasWork, withDuty ? duty : std::function<void()>());
      }
    });
  }
  void stopProgressThread() {
    if (!progress_.joinable()) return;
    stop_.store(true);
    waker_.stop();
    progress_.join();
  }

  /// A caller: queues `item` for the driver, runs it itself when the worker is free, and
  /// then hands off at once or (`defer`) as a leaving driver does.
  void post(Item& item, bool defer) {
    item.posted = Clock::now();
    {
      std::lock_guard<std::mutex> lock(queueMutex_);
      commands_.push_back(&item);
    }
    submitted_.fetch_add(1, std::memory_order_seq_cst);
    if (worker_.try_lock()) {
      round();
      worker_.unlock();
      if (defer) {
        waker_.driverLeft();
      } else {
        waker_.handOff();
      }
    } else {
      waker_.handOff();
    }
  }

  /// A caller that finds the worker busy: queues `item` for the driver and hands off.
  void queue(Item& item) {
    item.posted = Clock::now();
    {
      std::lock_guard<std::mutex> lock(queueMutex_);
      commands_.push_back(&item);
    }
    submitted_.fetch_add(1, std::memory_order_seq_cst);
    waker_.handOff();
  }

  /// A peer's message that completes `item` (delivered to the worker, which signals).
  void deliver(Item& item) {
    item.posted = Clock::now();
    {
      std::lock_guard<std::mutex> lock(queueMutex_);
      messages_.push_back(&item);
    }
    if (armed_.exchange(false)) signal();
  }

  /// A waiter, as WorkUCX::waitUntil: drive for `spin`, then park (or, when another waiter
  /// is parked, sleep on the item), then hand off.
  void wait(Item& item, std::chrono::microseconds spin) {
    {
      const Waker::Driver driving(waker_);
      const auto end = Clock::now() + spin;
      while (!item.done.load() && Clock::now() < end) {
        if (worker_.try_lock()) {
          round();
          worker_.unlock();
        }
        std::this_thread::yield();
      }
    }
    if (item.done.load()) {
      waker_.driverLeft();
      return;
    }
    const bool parked = waker_.tryPark();
    if (parked) {
      while (!item.done.load() && !waker_.stopped()) {
        bool armed;
        {
          std::lock_guard<std::mutex> lock(worker_);
          round();
          if (item.done.load()) break;
          armed = armWorker();
        }
        if (armed) waker_.waitForEvent(kSafetyNet);
      }
      waker_.unpark();
    }
    // Either way this thread stopped driving (its spin used up the worker's arming).
    waker_.handOff();
    if (!parked) {
      std::unique_lock<std::mutex> lock(item.mutex);
      item.cv.wait(lock, [&] { return item.done.load(); });
    }
  }

  std::int64_t duties() const { return duties_.load(); }

 private:
  void signal() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(eventFd_, &one, sizeof(one));
  }
  // As ucp_worker_arm: consumes the event fd, and fails if it had fired or messages wait.
  bool armWorker() {
    std::uint64_t value = 0;
    const bool fired = ::read(eventFd_, &value, sizeof(value)) > 0;
    std::lock_guard<std::mutex> lock(queueMutex_);
    const bool armed = !fired && messages_.empty();
    armed_.store(armed);
    return armed;
  }
  // Worker-lock holders: run queued commands and arrived messages.
  bool round() {
    armed_.store(false);
    std::deque<Item*> commands, messages;
    {
      std::lock_guard<std::mutex> lock(queueMutex_);
      commands.swap(commands_);
      messages.swap(messages_);
      submitted_.store(0);
    }
    for (Item* item : commands) complete(*item);
    for (Item* item : messages) complete(*item);
    return !commands.empty() || !messages.empty();
  }
  void complete(Item& item) {
    item.latencyNs.store(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - item.posted).count());
    {
      // Notified under the lock: a waiter that takes the lock after `done` may free it.
      std::lock_guard<std::mutex> lock(item.mutex);
      item.done.store(true);
      item.cv.notify_all();
    }
    waker_.wakeParked();
  }

  const int eventFd_;
  Waker waker_;
  std::mutex worker_;
  std::mutex queueMutex_;
  std::deque<Item*> commands_;
  std::deque<Item*> messages_;
  std::atomic<std::size_t> submitted_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> armed_{false};
  std::atomic<std::int64_t> duties_{0};
  std::thread progress_;
};

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = kLostWakeUp,
                std::chrono::microseconds poll = 100us) {
  const auto end = Clock::now() + limit;
  while (!pred()) {
    if (Clock::now() > end) return false;
    if (poll.count() == 0) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(poll);
    }
  }
  return true;
}

// A progress thread that went to sleep, in the state the test wants.
bool settlesIn(Waker& waker, Waker::Progress state) {
  return eventually([&] { return waker.progress() == state; });
}

// A progress thread asleep for the `nth` time: its worker armed, so a message signals it.
// The state alone is not enough: it reads Sleeping before the thread arms, and a message
// that arrives then makes the arming fail and is driven without a sleep.
bool fallsAsleep(Waker& waker, std::size_t nth) {
  return eventually([&] {
    return waker.progress() == Waker::Progress::Sleeping && waker.counts().sleeps >= nth;
  });
}

// The same, handing off until the progress thread is the one woken: a parked waiter
// sleeps on the same event fd, and epoll wakes one sleeper.
bool movesTo(Waker& waker, Waker::Progress state) {
  return eventually([&] {
    if (waker.progress() == state) return true;
    waker.handOff();
    std::this_thread::sleep_for(1ms);
    return waker.progress() == state;
  });
}

}  // namespace

TEST(Waker, SleepingProgressThreadWakesForQueuedWorkAndMessages) {
  Model model;
  model.startProgressThread();
  ASSERT_TRUE(fallsAsleep(model.waker(), 1));
  // Work queued by a thread that does not drive: only the hand-off can wake the sleeper.
  Item queued;
  model.queue(queued);
  ASSERT_TRUE(eventually([&] { return queued.done.load(); }));
  ASSERT_TRUE(fallsAsleep(model.waker(), 2));
  // A peer's message: the armed worker's event fd wakes the sleeper.
  Item message;
  model.deliver(message);
  ASSERT_TRUE(eventually([&] { return message.done.load(); }));
  EXPECT_EQ(model.waker().counts().safetyNetWakes, 0u);
}

TEST(Waker, RestingProgressThreadWakesForQueuedWork) {
  Model model;
  model.startProgressThread();
  ASSERT_TRUE(settlesIn(model.waker(), Waker::Progress::Sleeping));
  // A driver that does not drive (it went off its core): the progress thread rests, and
  // the hand-off of queued work must reach it through the timer.
  const Waker::Driver driving(model.waker());
  ASSERT_TRUE(movesTo(model.waker(), Waker::Progress::Resting));
  Item queued;
  model.queue(queued);
  ASSERT_TRUE(eventually([&] { return queued.done.load(); }));
}

// The race of a poster with a progress thread going to sleep, made to happen: the work is
// queued, and its hand-off done, while the progress thread is still driving (no signal);
// sleep() must then see the work instead of sleeping on.
TEST(Waker, SleepSeesWorkQueuedBeforeItPublishedItsState) {
  Waker waker(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), [] {}, 100us, kSafetyNet);
  std::atomic<bool> queued{true};
  waker.handOff();  // sees Driving: wakes nobody
  const auto start = Clock::now();
  waker.sleep([] { return true; }, [&] { return queued.load(); }, {});
  EXPECT_LT(Clock::now() - start, kLostWakeUp);
  EXPECT_EQ(waker.counts().sleeps, 0u);
}

// Each thread queues an item and waits for it before the next, so a hand-off lost in the
// race between a poster and a progress thread going to sleep strands the item until the
// safety net (the sleeper must publish its state before it looks at the queue).
TEST(Waker, QueuedWorkIsNeverStranded) {
  Model model;
  model.startProgressThread();
  std::atomic<int> stranded{0};
  std::vector<std::thread> posters;
  for (int p = 0; p < 2; ++p) {
    posters.emplace_back([&] {
      for (int i = 0; i < 3000 && stranded.load() == 0; ++i) {
        Item item;
        model.queue(item);
        // Polled without sleeping, so the next item often arrives just as the progress
        // thread goes to sleep.
        if (!eventually([&] { return item.done.load(); }, kLostWakeUp, 0us)) stranded.fetch_add(1);
      }
    });
  }
  for (auto& t : posters) t.join();
  EXPECT_EQ(stranded.load(), 0) << "queued work waited for the safety net: a lost hand-off";
}

TEST(Waker, RestsWhileAWaiterDrivesAndTheDeferredHandOffWakesIt) {
  Model model(/*handOffDelay=*/1000us);
  model.startProgressThread();
  ASSERT_TRUE(settlesIn(model.waker(), Waker::Progress::Sleeping));
  Item item;
  std::thread waiter([&] { model.wait(item, /*spin=*/std::chrono::microseconds(kLostWakeUp)); });
  // The waiter spins as a driver: the progress thread, once woken, must rest on the timer
  // (unarmed), not sleep on the worker.
  ASSERT_TRUE(eventually([&] { return model.waker().drivers() == 1; }));
  ASSERT_TRUE(movesTo(model.waker(), Waker::Progress::Resting));
  model.deliver(item);
  waiter.join();
  EXPECT_TRUE(item.done.load());
  // The waiter left with deferHandOff: the timer fires and the progress thread drives.
  ASSERT_TRUE(eventually([&] { return model.waker().counts().timerWakes >= 1; }));
  ASSERT_TRUE(settlesIn(model.waker(), Waker::Progress::Sleeping));
  EXPECT_GE(model.waker().counts().rests, 1u);
}

TEST(Waker, StandsByWhileAWaiterIsParkedAndResumesWhenItLeaves) {
  Model model;
  model.startProgressThread(/*withDuty=*/true);
  ASSERT_TRUE(settlesIn(model.waker(), Waker::Progress::Sleeping));
  Item item;
  std::thread waiter([&] { model.wait(item, /*spin=*/0us); });
  ASSERT_TRUE(eventually([&] { return model.waker().parked(); }));
  // The progress thread learns of the parked waiter when it next wakes (both sleep on the
  // event fd); from then on it stands by.
  ASSERT_TRUE(movesTo(model.waker(), Waker::Progress::StandingBy));
  // Standing by still does its duty (hand-offs of shared-memory work).
  ASSERT_TRUE(eventually([&] { return model.duties() >= 2; }));
  // The parked waiter, not the progress thread, is woken by its message.
  model.deliver(item);
  waiter.join();
  EXPECT_TRUE(item.done.load());
  EXPECT_LT(item.latencyNs.load(), std::chrono::nanoseconds(kLostWakeUp).count());
  ASSERT_TRUE(settlesIn(model.waker(), Waker::Progress::Sleeping));
  EXPECT_GE(model.waker().counts().standBys, 1u);
  EXPECT_GE(model.waker().counts().parks, 1u);
}

TEST(Waker, OnlyOneWaiterParks) {
  Model model;
  ASSERT_TRUE(model.waker().tryPark());
  EXPECT_FALSE(model.waker().tryPark());
  model.waker().unpark();
  EXPECT_TRUE(model.waker().tryPark());
  model.waker().unpark();
}

TEST(Waker, WithoutAnEventFdNobodyParksAndTheProgressThreadPolls) {
  Waker waker(-1, [] {}, 100us, kSafetyNet);
  EXPECT_FALSE(waker.tryPark());
  std::atomic<bool> work{false};
  const auto start = Clock::now();
  waker.sleep([] { return true; }, [&] { return work.load(); }, {});
  EXPECT_LT(Clock::now() - start, kLostWakeUp);  // a short poll, not a sleep
  EXPECT_EQ(waker.progress(), Waker::Progress::Driving);
}

TEST(Waker, StopEndsEverySleep) {
  Model model;
  model.startProgressThread();
  ASSERT_TRUE(settlesIn(model.waker(), Waker::Progress::Sleeping));
  const auto start = Clock::now();
  model.stopProgressThread();
  EXPECT_LT(Clock::now() - start, kLostWakeUp);
}

// Many threads post, wait (spinning, parking, or behind a parked waiter) and deliver at
// once, with random timing. Every transition must be taken, every item must complete, and
// none may wait for the safety net.
TEST(Waker, StressEveryTransitionFromManyThreads) {
  Model model(/*handOffDelay=*/100us);
  model.startProgressThread(/*withDuty=*/true);
  constexpr int kPosters = 3;
  constexpr int kWaiters = 3;
  constexpr int kRounds = 400;
  std::vector<std::unique_ptr<Item>> items;
  std::mutex itemsMutex;
  auto keep = [&] {
    std::lock_guard<std::mutex> lock(itemsMutex);
    items.push_back(std::make_unique<Item>());
    return items.back().get();
  };
  std::vector<std::thread> threads;
  for (int p = 0; p < kPosters; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937 rng(17 + p);
      for (int i = 0; i < kRounds; ++i) {
        model.post(*keep(), rng() % 2 == 0);
        if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
      }
    });
  }
  for (int w = 0; w < kWaiters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(1000 + w);
      for (int i = 0; i < kRounds / 4; ++i) {
        Item* item = keep();
        const auto delay = std::chrono::microseconds(rng() % 600);
        // The peer answers after `delay`; the waiter spins for up to 200 us, so some waits
        // end spinning and some park.
        std::thread peer([&model, item, delay] {
          std::this_thread::sleep_for(delay);
          model.deliver(*item);
        });
        model.wait(*item, std::chrono::microseconds(rng() % 200));
        peer.join();
        if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
      }
    });
  }
  for (auto& t : threads) t.join();
  // Items only posted (nobody waits on them) are the driver's: all must complete.
  ASSERT_TRUE(eventually([&] {
    for (const auto& item : items) {
      if (!item->done.load()) return false;
    }
    return true;
  })) << "an item was never run: a lost wake-up";
  std::int64_t worst = 0;
  for (const auto& item : items) worst = std::max(worst, item->latencyNs.load());
  EXPECT_LT(worst, std::chrono::nanoseconds(kLostWakeUp).count())
      << "an item waited for the safety net: a lost wake-up";
  const auto c = model.waker().counts();
  std::printf("sleeps %llu, rests %llu, stand-bys %llu, parks %llu, timer wakes %llu, "
              "safety-net wakes %llu, worst latency %.1f ms\n",
              static_cast<unsigned long long>(c.sleeps), static_cast<unsigned long long>(c.rests),
              static_cast<unsigned long long>(c.standBys), static_cast<unsigned long long>(c.parks),
              static_cast<unsigned long long>(c.timerWakes),
              static_cast<unsigned long long>(c.safetyNetWakes), worst / 1e6);
  EXPECT_GT(c.sleeps, 0u);
  EXPECT_GT(c.rests, 0u);
  EXPECT_GT(c.standBys, 0u);
  EXPECT_GT(c.parks, 0u);
  EXPECT_GT(c.timerWakes, 0u);
}
