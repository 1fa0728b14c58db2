// The randomized stress test's C++ counterpart (tests/python/stress_job.py is the full
// one): real forked ranks over real UCX and shared memory, no Python, so the sanitizer
// builds (scripts/sanitize.sh) see the lane, the waiters and the progress thread under a
// seeded mix of operations. Every rank draws the same sequence from the seed and checks
// every result exactly. COMMUX_STRESS_SEED replays a seed, COMMUX_STRESS_OPS sets the
// length; a failure names the seed and the operation.
#include <gtest/gtest.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "commux/process_group_ucx.hpp"
#include "rank_runner.hpp"

using namespace std::chrono_literals;

namespace {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

unsigned envOr(const char* name, unsigned fallback) {
  const char* value = std::getenv(name);
  return value && *value ? static_cast<unsigned>(std::strtoul(value, nullptr, 10)) : fallback;
}

// Sizes around the thresholds that change paths: the one-step shared-memory allreduce
// (16 KiB), UCX's eager/rendezvous switch, the shared-memory slot (256 KiB per rank).
int64_t drawCount(std::mt19937& rng) {
  static const int64_t counts[] = {1, 3, 1024, 4095, 4097, 16384, 65535, 65536, 65537, 200000};
  return counts[rng() % (sizeof(counts) / sizeof(counts[0]))];
}

// A value every rank can compute for (op, rank, element): small integers, exact in float.
at::Tensor contribution(int op, int rank, int64_t n) {
  return at::arange(n, at::kFloat).remainder(7).add(static_cast<double>(op % 5 + rank));
}

struct Pending {
  WorkPtr work;
  std::function<void()> verify;
  std::string what;
};

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("wrong result: " + what);
}

void runMix(commux::ProcessGroupUCX& pg, int rank, int size, unsigned seed, int ops) {
  // ATen's OpenMP threads (large arange/equal) are not instrumented: ThreadSanitizer takes
  // their hand-offs for races. The ranks' own threads are what this test is about.
  at::set_num_threads(1);
  std::mt19937 rng(seed);  // the same draws on every rank
  std::vector<Pending> inflight;
  const auto drain = [&](std::mt19937& order) {
    // Waits in another order than issue: a later collective's waiter runs the earlier ones.
    std::shuffle(inflight.begin(), inflight.end(), order);
    for (auto& p : inflight) {
      p.work->wait();
      p.verify();
    }
    inflight.clear();
  };
  for (int op = 0; op < ops; ++op) {
    const std::string where = "seed " + std::to_string(seed) + " (replay: COMMUX_STRESS_SEED=" +
                              std::to_string(seed) + ") op " + std::to_string(op);
    const int kind = static_cast<int>(rng() % 6);
    const int64_t n = drawCount(rng);
    const bool async = rng() % 2 == 0;
    Pending p;
    switch (kind) {
      case 0: {  // allreduce, sum of every rank's contribution
        std::vector<at::Tensor> t{contribution(op, rank, n)};
        at::Tensor expect = at::zeros({n}, at::kFloat);
        for (int r = 0; r < size; ++r) expect.add_(contribution(op, r, n));
        p.work = pg.allreduce(t);
        p.verify = [t, expect, where] { check(t[0].equal(expect), "allreduce, " + where); };
        break;
      }
      case 1: {  // broadcast from a random root
        const int root = static_cast<int>(rng() % size);
        std::vector<at::Tensor> t{rank == root ? contribution(op, root, n) : at::zeros({n})};
        c10d::BroadcastOptions opts;
        opts.rootRank = root;
        p.work = pg.broadcast(t, opts);
        p.verify = [t, op, root, n, where] {
          check(t[0].equal(contribution(op, root, n)), "broadcast, " + where);
        };
        break;
      }
      case 2: {  // allgather
        const int64_t m = std::max<int64_t>(1, n / size);
        std::vector<at::Tensor> in{contribution(op, rank, m)};
        std::vector<std::vector<at::Tensor>> out(1);
        for (int r = 0; r < size; ++r) out[0].push_back(at::empty({m}));
        p.work = pg.allgather(out, in);
        p.verify = [out, op, m, where] {
          for (std::size_t r = 0; r < out[0].size(); ++r) {
            check(out[0][r].equal(contribution(op, static_cast<int>(r), m)), "allgather, " + where);
          }
        };
        break;
      }
      case 3: {  // reduce_scatter
        const int64_t m = std::max<int64_t>(1, n / size);
        std::vector<at::Tensor> out{at::empty({m})};
        std::vector<std::vector<at::Tensor>> in(1);
        for (int r = 0; r < size; ++r) in[0].push_back(contribution(op + r, rank, m));
        at::Tensor expect = at::zeros({m});
        for (int q = 0; q < size; ++q) expect.add_(contribution(op + rank, q, m));
        p.work = pg.reduce_scatter(out, in);
        p.verify = [out, expect, where] { check(out[0].equal(expect), "reduce_scatter, " + where); };
        break;
      }
      case 4: {  // tagged messages around the ring, receives posted in reverse order
        const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
        std::vector<std::vector<at::Tensor>> in(3), out(3);
        std::vector<WorkPtr> works;
        for (int tag = 2; tag >= 0; --tag) {
          in[tag] = {at::empty({n})};
          works.push_back(pg.recv(in[tag], prev, 100 + tag));
        }
        for (int tag = 0; tag < 3; ++tag) {
          out[tag] = {contribution(op + tag, rank, n)};
          works.push_back(pg.send(out[tag], next, 100 + tag));
        }
        for (auto& w : works) w->wait();
        for (int tag = 0; tag < 3; ++tag) {
          check(in[tag][0].equal(contribution(op + tag, prev, n)), "p2p tag " + std::to_string(tag) + ", " + where);
        }
        continue;
      }
      default: {  // a receive nobody sends times out; the group goes on
        std::vector<at::Tensor> t{at::empty({1})};
        try {
          pg.recv(t, (rank + 1) % size, 999)->wait(20ms);
          check(false, "a receive nobody sends completed, " + where);
        } catch (const std::exception& e) {
          check(std::string(e.what()).find("Timed out") != std::string::npos,
                std::string("timeout message: ") + e.what());
        }
        continue;
      }
    }
    p.what = where;
    inflight.push_back(std::move(p));
    if (!async || inflight.size() >= 4) drain(rng);
  }
  drain(rng);
  pg.barrier()->wait();
}

class StressRanks : public ::testing::TestWithParam<int> {};

TEST_P(StressRanks, SeededMixesGiveExactResults) {
  const unsigned seed = envOr("COMMUX_STRESS_SEED", std::random_device{}());
  const int ops = static_cast<int>(envOr("COMMUX_STRESS_OPS", 150));
  std::printf("seed %u, %d operations, %d ranks\n", seed, ops, GetParam());
  // The seed is in every rank's error (runMix) and here, for a replay.
  EXPECT_EQ(commux::testing::runRanks(
                GetParam(),
                [&](commux::ProcessGroupUCX& pg, int rank, int size) {
                  runMix(pg, rank, size, seed, ops);
                },
                {}, 100),  // within ctest's 120 s, so no rank outlives the test
            "")
      << "replay: COMMUX_STRESS_SEED=" << seed << " COMMUX_STRESS_OPS=" << ops;
}

INSTANTIATE_TEST_SUITE_P(Sizes, StressRanks, ::testing::Values(2, 3));

}  // namespace
