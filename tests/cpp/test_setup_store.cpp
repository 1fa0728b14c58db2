// SetupStore over an in-process store: a wait ends at a death, at a rank that gave up, or at
// the store's timeout naming the late ranks, never by waiting out a dead rank.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/setup_store.hpp"
#include "memory_store.hpp"

namespace commux::core {
namespace {

using namespace std::chrono_literals;
using test_support::MemoryStore;

struct Deaths {
  std::mutex mutex;
  std::string dead;
  int deadRank = -1;  // when set, `dead` ends only a wait that rank still owes a key to
  std::vector<std::vector<int>> watched;
  SetupDeaths hooks() {
    return SetupDeaths{[this](const std::vector<int>& ranks) {
                         std::lock_guard<std::mutex> lock(mutex);
                         watched.push_back(ranks);
                       },
                       [this](const std::vector<int>* late) {
                         std::lock_guard<std::mutex> lock(mutex);
                         if (late == nullptr || deadRank < 0) return dead;
                         for (int r : *late) {
                           if (r == deadRank) return dead;
                         }
                         return std::string();
                       },
                       "a test set-up"};
  }
  void die(const std::string& why, int rank = -1) {
    std::lock_guard<std::mutex> lock(mutex);
    dead = why;
    deadRank = rank;
  }
};

TEST(SetupStore, TakesWhatAnotherRankPutsLater) {
  MemoryStore store(5s);
  Deaths deaths;
  const SetupDeaths hooks = deaths.hooks();
  SetupStore mine(store, hooks);
  std::thread other([&] {
    std::this_thread::sleep_for(50ms);
    SetupStore theirs(store, hooks);
    theirs.put("k1", "one");
  });
  mine.put("k0", "zero");
  EXPECT_EQ(mine.takeAll({"k0", "k1"}, {0, 1}), (std::vector<std::string>{"zero", "one"}));
  other.join();
}

TEST(SetupStore, ADeathEndsTheWaitAtOnceWithItsReason) {
  MemoryStore store(60s);
  Deaths deaths;
  const SetupDeaths hooks = deaths.hooks();
  SetupStore mine(store, hooks);
  std::thread killer([&] {
    std::this_thread::sleep_for(50ms);
    deaths.die("rank 1 died (its process is gone)");
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    mine.take("k1", 1);
    FAIL() << "the wait did not end";
  } catch (const SetupAbandoned& e) {
    EXPECT_STREQ(e.what(), "rank 1 died (its process is gone)");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  killer.join();
}

TEST(SetupStore, AMemberGoneAfterItsPartEndsNoWait) {
  // Rank 2 left having written its keys: the wait for rank 1's goes on and gets it.
  MemoryStore store(5s);
  Deaths deaths;
  const SetupDeaths hooks = deaths.hooks();
  SetupStore mine(store, hooks);
  SetupStore(store, hooks).put("k2", "two");
  deaths.die("rank 2 left the group", 2);
  std::thread other([&] {
    std::this_thread::sleep_for(50ms);
    SetupStore(store, hooks).put("k1", "one");
  });
  EXPECT_EQ(mine.takeAll({"k1", "k2"}, {1, 2}), (std::vector<std::string>{"one", "two"}));
  other.join();
  // One that still owes a key ends it.
  try {
    mine.take("k2b", 2);
    FAIL() << "the wait did not end";
  } catch (const SetupAbandoned& e) {
    EXPECT_STREQ(e.what(), "rank 2 left the group");
  }
}

TEST(SetupStore, ARankThatGivesUpTellsThoseWaitingForItWhy) {
  MemoryStore store(60s);
  Deaths deaths;
  const SetupDeaths hooks = deaths.hooks();
  SetupStore quitter(store, hooks);
  quitter.put("written", "value");
  quitter.abandon("rank 2's settings differ from rank 0's", {"owed"});
  SetupStore waiter(store, hooks);
  for (const char* key : {"written", "owed"}) {
    try {
      waiter.take(key, 2);
      FAIL() << key << " read as a value";
    } catch (const SetupAbandoned& e) {
      EXPECT_STREQ(e.what(), "rank 2's settings differ from rank 0's");
    }
  }
}

TEST(SetupStore, AtTheStoresTimeoutTheLateRanksAreNamedAndWatched) {
  MemoryStore store(1500ms);
  Deaths deaths;
  const SetupDeaths hooks = deaths.hooks();
  SetupStore mine(store, hooks);
  mine.put("k0", "zero");
  try {
    mine.takeAll({"k0", "k3", "k2", "k3b"}, {0, 3, 2, 3});
    FAIL() << "the wait did not end";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Store);
    const std::string what = e.what();
    EXPECT_NE(what.find("a test set-up waited in vain for rank(s) 2, 3 "), std::string::npos)
        << what;
  }
  // Watched once the wait was late (after a second): the owners still missing, each once.
  std::lock_guard<std::mutex> lock(deaths.mutex);
  ASSERT_FALSE(deaths.watched.empty());
  EXPECT_EQ(deaths.watched.front(), (std::vector<int>{2, 3}));
}

TEST(SetupStore, AStoreLostToADeathGivesTheDeathAsTheReason) {
  MemoryStore store(60s);
  Deaths deaths;
  const SetupDeaths hooks = deaths.hooks();
  SetupStore mine(store, hooks);
  store.loseConnection();
  std::thread reporter([&] {
    std::this_thread::sleep_for(50ms);
    deaths.die("rank 0 died (its process is gone)");
  });
  EXPECT_THROW(mine.take("k0", 0), SetupAbandoned);
  reporter.join();
}

TEST(SetupStore, AStoreLostWithNoDeathRaisesTheStoresError) {
  MemoryStore store(60s);
  Deaths deaths;
  const SetupDeaths hooks = deaths.hooks();
  SetupStore mine(store, hooks);
  store.loseConnection();
  try {
    mine.take("k0", 0);
    FAIL() << "nothing thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Network);
  }
}

}  // namespace
}  // namespace commux::core
