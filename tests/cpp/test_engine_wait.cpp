// The shipped Engine::wait and Engine::setDone, on a real (idle) UCX worker: every kind of
// waiter (the one parked on the event fd, those behind it on their flag, a thread that
// never drives) wakes when its flag is set, and a deadline ends a wait that nobody ends.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "engine/blocking_transfer.hpp"
#include "engine/engine.hpp"
#include "engine/process_id.hpp"
#include "fork_ranks.hpp"
#include "wire/tag.hpp"

namespace {

using namespace std::chrono_literals;
using commux::engine::DoneFlag;
using commux::engine::Engine;
using Clock = std::chrono::steady_clock;

std::shared_ptr<Engine> makeEngine() {
  return std::make_shared<Engine>(commux::engine::Settings{});
}

TEST(EngineWait, ADeadlineEndsAWaitNobodyEnds) {
  auto engine = makeEngine();
  DoneFlag flag;
  const auto start = Clock::now();
  EXPECT_FALSE(engine->wait(flag, start + 50ms));
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 50ms);
  EXPECT_LT(took, 2s);
}

// One waiter parks on the event fd; the others sleep on their flags; one thread never
// drives. setDone from another thread must wake each of them promptly, in any order.
TEST(EngineWait, SetDoneWakesEveryKindOfWaiter) {
  auto engine = makeEngine();
  constexpr int kWaiters = 5;
  std::vector<std::unique_ptr<DoneFlag>> flags;
  for (int i = 0; i < kWaiters; ++i) flags.push_back(std::make_unique<DoneFlag>());
  std::atomic<int> woke{0};
  std::vector<Clock::duration> lateness(kWaiters);
  std::vector<std::thread> waiters;
  std::vector<Clock::time_point> setAt(kWaiters);
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      std::optional<Engine::NeverDrives> never;
      if (i == kWaiters - 1) never.emplace();
      EXPECT_TRUE(engine->wait(*flags[i], Clock::now() + 10s)) << "waiter " << i;
      lateness[i] = Clock::now() - setAt[i];
      ++woke;
    });
  }
  std::this_thread::sleep_for(100ms);  // every waiter is asleep by now
  for (int i : {3, 0, 4, 1, 2}) {
    setAt[i] = Clock::now();
    engine->setDone(*flags[i]);
    std::this_thread::sleep_for(20ms);
  }
  for (auto& t : waiters) t.join();
  EXPECT_EQ(woke.load(), kWaiters);
  // A lost wake-up shows as a waiter that sleeps until its 10 s deadline (on its flag) or
  // the 100 ms safety net (parked); sanitizers slow the wake itself, so they get a wider bound.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr auto kBound = 1000ms;
#else
  constexpr auto kBound = 80ms;
#endif
  for (int i = 0; i < kWaiters; ++i) EXPECT_LT(lateness[i], kBound) << "waiter " << i;
}

TEST(EngineWait, AWaiterOnASetFlagReturnsAtOnce) {
  auto engine = makeEngine();
  DoneFlag flag;
  engine->setDone(flag);
  EXPECT_TRUE(engine->wait(flag, Clock::now()));
}

// A thread that must never drive the worker (the shared-memory lane's) fails loudly if
// something on it tries to.
TEST(EngineWait, AThreadThatNeverDrivesCannotTakeTheWorker) {
  auto engine = makeEngine();
  const Engine::NeverDrives never;
  EXPECT_FALSE(engine->tryProgress());
  EXPECT_ANY_THROW(engine->stats());
}

}  // namespace

// A caller blocked in the blocking path (BlockingTransfer, no Op) when the engine stops (at
// process exit): the teardown cancels its request, so its wait ends at once with
// UCS_ERR_CANCELED instead of sleeping to its deadline on a worker that is gone, and the
// engine counts the request while it is posted.
TEST(EngineTeardown, StoppingTheEngineEndsABlockedTransfer) {
  auto engine = Engine::instance(1, commux::engine::Settings{});
  std::atomic<bool> posted{false};
  bool ended = false;
  ucs_status_t status = UCS_OK;
  std::thread caller([&] {
    commux::engine::BlockingTransfer transfer(*engine);
    std::vector<char> buffer(64);
    // Nobody sends this. The progress thread may hold the worker for a moment.
    const auto tryUntil = Clock::now() + 5s;
    while (!transfer.recvIfFree(buffer.data(), buffer.size(), commux::wire::p2pTag(1, 0, 5),
                                commux::wire::kExactMask)) {
      if (Clock::now() > tryUntil) return;
      std::this_thread::sleep_for(1ms);
    }
    posted = true;
    // A wait may also end early when the engine stops (as a deadline would): its caller
    // looks again, as ProcessGroupUCX::finishBlocking does.
    const auto deadline = Clock::now() + 20s;
    while (!(ended = transfer.waitUntil(deadline)) && Clock::now() < deadline) {
    }
    status = transfer.status();
  });
  const auto postedBy = Clock::now() + 6s;
  while (!posted && Clock::now() < postedBy) std::this_thread::sleep_for(1ms);
  if (!posted) {
    caller.join();
    FAIL() << "the worker was never free for the receive";
  }
  EXPECT_EQ(engine->stats().inflightRequests, 1u);
  std::this_thread::sleep_for(50ms);  // the caller is asleep in its wait by now
  const auto stopAt = Clock::now();
  Engine::shutdownInstance();
  caller.join();
  EXPECT_LT(Clock::now() - stopAt, 5s);
  EXPECT_TRUE(ended);
  EXPECT_EQ(status, UCS_ERR_CANCELED) << ucs_status_string(status);
  EXPECT_EQ(engine->stats().inflightRequests, 0u);
}

// The last reference to the engine can go in a failure listener, on the peer watch's
// thread, which the engine's teardown joins: the engine is then destroyed on a helper
// thread, once the listener returned (a teardown there joined its own thread, or waited
// for the lock the listener runs under). In a forked process: the failure is a hang or an
// abort.
TEST(EngineTeardown, AnEngineWhoseLastReferenceGoesInAFailureListenerIsDestroyedElsewhere) {
  // The watch's thread reports through a pidfd; without one the engine watches through UCX.
  const int probe = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  if (probe < 0) GTEST_SKIP() << "no pidfd_open here: the peer watch has no thread to test";
  ::close(probe);
  const std::string problems = commux::testing::forkRanks(
      1,
      [](int) {
        const pid_t peer = ::fork();
        if (peer == 0) {
          ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the test's rank
          ::pause();
          ::_exit(0);
        }
        auto holder = std::make_shared<std::shared_ptr<Engine>>(
            Engine::instance(1, commux::engine::Settings{}));
        // Held by the listener only: it goes when the engine's destructor has run.
        auto sentinel = std::make_shared<int>(0);
        const std::weak_ptr<int> listenerGone = sentinel;
        std::atomic<bool> heard{false};
        (*holder)->addFailureListener(
            [holder, &heard, sentinel](const std::string&, const std::string&) {
              holder->reset();  // the last reference, on the watch's thread
              heard = true;
            });
        sentinel.reset();
        auto id = commux::engine::ProcessId::self();
        id.pid = peer;
        id.startTicks = commux::engine::ProcessId::startTicksOf(peer);
        // The listener may run (and reset the holder) from here on.
        Engine* const watching = holder->get();
        watching->watchPeer("a peer that is about to die", id);
        ::kill(peer, SIGKILL);
        ::waitpid(peer, nullptr, 0);
        const auto until = Clock::now() + 10s;
        while (!heard && Clock::now() < until) std::this_thread::sleep_for(1ms);
        if (!heard) throw std::runtime_error("the watch never reported the peer's death");
        Engine::shutdownInstance();  // waits for the helper that destroys the engine
        if (!listenerGone.expired()) {
          throw std::runtime_error("the engine was not destroyed after its last reference went");
        }
      },
      {}, 20);
  EXPECT_EQ(problems, "");
}

// One wait with an interrupt: it ends when the interrupt says so (looked at every `every`,
// not in a busy loop), at its deadline, or when its flag is set, whichever comes first.
TEST(EngineWait, AnInterruptEndsAWaitWithinItsInterval) {
  auto engine = makeEngine();
  DoneFlag flag;
  std::atomic<bool> stop{false};
  int asked = 0;
  const std::function<bool()> interrupted = [&] {
    ++asked;
    return stop.load();
  };
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    stop = true;
  });
  const auto start = Clock::now();
  EXPECT_EQ(engine->waitUnless(flag, start + 10s, interrupted, 20ms), Engine::WaitEnd::Interrupted);
  const auto took = Clock::now() - start;
  stopper.join();
  EXPECT_GE(took, 100ms);
  EXPECT_LT(took, 1s);
  EXPECT_LE(asked, 30) << "the interrupt was asked in a busy loop";

  stop = false;
  EXPECT_EQ(engine->waitUnless(flag, Clock::now() + 50ms, interrupted, 20ms),
            Engine::WaitEnd::Deadline);

  std::thread setter([&] {
    std::this_thread::sleep_for(30ms);
    engine->setDone(flag);
  });
  EXPECT_EQ(engine->waitUnless(flag, Clock::now() + 10s, interrupted, 1s), Engine::WaitEnd::Done);
  setter.join();
}
