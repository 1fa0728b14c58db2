// The shipped lane (shm/lane.hpp), with plain tasks: who runs a channel's queue, and that
// no queued task is ever left without a runner.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "shm/lane.hpp"

namespace {

using namespace std::chrono_literals;
using commux::shm::Lane;

struct Task {
  int id = 0;
  std::atomic<bool> done{false};
  std::atomic<bool> onLane{false};
};

// Records what ran, in what order, and whether two threads ever ran tasks at once.
struct Record {
  std::mutex mutex;
  std::vector<int> order;
  std::atomic<int> running{0};
  std::atomic<int> overlaps{0};
  std::chrono::microseconds work{0};

  Lane<Task>::Run runner() {
    return [this](const std::shared_ptr<Task>& task, Lane<Task>::Clock::time_point, bool onLane,
                  bool) -> Lane<Task>::Report {
      if (running.fetch_add(1) != 0) overlaps.fetch_add(1);
      if (work.count() != 0) std::this_thread::sleep_for(work);
      {
        std::lock_guard<std::mutex> lock(mutex);
        order.push_back(task->id);
      }
      task->onLane.store(onLane);
      running.fetch_sub(1);
      task->done.store(true);
      return {};
    };
  }
};

std::shared_ptr<Task> task(int id) {
  auto t = std::make_shared<Task>();
  t->id = id;
  return t;
}

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

const auto kNoDeadline = Lane<Task>::Clock::time_point::max();

TEST(Lane, AWaiterRunsTheTasksBeforeItsOwnAndLeavesTheRestToTheThread) {
  Record record;
  Lane<Task> lane(record.runner(), "test-lane");
  auto a = task(1), b = task(2), c = task(3);
  lane.push(a, false);
  lane.push(b, false);
  lane.push(c, false);
  ASSERT_TRUE(lane.runFromWaiter(b, kNoDeadline));
  EXPECT_TRUE(a->done && b->done);
  EXPECT_FALSE(a->onLane || b->onLane);
  // c is somebody else's: nobody needs to wake the thread for it.
  ASSERT_TRUE(eventually([&] { return c->done.load(); }));
  EXPECT_TRUE(c->onLane);
  EXPECT_EQ(record.order, (std::vector<int>{1, 2, 3}));
}

TEST(Lane, AWaiterWhoseTaskIsNotQueuedRunsNothing) {
  Record record;
  Lane<Task> lane(record.runner(), "test-lane");
  auto a = task(1);
  EXPECT_FALSE(lane.runFromWaiter(a, kNoDeadline));
  lane.push(a, false);
  ASSERT_TRUE(lane.runFromWaiter(a, kNoDeadline));
  EXPECT_FALSE(lane.runFromWaiter(a, kNoDeadline));  // done: not queued any more
}

TEST(Lane, ATaskNobodyWaitsForRunsAtTheNextWake) {
  Record record;
  Lane<Task> lane(record.runner(), "test-lane");
  auto a = task(1);
  lane.push(a, false);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(a->done);  // left for a waiter
  lane.wake();
  ASSERT_TRUE(eventually([&] { return a->done.load(); }));
  EXPECT_TRUE(a->onLane);
}

// The sequence of the shared-memory hang (docs/design.md): the lane's thread is woken, a
// waiter takes the queue before it, drains it, and leaves; later tasks must still run on
// the next wake. The old lane kept a "kicked" flag set here and swallowed every wake after.
TEST(Lane, WakesAfterAWaiterDrainedTheQueueAreNeverLost) {
  Record record;
  record.work = 2ms;
  Lane<Task> lane(record.runner(), "test-lane");
  for (int round = 0; round < 50; ++round) {
    auto mine = task(2 * round);
    lane.push(mine, false);
    std::thread waker([&] { lane.wake(); });
    lane.runFromWaiter(mine, kNoDeadline);  // may lose the race to the thread: fine
    waker.join();
    ASSERT_TRUE(eventually([&] { return mine->done.load(); })) << "round " << round;
    auto later = task(2 * round + 1);
    lane.push(later, false);
    lane.wake();
    ASSERT_TRUE(eventually([&] { return later->done.load(); }, 2000ms))
        << "a wake was lost in round " << round;
  }
  EXPECT_EQ(record.overlaps.load(), 0);
}

// A waiter's own report (a Work's future callbacks) runs after it let go of the lane: a
// callback that waits for a later collective of the same channel runs that one itself.
TEST(Lane, AWaitersReportRunsAfterItLetGoSoTheReportCanWaitForALaterTask) {
  Record record;
  std::shared_ptr<Task> later = task(2);
  std::atomic<bool> laterRanInReport{false};
  Lane<Task>* lanePtr = nullptr;
  auto base = record.runner();
  Lane<Task> lane(
      [&](const std::shared_ptr<Task>& t, Lane<Task>::Clock::time_point deadline, bool onLane,
          bool mine) -> Lane<Task>::Report {
        base(t, deadline, onLane, mine);
        if (!mine || t->id != 1) return {};
        return [&] {
          lanePtr->push(later, false);
          laterRanInReport = lanePtr->runFromWaiter(later, kNoDeadline);
        };
      },
      "test-lane");
  lanePtr = &lane;
  auto first = task(1);
  lane.push(first, false);
  ASSERT_TRUE(lane.runFromWaiter(first, kNoDeadline));
  EXPECT_TRUE(laterRanInReport) << "the report ran while its thread still held the lane";
  EXPECT_TRUE(later->done && !later->onLane);
}

TEST(Lane, StopRunsWhatIsQueued) {
  Record record;
  auto lane = std::make_unique<Lane<Task>>(record.runner(), "test-lane");
  auto a = task(1), b = task(2);
  lane->push(a, false);
  lane->push(b, false);
  lane->stop();
  EXPECT_TRUE(a->done && b->done);
  EXPECT_EQ(record.order, (std::vector<int>{1, 2}));
  EXPECT_THROW(lane->push(task(3), true), std::logic_error);  // nobody would run it
  lane.reset();
}

// Many threads push, wait (running from the waiter when they can) and wake, in random
// order: every task runs exactly once, in push order, never two at once, and a final wake
// leaves nothing queued.
TEST(Lane, RandomMixesRunEveryTaskOnceInOrderOneAtATime) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Record record;
  Lane<Task> lane(record.runner(), "test-lane");
  std::mutex pushMutex;  // one issue order, as the ranks' collectives have
  int next = 0;
  std::vector<std::shared_ptr<Task>> all;
  constexpr int kThreads = 4, kPerThread = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(seed + static_cast<unsigned>(t));
      for (int i = 0; i < kPerThread; ++i) {
        std::shared_ptr<Task> mine;
        {
          std::lock_guard<std::mutex> lock(pushMutex);
          mine = task(next++);
          all.push_back(mine);
          lane.push(mine, rng() % 8 == 0);
        }
        switch (rng() % 4) {
          case 0: break;  // async: nobody waits
          case 1: lane.wake(); break;
          default:
            if (!lane.runFromWaiter(mine, kNoDeadline)) lane.wake();
            ASSERT_TRUE(eventually([&] { return mine->done.load(); }))
                << "task " << mine->id << " never ran";
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  lane.wake();
  ASSERT_TRUE(eventually([&] { return lane.queued() == 0 && record.running == 0; }));
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(record.mutex);
    return record.order.size() == all.size();
  }));
  for (std::size_t i = 0; i < record.order.size(); ++i) ASSERT_EQ(record.order[i], static_cast<int>(i));
  EXPECT_EQ(record.overlaps.load(), 0);
}

}  // namespace
