// sendBlocking / recvBlocking on real ranks: the path on the caller's thread must match,
// order and fail exactly as send/recv + wait do, and mix with them.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>

#include "commux/process_group_ucx.hpp"
#include "rank_runner.hpp"

using namespace std::chrono_literals;
using commux::testing::runRanks;

namespace {

void check(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error("check failed: " + what);
}

template <typename Call>
void expectError(Call call, const std::string& needle) {
  try {
    call();
  } catch (const std::exception& e) {
    check(std::string(e.what()).find(needle) != std::string::npos,
          "error should mention '" + needle + "': " + e.what());
    return;
  }
  throw std::runtime_error("call succeeded, expected an error with '" + needle + "'");
}

}  // namespace

// Rank 0 sends a seeded mix of tags, sizes and paths (blocking, Work, strided tensors that
// take the ordinary path); rank 1 receives them in a seeded order that keeps each tag's own
// order, through either path. Every message must land in its own receive, in order.
TEST(BlockingP2P, MixedWithWorksEveryMessageLandsInOrderPerTag) {
  for (unsigned seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    EXPECT_EQ(
        runRanks(
            2,
            [seed](commux::ProcessGroupUCX& pg, int rank, int) {
              constexpr int kMessages = 300;
              constexpr int kTags = 4;
              std::mt19937 pick(seed);
              std::vector<int> tags(kMessages), sizes(kMessages), paths(kMessages);
              for (int i = 0; i < kMessages; ++i) {
                tags[i] = static_cast<int>(pick() % kTags);
                sizes[i] =
                    std::vector<int>{1, 2, 64, 1024}[pick() % 4];  // eager: sends never block
                paths[i] = static_cast<int>(pick() % 3);
              }
              if (rank == 0) {
                std::vector<c10::intrusive_ptr<c10d::Work>> works;
                for (int i = 0; i < kMessages; ++i) {
                  at::Tensor t = at::full({sizes[i]}, static_cast<double>(i), at::kDouble);
                  if (paths[i] == 0) {
                    pg.sendBlocking(t, 1, tags[i]);
                  } else if (paths[i] == 1) {
                    std::vector<at::Tensor> v{t};
                    works.push_back(pg.send(v, 1, tags[i]));
                  } else {
                    // Strided: the blocking call takes the ordinary path.
                    at::Tensor wide = at::full({sizes[i], 2}, static_cast<double>(i), at::kDouble);
                    pg.sendBlocking(wide.select(1, 0), 1, tags[i]);
                  }
                }
                for (auto& w : works) w->wait();
              } else {
                std::vector<std::vector<int>> byTag(kTags);
                for (int i = 0; i < kMessages; ++i) byTag[tags[i]].push_back(i);
                std::vector<std::size_t> next(kTags, 0);
                std::mt19937 order(seed * 7919u);
                for (int received = 0; received < kMessages; ++received) {
                  int tag;
                  do {
                    tag = static_cast<int>(order() % kTags);
                  } while (next[tag] == byTag[tag].size());
                  const int i = byTag[tag][next[tag]++];
                  at::Tensor t = at::empty({sizes[i]}, at::kDouble);
                  if (order() % 2 == 0) {
                    pg.recvBlocking(t, 0, tag);
                  } else {
                    std::vector<at::Tensor> v{t};
                    pg.recv(v, 0, tag)->wait();
                  }
                  check(t.eq(static_cast<double>(i)).all().item<bool>(),
                        "message " + std::to_string(i) + " (tag " + std::to_string(tag) +
                            ") landed in its receive, seed " + std::to_string(seed));
                }
              }
              pg.barrier()->wait();
            }),
        "");
  }
}

TEST(BlockingP2P, LargeMessagesAndEmptyTensors) {
  EXPECT_EQ(runRanks(2,
                     [](commux::ProcessGroupUCX& pg, int rank, int) {
                       // No OpenMP team for the large tensors: ThreadSanitizer cannot see
                       // libgomp's synchronisation and reports its reads of this stack.
                       at::set_num_threads(1);
                       for (long n : {0L, 1L << 16, 1L << 22}) {
                         at::Tensor t =
                             rank == 0 ? at::arange(n, at::kFloat) : at::empty({n}, at::kFloat);
                         if (rank == 0) {
                           pg.sendBlocking(t, 1, 9);
                         } else {
                           pg.recvBlocking(t, 0, 9);
                           check(t.equal(at::arange(n, at::kFloat)),
                                 "large message of " + std::to_string(n));
                         }
                       }
                     }),
            "");
}

TEST(BlockingP2P, BadInputAndTimeoutsRaiseAndTheGroupGoesOn) {
  EXPECT_EQ(runRanks(2,
                     [](commux::ProcessGroupUCX& pg, int rank, int) {
                       at::Tensor t = at::zeros({4});
                       expectError([&] { pg.sendBlocking(t, 5, 0); }, "invalid destination rank 5");
                       expectError([&] { pg.recvBlocking(t, 0, -1); }, "tag must be in");
                       if (rank == 0) {
                         pg.sendBlocking(at::ones({8}), 1, 3);  // 32 bytes into a 16-byte receive
                         pg.sendBlocking(at::ones({2}), 1, 3);  // 8 bytes into a 16-byte receive
                       } else {
                         expectError([&] { pg.recvBlocking(t, 0, 3); }, "message size mismatch");
                         expectError([&] { pg.recvBlocking(t, 0, 3); },
                                     "has 8 bytes but the receive tensor holds 16");
                         const auto timeout = pg.timeout();
                         pg.setTimeout(200ms);
                         const auto start = std::chrono::steady_clock::now();
                         expectError([&] { pg.recvBlocking(t, 0, 77); }, "timed out after 200 ms");
                         check(std::chrono::steady_clock::now() - start < 2s,
                               "the timeout took its time");
                         pg.setTimeout(timeout);
                       }
                       pg.barrier()->wait();
                       // The receive that timed out is gone: a message for the same (peer, tag)
                       // meets the next.
                       if (rank == 0) {
                         pg.sendBlocking(at::full({4}, 5.0), 1, 77);
                       } else {
                         pg.recvBlocking(t, 0, 77);
                         check(t.eq(5.0).all().item<bool>(), "the group goes on after the errors");
                       }
                       pg.barrier()->wait();
                     }),
            "");
}

TEST(BlockingP2P, KilledPeerEndsABlockedReceiveNamingIt) {
  EXPECT_EQ(runRanks(3,
                     [](commux::ProcessGroupUCX& pg, int rank, int) {
                       std::vector<at::Tensor> one{at::ones({1})};
                       pg.allreduce(one)->wait();
                       if (rank == 2) {
                         std::this_thread::sleep_for(100ms);
                         ::kill(::getpid(), SIGKILL);
                       }
                       at::Tensor t = at::empty({4});
                       const auto start = std::chrono::steady_clock::now();
                       expectError([&] { pg.recvBlocking(t, 2, 1); }, "rank 2 died");
                       check(std::chrono::steady_clock::now() - start < 5s,
                             "death seen within 5 s");
                       expectError([&] { pg.sendBlocking(t, 2, 1); }, "rank 2 died");
                       if (rank == 0) {
                         pg.sendBlocking(at::full({4}, 3.0), 1, 4);
                       } else {
                         pg.recvBlocking(t, 0, 4);
                         check(t.eq(3.0).all().item<bool>(), "survivor p2p");
                       }
                     },
                     {2}),
            "");
}

TEST(BlockingP2P, AbortFromAnotherThreadEndsABlockedReceive) {
  EXPECT_EQ(runRanks(2,
                     [](commux::ProcessGroupUCX& pg, int rank, int) {
                       pg.barrier()->wait();
                       at::Tensor t = at::empty({4});
                       std::thread aborter([&] {
                         std::this_thread::sleep_for(200ms);
                         pg.abort();
                       });
                       expectError([&] { pg.recvBlocking(t, 1 - rank, 99); }, "aborted");
                       aborter.join();
                     }),
            "");
}
