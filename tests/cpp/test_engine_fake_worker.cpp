// The shipped engine (its drive, hand-off, park and sleep protocol) against a fake worker
// behind engine::WorkerPort: operations complete when the fake delivers their "remote"
// completion, from a timer thread as a peer's message would arrive, or at once. A lost
// wake-up shows as a wait that lasts until the sleep's safety net, which these tests set
// far above any honest latency (test_waker.cpp checks the Waker alone against a model; this
// runs the engine itself).
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "engine/done_flag.hpp"
#include "engine/engine.hpp"
#include "engine/op.hpp"
#include "engine/worker_port.hpp"
#include "test_seed.hpp"

namespace {

using namespace commux;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kSafetyNet = 10000ms;
// Far below the safety net, far above what a loaded 2-core machine under TSan takes.
constexpr auto kLostWakeUp = 4000ms;

// A worker whose events are completions the test schedules: progress() runs those that are
// due; arm() refuses while any is; an event that arrives while armed makes the fd readable
// (arming is one-shot, as in UCX); signal() always does.
class FakePort final : public engine::WorkerPort {
 public:
  FakePort() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)), timer_([this] { runTimer(); }) {}
  ~FakePort() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    timerCv_.notify_all();
    timer_.join();
    ::close(fd_);
  }

  unsigned progress() override {
    std::vector<std::function<void()>> due;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      due.swap(ready_);
    }
    for (auto& run : due) run();
    return static_cast<unsigned>(due.size());
  }
  bool arm() override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uint64_t count;
    while (::read(fd_, &count, sizeof(count)) > 0) {
    }
    if (!ready_.empty()) return false;
    armed_ = true;
    return true;
  }
  void signal() override {
    const std::uint64_t one = 1;
    (void)!::write(fd_, &one, sizeof(one));
  }
  int eventFd() const override { return fd_; }

  /// Any thread: `run` becomes due after `delay` (at once for 0): the next progress runs it.
  void deliverAfter(std::chrono::microseconds delay, std::function<void()> run) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (delay.count() == 0) {
      arrive(std::move(run));
      return;
    }
    timed_.emplace(Clock::now() + delay, std::move(run));
    timerCv_.notify_all();
  }

 private:
  void arrive(std::function<void()> run) {  // under mutex_
    ready_.push_back(std::move(run));
    if (armed_) {
      armed_ = false;
      signal();
    }
  }
  void runTimer() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      if (timed_.empty()) {
        timerCv_.wait(lock);
        continue;
      }
      const auto next = timed_.begin()->first;
      if (Clock::now() < next) {
        timerCv_.wait_until(lock, next);
        continue;
      }
      auto run = std::move(timed_.begin()->second);
      timed_.erase(timed_.begin());
      arrive(std::move(run));
    }
  }

  const int fd_;
  std::mutex mutex_;
  std::condition_variable timerCv_;
  std::vector<std::function<void()>> ready_;
  std::multimap<Clock::time_point, std::function<void()>> timed_;
  bool armed_ = false;
  bool stop_ = false;
  std::thread timer_;  // last: started once the rest exists
};

// An operation that posts nothing to UCX: its completion is the fake worker's to deliver.
class FakeOp final : public engine::Op {
 public:
  FakeOp(FakePort& port, std::chrono::microseconds delay, Done done)
      : Op(engine::Description("a fake operation"), std::move(done)), port_(port), delay_(delay) {}

  void start(engine::Engine&) override {
    port_.deliverAfter(delay_, [self = shared_from_this()] {
      static_cast<FakeOp&>(*self).complete();
    });
  }

 protected:
  void onComplete(engine::Engine&, std::uint32_t, const engine::RecvInfo&) override {}

 private:
  void complete() { succeed(); }  // on the driver, under the worker lock (progress)

  FakePort& port_;
  const std::chrono::microseconds delay_;
};

struct Outcome {
  engine::DoneFlag flag;
  std::exception_ptr error;
  Clock::time_point submitted;
};

struct Rig {
  FakePort* port;
  std::shared_ptr<engine::Engine> engine;

  Rig() {
    auto fake = std::make_unique<FakePort>();
    port = fake.get();
    engine::Settings settings;
    settings.sleepSafetyNet = kSafetyNet;
    settings.failureDetection = engine::Settings::FailureDetection::Off;
    engine = std::make_shared<engine::Engine>(settings, ucx::JobHints{}, std::move(fake));
  }

  std::shared_ptr<Outcome> submit(std::chrono::microseconds delay,
                                  engine::Drive drive = engine::Drive::IfFree) {
    auto outcome = std::make_shared<Outcome>();
    outcome->submitted = Clock::now();
    auto* e = engine.get();
    engine->submit(engine::Submission::start(
                       std::make_shared<FakeOp>(*port, delay,
                                                [e, outcome](std::exception_ptr error, int) {
                                                  outcome->error = error;
                                                  e->setDone(outcome->flag);
                                                }))
                       .drive(drive));
    return outcome;
  }
};

// Threads submit operations that complete at once or after up to 300 us, some waiting for
// each at once, some for a batch later, some from threads that never drive (served by the
// progress thread alone): every wait ends with its operation, none near the safety net.
TEST(FakeWorker, EveryWaitEndsWithItsOperationAndNoWakeUpIsLost) {
  const unsigned s = commux::testing::testSeed();
  Rig rig;
  std::atomic<std::int64_t> slowestUs{0};
  std::atomic<int> failures{0};
  const auto waitFor = [&](Outcome& outcome) {
    if (!rig.engine->wait(outcome.flag, Clock::now() + kSafetyNet * 2) || outcome.error) {
      ++failures;
      return;
    }
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() -
                                                                          outcome.submitted)
                        .count();
    std::int64_t seen = slowestUs.load();
    while (us > seen && !slowestUs.compare_exchange_weak(seen, us)) {
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(s + static_cast<unsigned>(t));
      // Thread 3 never drives: its operations are the progress thread's to run.
      std::unique_ptr<engine::Engine::NeverDrives> never;
      if (t == 3) never = std::make_unique<engine::Engine::NeverDrives>();
      for (int round = 0; round < 150; ++round) {
        const auto delay = [&] {
          return std::chrono::microseconds(random() % 3 == 0 ? 0 : random() % 300);
        };
        if (random() % 2 == 0) {
          auto outcome = rig.submit(delay());
          waitFor(*outcome);
        } else {
          std::vector<std::shared_ptr<Outcome>> batch;
          const int n = 1 + static_cast<int>(random() % 6);
          for (int i = 0; i < n; ++i) batch.push_back(rig.submit(delay()));
          // Left for the progress thread's hand-off for a while first, now and then.
          if (random() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(random() % 2000));
          for (auto& outcome : batch) waitFor(*outcome);
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0) << "COMMUX_TEST_SEED=" << s;
  EXPECT_LT(slowestUs.load(), std::chrono::duration_cast<std::chrono::microseconds>(kLostWakeUp).count())
      << "a wait lasted toward the safety net: a lost wake-up; COMMUX_TEST_SEED=" << s;
}

// Operations in flight when the engine stops fail, each exactly once, at once.
TEST(FakeWorker, StoppingTheEngineFailsWhatIsInFlight) {
  std::vector<std::shared_ptr<Outcome>> outcomes;
  {
    Rig rig;
    for (int i = 0; i < 20; ++i) outcomes.push_back(rig.submit(std::chrono::seconds(60)));
    for (int i = 0; i < 5; ++i) outcomes.push_back(rig.submit(0us));
    const auto start = Clock::now();
    rig.engine.reset();  // stops it
    EXPECT_LT(Clock::now() - start, 5s);
  }
  int failed = 0;
  for (const auto& outcome : outcomes) {
    ASSERT_TRUE(outcome->flag.done()) << "an operation never reported";
    if (outcome->error) ++failed;
  }
  // The immediate ones may have completed before the stop; the 60 s ones cannot have.
  EXPECT_GE(failed, 20);
}

}  // namespace
