// Real ranks over real UCX, no Python: each test forks its ranks, which meet through a
// FileStore and run ProcessGroupUCX through its C++ API. These cover the engine's threads
// (progress thread, parked and spinning waiters, hand-offs, cancellation, the peer watch)
// on real paths, so the ThreadSanitizer build (scripts/sanitize.sh) sees them, and they are
// what a C++ consumer of commux runs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "commux/process_group_ucx.hpp"
#include "engine/engine.hpp"
#include "rank_runner.hpp"

using namespace std::chrono_literals;
using commux::testing::Body;
using commux::testing::runRanks;

namespace {

void check(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error("check failed: " + what);
}

// Waits for `work`; it must fail with a message holding `needle`.
void expectFailure(const c10::intrusive_ptr<c10d::Work>& work, const std::string& needle,
                   std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
  try {
    work->wait(timeout);
  } catch (const std::exception& e) {
    check(std::string(e.what()).find(needle) != std::string::npos,
          "error should mention '" + needle + "': " + e.what());
    return;
  }
  throw std::runtime_error("operation succeeded, expected an error with '" + needle + "'");
}

// As expectFailure, for a call that may also refuse at once (raise instead of a Work).
void expectFailure(const std::function<c10::intrusive_ptr<c10d::Work>()>& call,
                   const std::string& needle) {
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = call();
  } catch (const std::exception& e) {
    check(std::string(e.what()).find(needle) != std::string::npos,
          "error should mention '" + needle + "': " + e.what());
    return;
  }
  expectFailure(work, needle);
}

}  // namespace

TEST(Ranks, TaggedMessagesMatchOnSenderAndTagInAnyOrder) {
  EXPECT_EQ(runRanks(2, [](commux::ProcessGroupUCX& pg, int rank, int) {
    if (rank == 0) {
      for (int tag : {1, 2, 3}) {
        std::vector<at::Tensor> t{at::full({16}, static_cast<double>(tag))};
        pg.send(t, 1, tag);  // fire and forget: the engine moves it
      }
    } else {
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      std::vector<std::vector<at::Tensor>> bufs(4);
      for (int tag : {3, 2, 1}) {
        bufs[tag] = {at::empty({16})};
        works.push_back(pg.recv(bufs[tag], 0, tag));
      }
      for (auto& w : works) w->wait();
      for (int tag : {1, 2, 3}) check(bufs[tag][0][5].item<double>() == tag, "tag routing");
    }
    pg.barrier()->wait();
  }), "");
}

TEST(Ranks, ATruncatedReceiveNamesBothSizesAndTheGroupGoesOn) {
  EXPECT_EQ(runRanks(2, [](commux::ProcessGroupUCX& pg, int rank, int) {
    for (int64_t sent : {100, 100000}) {  // eager and rendezvous
      if (rank == 0) {
        std::vector<at::Tensor> t{at::ones({sent})};
        try {
          pg.send(t, 1, 3)->wait();
        } catch (const std::exception&) {
          // The sender may or may not hear of the rejection; it must not hang.
        }
      } else {
        std::vector<at::Tensor> t{at::zeros({50})};
        expectFailure(pg.recv(t, 0, 3), "message (" + std::to_string(4 * sent) +
                                            " bytes) is larger than the receive tensor (200 bytes)");
      }
      pg.barrier()->wait();
    }
  }), "");
}

TEST(Ranks, CollectivesGiveTheSameAnswerEverywhere) {
  EXPECT_EQ(runRanks(3, [](commux::ProcessGroupUCX& pg, int rank, int size) {
    for (int64_t n : {1, 1000, 300000}) {
      std::vector<at::Tensor> t{at::full({n}, static_cast<double>(rank + 1))};
      pg.allreduce(t)->wait();
      check(t[0][n - 1].item<double>() == 6.0, "allreduce sum");
      std::vector<at::Tensor> b{at::full({n}, rank == 2 ? 7.0 : 0.0)};
      c10d::BroadcastOptions opts;
      opts.rootRank = 2;
      pg.broadcast(b, opts)->wait();
      check(b[0][0].item<double>() == 7.0, "broadcast");
    }
    pg.barrier()->wait();
  }), "");
}

TEST(Ranks, ManyThreadsWaitAtOnce) {
  // Several threads of each rank exchange on their own tags: waiters park, spin and hand
  // off to each other and to the progress thread.
  EXPECT_EQ(runRanks(2, [](commux::ProcessGroupUCX& pg, int rank, int) {
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int th = 0; th < 4; ++th) {
      threads.emplace_back([&, th] {
        try {
          for (int i = 0; i < 200; ++i) {
            std::vector<at::Tensor> out{at::full({8}, static_cast<double>(i))};
            std::vector<at::Tensor> in{at::empty({8})};
            auto r = pg.recv(in, 1 - rank, th);
            auto s = pg.send(out, 1 - rank, th);
            s->wait();
            r->wait();
            if (in[0][0].item<double>() != i) ++failures;
          }
        } catch (const std::exception& e) {
          std::fprintf(stderr, "thread %d: %s\n", th, e.what());
          ++failures;
        }
      });
    }
    for (auto& t : threads) t.join();
    check(failures.load() == 0, "every exchange delivered in order");
  }), "");
}

TEST(Ranks, TimedOutReceiveIsCancelledAndTheGroupGoesOn) {
  EXPECT_EQ(runRanks(2, [](commux::ProcessGroupUCX& pg, int rank, int) {
    if (rank == 1) {
      std::vector<at::Tensor> t{at::empty({4})};
      expectFailure(pg.recv(t, 0, 77), "Timed out", 100ms);
    }
    pg.barrier()->wait();
    std::vector<at::Tensor> t{at::full({4}, 1.0)};
    if (rank == 0) {
      pg.send(t, 1, 5)->wait();
    } else {
      pg.recv(t, 0, 5)->wait();
    }
    pg.barrier()->wait();
  }), "");
}

#ifdef COMMUX_TORCH_HAS_COMPLETION_HOOKS
TEST(Ranks, CompletionHooksFireOncePerSuccessfulOperationWithItsKey) {
  EXPECT_EQ(runRanks(2, [](commux::ProcessGroupUCX& pg, int rank, int) {
    std::mutex mutex;
    std::vector<std::uint64_t> keys;
    check(pg.supportsCompletionHooks(), "completion hooks supported");
    pg.registerCompletionHook(7, [&](const c10d::CompletionHookArgs& args) {
      std::lock_guard<std::mutex> lock(mutex);
      keys.push_back(args.completionKey);
    });
    std::vector<at::Tensor> t{at::ones({4})};
    auto reduced = pg.allreduce(t);
    reduced->wait();
    std::vector<at::Tensor> r{at::empty({4})};
    expectFailure(pg.recv(r, 1 - rank, 77), "timed out after", 100ms);  // fires nothing
    pg.unregisterCompletionHook(7);
    pg.barrier()->wait();  // after unregistering: fires nothing either
    std::lock_guard<std::mutex> lock(mutex);
    check(keys.size() == 1, "one completion, got " + std::to_string(keys.size()));
    check(keys[0] == reduced->getCompletionKey() && keys[0] != 0, "the allreduce's key");
  }), "");
}
#endif

#ifdef COMMUX_TORCH_HAS_IS_INITIALIZED
TEST(Ranks, AGroupMadeToBeReconfiguredIsNotInitializedAndRefusesOperations) {
  EXPECT_EQ(runRanks(2, [](commux::ProcessGroupUCX& pg, int rank, int) {
    check(pg.isInitialized(), "an ordinary group is initialized");
    // A second group over the same store, made to wait for reconfigure: rank and size are
    // those given, and every operation says why it cannot run.
    commux::ProcessGroupUCX waiting(c10::make_intrusive<c10d::FileStore>(
                                        "/tmp/commux-unconfigured-" + std::to_string(::getppid()), 2),
                                    rank, 2, std::chrono::seconds(10), true, true);
    check(!waiting.isInitialized(), "not initialized before reconfigure");
    std::vector<at::Tensor> t{at::ones({4})};
    expectFailure([&] { return waiting.allreduce(t); }, "not initialized");
    expectFailure([&] { return waiting.send(t, 1 - rank, 1); }, "not initialized");
    pg.barrier()->wait();
    if (rank == 0) std::remove(("/tmp/commux-unconfigured-" + std::to_string(::getppid())).c_str());
  }), "");
}
#endif

TEST(Ranks, AbortFromAnotherThreadUnblocksAWait) {
  EXPECT_EQ(runRanks(2, [](commux::ProcessGroupUCX& pg, int rank, int) {
    pg.barrier()->wait();
    std::vector<at::Tensor> t{at::empty({4})};
    auto work = pg.recv(t, 1 - rank, 99);  // nobody sends it
    std::thread aborter([&] {
      std::this_thread::sleep_for(200ms);
      pg.abort();
    });
    const auto start = std::chrono::steady_clock::now();
    expectFailure(work, "aborted");
    aborter.join();
    check(std::chrono::steady_clock::now() - start < 2s, "abort released the wait promptly");
  }), "");
}

TEST(Ranks, KilledPeerFailsWaitsWithinSecondsNamingIt) {
  EXPECT_EQ(runRanks(3, [](commux::ProcessGroupUCX& pg, int rank, int) {
    std::vector<at::Tensor> one{at::ones({1})};
    pg.allreduce(one)->wait();  // everyone knows everyone
    if (rank == 2) {
      std::this_thread::sleep_for(100ms);
      ::kill(::getpid(), SIGKILL);
    }
    std::vector<at::Tensor> t{at::empty({4})};
    const auto start = std::chrono::steady_clock::now();
    expectFailure(pg.recv(t, 2, 1), "rank 2 died");
    std::vector<at::Tensor> x{at::ones({100})};
    expectFailure([&] { return pg.allreduce(x); }, "rank 2 died");
    check(std::chrono::steady_clock::now() - start < 5s, "death seen within 5 s");
    const auto health = pg.health();
    check(!health.healthy && health.deadRanks == std::vector<int>{2}, "health names rank 2");
    // The survivors still talk to each other. Rank 0 leaves only once rank 1 answered: a
    // rank that left early is a second dead rank to the other's health check (seen under
    // load).
    std::vector<at::Tensor> y{at::full({4}, 3.0)};
    if (rank == 0) {
      pg.send(y, 1, 4)->wait();
      pg.recv(y, 1, 5)->wait();
    } else {
      pg.recv(y, 0, 4)->wait();
      check(y[0][0].item<double>() == 3.0, "survivor p2p");
      pg.send(y, 0, 5)->wait();
    }
  }, {2}), "");
}

TEST(Ranks, ShutdownWithAHierarchicalCollectiveInFlightFailsItCleanly) {
  // Two fake hosts of two ranks: an allreduce runs in parts (shared memory, then UCX between
  // the hosts' leaders), an operation made of operations. The second host never joins it,
  // and the first shuts its engine down with it in flight: the engine fails every operation
  // still going, parts and whole, and the Work reports it. (Failing a part released the
  // whole while the teardown still held it by a raw pointer: AddressSanitizer's build runs
  // this.)
  EXPECT_EQ(runRanks(
                4,
                [](commux::ProcessGroupUCX& pg, int rank, int) {
                  pg.barrier()->wait();  // the host layout is known and the channel mapped
                  check(pg.hosts().size() == 2, "two hosts");
                  if (rank >= 2) {
                    std::this_thread::sleep_for(3s);  // gone only after the shutdown below
                    return;
                  }
                  std::vector<at::Tensor> t{at::ones({1000})};
                  auto work = pg.allreduce(t);
                  std::this_thread::sleep_for(200ms);  // its first part is done: it crosses
                  commux::engine::Engine::shutdownInstance();
                  try {
                    work->wait();
                  } catch (const std::exception& e) {
                    // Rank 1 may hear first that its leader's collective ended.
                    const std::string what = e.what();
                    check(what.find("shut down") != std::string::npos ||
                              (rank == 1 && what.find("rank 0 left") != std::string::npos),
                          "the in-flight allreduce fails with the shutdown: " + what);
                    return;
                  }
                  throw std::runtime_error("the allreduce succeeded without the other host");
                },
                {}, 60,
                [](int rank) { ::setenv("COMMUX_HOST", rank < 2 ? "a" : "b", 1); }),
            "");
}
