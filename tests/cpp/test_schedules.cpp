// Runs every rank's schedule in a message-passing simulator and checks the data that comes
// out, for many group sizes, counts, roots and chunk sizes. A schedule that deadlocks,
// leaves a message unreceived, mismatches a size or computes a wrong result fails here.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/round_fit.hpp"
#include "collectives/schedule.hpp"
#include "collectives/selection.hpp"
#include "wire/tag.hpp"

using namespace commux::collectives;

namespace {

using Buffer = std::vector<std::int64_t>;
using Maker = std::function<Schedule(int rank)>;

struct SimResult {
  std::vector<Buffer> buffers;
  std::vector<bool> done;
  std::size_t leftoverMessages = 0;
};

struct Message {
  std::uint32_t round;  // unmasked, to check the pairing
  Buffer data;
};

/// Executes the schedules of `size` ranks. Ranks listed in `frozen` never start. With a
/// `roundWrap`, messages match on their round modulo it, as in the tag: the k-th message
/// from one rank to another with a tag meets the k-th receive with that tag (UCX's order),
/// and a pairing of different rounds fails. With `sendBuffers`, what reads Source::Send
/// reads those (the executor's send buffer).
SimResult simulate(int size, const Maker& make, std::vector<Buffer> buffers,
                   const std::vector<int>& frozen = {}, std::uint32_t roundWrap = 0,
                   const std::vector<Buffer>& sendBuffers = {}) {
  std::vector<Schedule> schedules;
  for (int r = 0; r < size; ++r) schedules.push_back(make(r));
  const std::uint32_t mask = roundWrap == 0 ? ~std::uint32_t{0} : roundWrap - 1;
  std::map<std::tuple<int, int, std::uint32_t>, std::deque<Message>> wire;  // (src,dst,tag round)
  std::vector<std::size_t> step(size, 0);
  std::vector<std::size_t> checked(size, 0);  // receives of the current step that have a message
  std::vector<std::map<std::tuple<int, int, std::uint32_t>, std::size_t>> claims(size);
  std::vector<bool> posted(size, false);
  std::vector<bool> isFrozen(size, false);
  for (int f : frozen) isFrozen[f] = true;

  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < size; ++r) {
      if (isFrozen[r] || step[r] >= schedules[r].steps.size()) continue;
      const Step& s = schedules[r].steps[step[r]];
      auto source = [&](Source from) -> const Buffer& {
        return from == Source::Send && !sendBuffers.empty() ? sendBuffers[r] : buffers[r];
      };
      if (!posted[r]) {
        // Copies first, in order, as the executor does before it posts the sends.
        for (const auto& c : s.copies) {
          const Buffer& from = source(c.source);
          EXPECT_LE(c.from + c.count, from.size()) << "copy source out of bounds, rank " << r;
          EXPECT_LE(c.to + c.count, buffers[r].size()) << "copy target out of bounds, rank " << r;
          if (c.from + c.count > from.size() || c.to + c.count > buffers[r].size()) continue;
          if (&from == &buffers[r]) {
            EXPECT_TRUE(c.from + c.count <= c.to || c.to + c.count <= c.from) << "copy overlaps itself";
          }
          std::copy(from.begin() + c.from, from.begin() + c.from + c.count, buffers[r].begin() + c.to);
        }
        const Buffer& sendFrom = source(s.sendSource);
        for (const auto& t : s.sends) {
          EXPECT_GE(t.peer, 0);
          EXPECT_LT(t.peer, size);
          EXPECT_NE(t.peer, r) << "self-send in schedule";
          EXPECT_LE(t.offset + t.count, sendFrom.size());
          wire[{r, t.peer, t.round & mask}].push_back(Message{
              t.round,
              Buffer(sendFrom.begin() + t.offset, sendFrom.begin() + t.offset + t.count)});
        }
        posted[r] = true;
        progress = true;
      }
      // Ready when every receive has its message (with a wrap, several may share a tag). A
      // message only leaves its queue for this rank, so receives found ready stay ready:
      // each is checked once (a chain's tail posts thousands in one step).
      bool ready = true;
      while (checked[r] < s.recvs.size()) {
        const Transfer& t = s.recvs[checked[r]];
        const auto key = std::make_tuple(t.peer, r, t.round & mask);
        const auto it = wire.find(key);
        std::size_t& claimed = claims[r][key];
        if (it == wire.end() || it->second.size() <= claimed) {
          ready = false;
          break;
        }
        ++claimed;
        ++checked[r];
      }
      if (!ready) continue;
      checked[r] = 0;
      claims[r].clear();
      for (const auto& t : s.recvs) {
        auto& q = wire[{t.peer, r, t.round & mask}];
        EXPECT_EQ(q.front().round, t.round)
            << "rank " << r << " took another round's message from " << t.peer;
        Buffer msg = std::move(q.front().data);
        q.pop_front();
        EXPECT_EQ(msg.size(), t.count) << "size mismatch rank " << r << " from " << t.peer;
        EXPECT_LE(t.offset + t.count, buffers[r].size());
        for (std::size_t i = 0; i < std::min(msg.size(), t.count); ++i) {
          auto& dst = buffers[r][t.offset + i];
          dst = s.recvMode == RecvMode::Reduce ? dst + msg[i] : msg[i];
        }
      }
      ++step[r];
      posted[r] = false;
      progress = true;
    }
  }
  SimResult out;
  out.buffers = std::move(buffers);
  for (int r = 0; r < size; ++r) out.done.push_back(step[r] >= schedules[r].steps.size());
  for (auto& [key, q] : wire) out.leftoverMessages += q.size();
  return out;
}

Schedule oneStepSchedule(std::vector<Transfer> sends, std::vector<Transfer> recvs) {
  Schedule s;
  s.add(Step{std::move(sends), std::move(recvs), RecvMode::Copy});
  return s;
}

Buffer input(int rank, std::size_t count) {
  Buffer b(count);
  for (std::size_t i = 0; i < count; ++i) b[i] = (rank + 1) * 1000003LL + static_cast<std::int64_t>(i) * 7;
  return b;
}

Buffer sumOfInputs(int size, std::size_t count) {
  Buffer b(count, 0);
  for (int r = 0; r < size; ++r) {
    Buffer in = input(r, count);
    for (std::size_t i = 0; i < count; ++i) b[i] += in[i];
  }
  return b;
}

const std::vector<int> kSizes = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17};
const std::vector<std::size_t> kCounts = {0, 1, 2, 3, 5, 64, 1001};

void expectAllDone(const SimResult& r) {
  for (std::size_t i = 0; i < r.done.size(); ++i) EXPECT_TRUE(r.done[i]) << "rank " << i << " stuck";
  EXPECT_EQ(r.leftoverMessages, 0u);
}

void checkAllreduce(const std::function<Schedule(int, int, std::size_t)>& algo) {
  for (int p : kSizes) {
    for (std::size_t n : kCounts) {
      std::vector<Buffer> in;
      for (int r = 0; r < p; ++r) in.push_back(input(r, n));
      auto res = simulate(p, [&](int r) { return algo(r, p, n); }, in);
      expectAllDone(res);
      const Buffer want = sumOfInputs(p, n);
      for (int r = 0; r < p; ++r) EXPECT_EQ(res.buffers[r], want) << "p=" << p << " n=" << n << " rank " << r;
    }
  }
}

}  // namespace

TEST(Schedules, BlockRangeCoversEverythingOnce) {
  for (std::size_t n : kCounts) {
    for (int p : kSizes) {
      std::size_t next = 0;
      for (int i = 0; i < p; ++i) {
        Range r = blockRange(n, p, i);
        EXPECT_EQ(r.offset, next);
        next += r.count;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(Schedules, AllreduceRecursiveDoubling) { checkAllreduce(allreduceRecursiveDoubling); }

TEST(Schedules, AllreduceRing) {
  checkAllreduce([](int r, int p, std::size_t n) { return allreduceRing(r, p, n); });
}

TEST(Schedules, AllreduceRingChunked) {
  for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{64}, std::size_t{100000}}) {
    checkAllreduce([chunk](int r, int p, std::size_t n) { return allreduceRing(r, p, n, chunk); });
  }
}

TEST(Schedules, ChunkedRingScratchIsOneChunk) {
  const Schedule s = allreduceRing(0, 4, 4000, 100);
  EXPECT_EQ(s.scratchElements, 100u);
  EXPECT_EQ(s.steps.size(), 3u * 10u + 3u);  // 10 pieces per reduce-scatter step
}

TEST(Schedules, RecursiveDoublingIsLogarithmic) {
  // 16 ranks: 4 exchange steps each; 17 ranks: at most 4 + 2 (fold and unfold).
  EXPECT_EQ(allreduceRecursiveDoubling(3, 16, 10).steps.size(), 4u);
  for (int r = 0; r < 17; ++r) EXPECT_LE(allreduceRecursiveDoubling(r, 17, 10).steps.size(), 6u);
}

TEST(Schedules, BroadcastAllRoots) {
  for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{1000}}) {
    for (int p : kSizes) {
      for (std::size_t n : kCounts) {
        for (int root = 0; root < p; ++root) {
          for (int algo = 0; algo < 2; ++algo) {
            std::vector<Buffer> in(p, Buffer(n, 0));
            in[root] = input(root, n);
            auto res = simulate(p, [&](int r) {
              return algo == 0 ? broadcastBinomial(r, p, root, n) : broadcastChain(r, p, root, n, chunk);
            }, in);
            expectAllDone(res);
            for (int r = 0; r < p; ++r) EXPECT_EQ(res.buffers[r], input(root, n)) << "algo " << algo << " p=" << p << " root " << root;
          }
        }
      }
    }
  }
}

TEST(Schedules, ReduceAllRoots) {
  for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{1000}}) {
    for (int p : kSizes) {
      for (std::size_t n : kCounts) {
        for (int root = 0; root < p; ++root) {
          for (int algo = 0; algo < 2; ++algo) {
            std::vector<Buffer> in;
            for (int r = 0; r < p; ++r) in.push_back(input(r, n));
            auto res = simulate(p, [&](int r) {
              return algo == 0 ? reduceBinomial(r, p, root, n) : reduceChain(r, p, root, n, chunk);
            }, in);
            expectAllDone(res);
            EXPECT_EQ(res.buffers[root], sumOfInputs(p, n)) << "algo " << algo << " p=" << p << " root " << root;
          }
        }
      }
    }
  }
}

TEST(Schedules, BinomialTreesAreLogarithmic) {
  // No rank, the root included, talks to more than ceil(log2 p) peers.
  for (int p : kSizes) {
    const std::size_t bound = static_cast<std::size_t>(p > 1 ? floorLog2(static_cast<std::uint64_t>(p - 1)) + 1 : 0);
    for (int r = 0; r < p; ++r) {
      EXPECT_LE(broadcastBinomial(r, p, 0, 8).peers().size(), bound + 1) << "p=" << p;
      EXPECT_LE(reduceBinomial(r, p, 0, 8).peers().size(), bound + 1) << "p=" << p;
    }
  }
}

TEST(Schedules, BarrierWaitsForEveryRank) {
  for (int p : kSizes) {
    std::vector<Buffer> empty(p);
    auto all = simulate(p, [&](int r) { return barrierDissemination(r, p); }, empty);
    expectAllDone(all);
    if (p == 1) continue;
    for (int late = 0; late < p; ++late) {
      auto res = simulate(p, [&](int r) { return barrierDissemination(r, p); }, empty, {late});
      for (int r = 0; r < p; ++r) EXPECT_FALSE(res.done[r]) << "rank " << r << " left while " << late << " was missing";
    }
  }
}

TEST(Schedules, SelectionBySize) {
  Thresholds t;
  t.allreduceRingMinBytes = 1024;
  t.chainMinBytes = 4096;
  EXPECT_STREQ(planAllreduce(0, 4, 10, 4, t).algorithm, "recursive_doubling");
  EXPECT_STREQ(planAllreduce(0, 4, 1024, 4, t).algorithm, "ring");
  EXPECT_STREQ(planAllreduce(0, 4, 2, 1024, t).algorithm, "recursive_doubling");  // fewer elements than ranks
  EXPECT_STREQ(planBroadcast(0, 4, 0, 10, 4, t).algorithm, "binomial");
  EXPECT_STREQ(planBroadcast(0, 4, 0, 4096, 4, t).algorithm, "chain");
  EXPECT_STREQ(planReduce(0, 2, 0, 1 << 20, 4, t).algorithm, "binomial");
  EXPECT_STREQ(planReduce(0, 3, 0, 1 << 20, 4, t).algorithm, "chain");
}

namespace {

std::vector<Range> unevenBlocks(int p) {
  // Block r holds r % 3 + (r == 1 ? 0 : 2) elements: some empty, all different.
  std::vector<Range> blocks;
  std::size_t offset = 0;
  for (int r = 0; r < p; ++r) {
    const std::size_t n = static_cast<std::size_t>(r % 3 + (r == 1 ? 0 : 2));
    blocks.push_back(Range{offset, n});
    offset += n;
  }
  return blocks;
}

}  // namespace

TEST(Schedules, AllgatherRingEvenAndUneven) {
  for (int p : kSizes) {
    for (int uneven = 0; uneven < 2; ++uneven) {
      const auto blocks = uneven ? unevenBlocks(p) : evenBlocks(1001, p);
      const std::size_t total = blocks.back().offset + blocks.back().count;
      // Rank r starts with only its own block filled in.
      Buffer want(total);
      std::vector<Buffer> in(p, Buffer(total, -1));
      for (int r = 0; r < p; ++r) {
        for (std::size_t i = 0; i < blocks[r].count; ++i) {
          want[blocks[r].offset + i] = in[r][blocks[r].offset + i] = r * 1000 + static_cast<std::int64_t>(i);
        }
      }
      auto res = simulate(p, [&](int r) { return allgatherRing(r, p, blocks); }, in);
      expectAllDone(res);
      for (int r = 0; r < p; ++r) EXPECT_EQ(res.buffers[r], want) << "p=" << p << " rank " << r;
    }
  }
}

TEST(Schedules, ReduceScatterRingEvenAndUneven) {
  for (int p : kSizes) {
    for (int uneven = 0; uneven < 2; ++uneven) {
      const auto blocks = uneven ? unevenBlocks(p) : evenBlocks(1001, p);
      const std::size_t total = blocks.back().offset + blocks.back().count;
      std::vector<Buffer> in;
      for (int r = 0; r < p; ++r) in.push_back(input(r, total));
      const Buffer sum = sumOfInputs(p, total);
      for (std::size_t chunk : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{5000}}) {
        auto res = simulate(
            p, [&](int r) { return reduceScatterRing(r, p, blocks, 0, chunk); }, in);
        expectAllDone(res);
        for (int r = 0; r < p; ++r) {
          for (std::size_t i = 0; i < blocks[r].count; ++i) {
            EXPECT_EQ(res.buffers[r][blocks[r].offset + i], sum[blocks[r].offset + i])
                << "p=" << p << " rank " << r << " chunk " << chunk;
          }
        }
      }
    }
  }
}

TEST(Schedules, GatherAndScatterBinomialAllRoots) {
  for (int p : kSizes) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
      for (int root = 0; root < p; ++root) {
        const std::size_t total = n * static_cast<std::size_t>(p);
        // Gather: rank r starts with only its block (relative position) filled in.
        Buffer want(total);
        std::vector<Buffer> in(p, Buffer(total, -1));
        for (int r = 0; r < p; ++r) {
          const std::size_t v = static_cast<std::size_t>((r - root + p) % p);
          for (std::size_t i = 0; i < n; ++i) want[v * n + i] = in[r][v * n + i] = r * 100 + static_cast<std::int64_t>(i);
        }
        auto g = simulate(p, [&](int r) { return gatherBinomial(r, p, root, n); }, in);
        expectAllDone(g);
        EXPECT_EQ(g.buffers[root], want) << "gather p=" << p << " root " << root;
        // Scatter: the root starts with everything, each rank must end with its block.
        std::vector<Buffer> sin(p, Buffer(total, -1));
        sin[root] = want;
        auto sc = simulate(p, [&](int r) { return scatterBinomial(r, p, root, n); }, sin);
        expectAllDone(sc);
        for (int r = 0; r < p; ++r) {
          const std::size_t v = static_cast<std::size_t>((r - root + p) % p);
          for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(sc.buffers[r][v * n + i], want[v * n + i]) << "scatter p=" << p << " root " << root << " rank " << r;
        }
        for (int r = 0; r < p; ++r) {
          EXPECT_LE(gatherBinomial(r, p, root, n).peers().size(),
                    static_cast<std::size_t>(floorLog2(static_cast<std::uint64_t>(p)) + 2));
        }
      }
    }
  }
}

TEST(Schedules, AlltoallPairwiseUnevenSplits) {
  for (int p : kSizes) {
    // Rank s sends (s + d) % 3 elements to rank d; one buffer per rank: [send | recv].
    auto amount = [](int s, int d) { return static_cast<std::size_t>((s + d) % 3); };
    std::vector<std::vector<Range>> sendBlocks(p), recvBlocks(p);
    std::vector<Buffer> in(p);
    for (int r = 0; r < p; ++r) {
      std::size_t off = 0;
      for (int d = 0; d < p; ++d) { sendBlocks[r].push_back({off, amount(r, d)}); off += amount(r, d); }
      for (int s = 0; s < p; ++s) { recvBlocks[r].push_back({off, amount(s, r)}); off += amount(s, r); }
      in[r].assign(off, -1);
      for (int d = 0; d < p; ++d)
        for (std::size_t i = 0; i < sendBlocks[r][d].count; ++i) in[r][sendBlocks[r][d].offset + i] = r * 1000 + d * 10 + static_cast<std::int64_t>(i);
    }
    auto res = simulate(p, [&](int r) { return alltoallPairwise(r, p, sendBlocks[r], recvBlocks[r]); }, in);
    expectAllDone(res);
    for (int r = 0; r < p; ++r) {
      for (int s = 0; s < p; ++s) {
        if (s == r) continue;
        for (std::size_t i = 0; i < recvBlocks[r][s].count; ++i) {
          EXPECT_EQ(res.buffers[r][recvBlocks[r][s].offset + i], s * 1000 + r * 10 + static_cast<std::int64_t>(i)) << "p=" << p;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Logarithmic algorithms for large groups (halving_doubling.cpp, issue 14): every group
// size 1..70, counts below, at and above the group size, 1,024 ranks at a few sizes and a
// spot check at 4,096 ranks. The simulator also checks that no Copy receive of a step
// overlaps another transfer of that step (the executor writes it while the sends read).

namespace {

using BlockAlgo = std::function<Schedule(int rank, int size, const std::vector<Range>& blocks)>;

std::vector<int> ranksUpTo(int last) {
  std::vector<int> out;
  for (int p = 1; p <= last; ++p) out.push_back(p);
  return out;
}

std::vector<std::size_t> countsAround(int p) {
  const auto n = static_cast<std::size_t>(p);
  return {0, 1, 3, n > 1 ? n - 1 : 2, n, n + 1, 3 * n + 2};
}

void expectNoOverlap(const Schedule& s, int rank) {
  for (const Step& step : s.steps) {
    if (step.recvMode != RecvMode::Copy) continue;
    for (std::size_t i = 0; i < step.recvs.size(); ++i) {
      const Transfer& r = step.recvs[i];
      if (r.count == 0) continue;
      auto overlaps = [&](const Transfer& t) {
        return t.count > 0 && t.offset < r.offset + r.count && r.offset < t.offset + t.count;
      };
      for (const Transfer& t : step.sends) EXPECT_FALSE(overlaps(t)) << "rank " << rank << ": receive overlaps a send";
      for (std::size_t j = i + 1; j < step.recvs.size(); ++j) EXPECT_FALSE(overlaps(step.recvs[j])) << "rank " << rank;
    }
  }
}

/// Builds every rank's schedule once, checks its rounds fit the tag and its steps do not
/// overlap, and hands the schedules to the simulator.
Maker checked(int p, const Maker& make, std::size_t maxSteps) {
  auto all = std::make_shared<std::vector<Schedule>>();
  for (int r = 0; r < p; ++r) {
    all->push_back(make(r));
    const Schedule& s = all->back();
    EXPECT_LT(maxRound(s), 1u << commux::wire::kRoundBits) << "p=" << p;
    EXPECT_LE(s.steps.size(), maxSteps) << "p=" << p << " rank " << r;
    expectNoOverlap(s, r);
  }
  return [all](int r) { return (*all)[static_cast<std::size_t>(r)]; };
}

std::size_t logSteps(int p) {  // ceil(log2 p)
  return p <= 1 ? 0 : static_cast<std::size_t>(floorLog2(static_cast<std::uint64_t>(p - 1)) + 1);
}

void checkAllgatherAt(int p, const std::vector<Range>& blocks, const BlockAlgo& algo, std::size_t maxSteps) {
  const std::size_t total = blocks.back().offset + blocks.back().count;
  Buffer want(total);
  std::vector<Buffer> in(p, Buffer(total, -1));
  for (int r = 0; r < p; ++r) {
    for (std::size_t i = 0; i < blocks[r].count; ++i) {
      want[blocks[r].offset + i] = in[r][blocks[r].offset + i] = r * 100000 + static_cast<std::int64_t>(i);
    }
  }
  auto res = simulate(p, checked(p, [&](int r) { return algo(r, p, blocks); }, maxSteps), std::move(in));
  expectAllDone(res);
  for (int r = 0; r < p; ++r) ASSERT_EQ(res.buffers[r], want) << "p=" << p << " rank " << r << " total " << total;
}

void checkReduceScatterAt(int p, const std::vector<Range>& blocks, const BlockAlgo& algo, std::size_t maxSteps) {
  const std::size_t total = blocks.back().offset + blocks.back().count;
  std::vector<Buffer> in;
  for (int r = 0; r < p; ++r) in.push_back(input(r, total));
  const Buffer sum = sumOfInputs(p, total);
  auto res = simulate(p, checked(p, [&](int r) { return algo(r, p, blocks); }, maxSteps), std::move(in));
  expectAllDone(res);
  for (int r = 0; r < p; ++r) {
    for (std::size_t i = 0; i < blocks[r].count; ++i) {
      ASSERT_EQ(res.buffers[r][blocks[r].offset + i], sum[blocks[r].offset + i])
          << "p=" << p << " rank " << r << " total " << total;
    }
  }
}

void checkAllreduceAt(int p, std::size_t n, std::size_t maxSteps) {
  std::vector<Buffer> in;
  for (int r = 0; r < p; ++r) in.push_back(input(r, n));
  auto res = simulate(p, checked(p, [&](int r) { return allreduceRabenseifner(r, p, n); }, maxSteps), std::move(in));
  expectAllDone(res);
  const Buffer want = sumOfInputs(p, n);
  for (int r = 0; r < p; ++r) ASSERT_EQ(res.buffers[r], want) << "p=" << p << " n=" << n << " rank " << r;
}

const BlockAlgo kDissemination = [](int r, int p, const std::vector<Range>& b) { return allgatherDissemination(r, p, b); };
const BlockAlgo kRecursiveDoubling = [](int r, int p, const std::vector<Range>& b) { return allgatherRecursiveDoubling(r, p, b); };
const BlockAlgo kHalving = [](int r, int p, const std::vector<Range>& b) { return reduceScatterRecursiveHalving(r, p, b); };

std::size_t foldedSteps(int p) {  // log2(pof2) + 2 if p is not a power of two
  return static_cast<std::size_t>(floorLog2(static_cast<std::uint64_t>(p))) + (isPowerOfTwo(p) ? 0 : 2);
}

}  // namespace

TEST(SchedulesAtScale, AllgatherDisseminationAnySize) {
  for (int p : ranksUpTo(70)) {
    for (std::size_t n : countsAround(p)) checkAllgatherAt(p, evenBlocks(n, p), kDissemination, logSteps(p));
    checkAllgatherAt(p, unevenBlocks(p), kDissemination, logSteps(p));
  }
}

TEST(SchedulesAtScale, AllgatherRecursiveDoublingPowersOfTwo) {
  for (int p : {1, 2, 4, 8, 16, 32, 64}) {
    for (std::size_t n : countsAround(p)) checkAllgatherAt(p, evenBlocks(n, p), kRecursiveDoubling, logSteps(p));
    checkAllgatherAt(p, unevenBlocks(p), kRecursiveDoubling, logSteps(p));
  }
  EXPECT_THROW(allgatherRecursiveDoubling(0, 6, evenBlocks(6, 6)), std::invalid_argument);
  // Blocks that are not contiguous are refused, not mis-sent.
  EXPECT_THROW(allgatherDissemination(0, 2, {Range{0, 1}, Range{2, 1}}), std::invalid_argument);
}

TEST(SchedulesAtScale, ReduceScatterRecursiveHalvingAnySize) {
  for (int p : ranksUpTo(70)) {
    for (std::size_t n : countsAround(p)) checkReduceScatterAt(p, evenBlocks(n, p), kHalving, foldedSteps(p));
    checkReduceScatterAt(p, unevenBlocks(p), kHalving, foldedSteps(p));
  }
}

TEST(SchedulesAtScale, AllreduceRabenseifnerAnySize) {
  for (int p : ranksUpTo(70)) {
    const std::size_t steps = 2 * static_cast<std::size_t>(floorLog2(static_cast<std::uint64_t>(std::max(p, 1)))) +
                              (isPowerOfTwo(p) ? 0 : 2);
    for (std::size_t n : countsAround(p)) checkAllreduceAt(p, n, steps);
    checkAllreduceAt(p, 1001, steps);
  }
}

TEST(SchedulesAtScale, ThousandRanks) {
  for (int p : {1000, 1024}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{700}, std::size_t{3 * 1024 + 5}}) {
      checkAllgatherAt(p, evenBlocks(n, p), kDissemination, 10);
      if (isPowerOfTwo(p)) checkAllgatherAt(p, evenBlocks(n, p), kRecursiveDoubling, 10);
      checkReduceScatterAt(p, evenBlocks(n, p), kHalving, foldedSteps(p));
      checkAllreduceAt(p, n, 2 * 9 + 2 + (isPowerOfTwo(p) ? 0 : 0));
    }
  }
}

TEST(SchedulesAtScale, FourThousandRanksSpotCheck) {
  const int p = 4096;
  const std::size_t n = 4096 + 3;
  checkAllgatherAt(p, evenBlocks(n, p), kRecursiveDoubling, 12);
  checkReduceScatterAt(p, evenBlocks(n, p), kHalving, 12);
  checkAllreduceAt(p, n, 24);
  checkAllgatherAt(p - 1, evenBlocks(n, p - 1), kDissemination, 12);
}

TEST(SchedulesAtScale, SelectionByBytesAndRanks) {
  Thresholds t;
  // Up to 8 ranks: today's choices.
  EXPECT_STREQ(planAllreduce(0, 4, 2, 4, t).algorithm, "recursive_doubling");
  EXPECT_STREQ(planAllreduce(0, 4, 1 << 20, 4, t).algorithm, "ring");
  EXPECT_STREQ(planAllgather(0, 8, evenBlocks(16, 8), 4, t).algorithm, "ring");
  EXPECT_STREQ(planReduceScatter(0, 8, evenBlocks(16, 8), 4, t).algorithm, "ring");
  // 1,024 ranks: logarithmic below 256 KiB per rank, the ring above.
  EXPECT_STREQ(planAllreduce(0, 1024, 2, 4, t).algorithm, "recursive_doubling");
  EXPECT_STREQ(planAllreduce(0, 1024, 16 * 1024, 4, t).algorithm, "rabenseifner");  // 64 KiB
  EXPECT_STREQ(planAllreduce(0, 1024, 16 << 20, 4, t).algorithm, "rabenseifner");   // 64 MiB
  EXPECT_STREQ(planAllreduce(0, 1024, 64 << 20, 4, t).algorithm, "ring");           // 256 MiB
  EXPECT_STREQ(planAllgather(0, 1024, evenBlocks(1024, 1024), 4, t).algorithm, "recursive_doubling");
  EXPECT_STREQ(planAllgather(0, 1000, evenBlocks(1000, 1000), 4, t).algorithm, "dissemination");
  EXPECT_STREQ(planAllgather(0, 1000, evenBlocks(1000 << 16, 1000), 4, t).algorithm, "ring");  // 256 KiB each
  EXPECT_STREQ(planReduceScatter(0, 1024, evenBlocks(1024 << 10, 1024), 4, t).algorithm, "recursive_halving");
  EXPECT_STREQ(planReduceScatter(0, 1000, evenBlocks(1000, 1000), 4, t).algorithm, "recursive_halving");
  // 64 KiB per rank at 1,000 ranks: folding 64 MB costs more than the ring's extra steps.
  EXPECT_STREQ(planReduceScatter(0, 1000, evenBlocks(1000 << 14, 1000), 4, t).algorithm, "ring");
  // Every plan's schedule is the algorithm it names (spot check at 16 ranks).
  EXPECT_EQ(planAllgather(3, 16, evenBlocks(16, 16), 4, t).schedule.steps.size(), 4u);
  EXPECT_EQ(planReduceScatter(3, 16, evenBlocks(16, 16), 4, t).schedule.steps.size(), 4u);
}

namespace {

void checkBroadcastAt(int p, int root, std::size_t n) {
  std::vector<Buffer> in(p, Buffer(n, -1));
  in[root] = input(root, n);
  const std::size_t maxSteps = 1 + 2 * logSteps(p) + 1;
  auto res = simulate(p, checked(p, [&](int r) { return broadcastScatterAllgather(r, p, root, n); }, maxSteps),
                      std::move(in));
  expectAllDone(res);
  const Buffer want = input(root, n);
  for (int r = 0; r < p; ++r) ASSERT_EQ(res.buffers[r], want) << "p=" << p << " root " << root << " n=" << n << " rank " << r;
}

}  // namespace

TEST(SchedulesAtScale, BroadcastScatterAllgatherAnySizeAndRoot) {
  for (int p : ranksUpTo(70)) {
    for (int root : {0, 1, p / 2, p - 1}) {
      if (root >= p) continue;
      for (std::size_t n : countsAround(p)) checkBroadcastAt(p, root, n);
    }
  }
  for (int root : {0, 777}) checkBroadcastAt(1000, root, 3 * 1000 + 5);
  checkBroadcastAt(1024, 5, 1024 + 3);
  checkBroadcastAt(4096, 4095, 4096 + 3);
}

TEST(SchedulesAtScale, BroadcastSelection) {
  Thresholds t;
  EXPECT_STREQ(planBroadcast(0, 4, 0, 1 << 20, 4, t).algorithm, "chain");  // today's at 4 ranks
  EXPECT_STREQ(planBroadcast(0, 1024, 0, 2, 4, t).algorithm, "binomial");
  EXPECT_STREQ(planBroadcast(0, 1024, 0, 1 << 18, 4, t).algorithm, "scatter_allgather");  // 1 MiB
  EXPECT_STREQ(planBroadcast(0, 1024, 0, 16 << 20, 4, t).algorithm, "scatter_allgather");  // 64 MiB
  EXPECT_STREQ(planBroadcast(0, 16, 0, 64 << 20, 4, t).algorithm, "chain");  // 256 MiB, 16 ranks
}

// ---------------------------------------------------------------------------------------
// Bruck's all-to-all (alltoall_bruck.cpp): every block of every rank arrives, in the two
// layouts c10d runs it in, with one message per step, at most p/2 blocks per message and
// the pack areas inside workElements; every size 1..33, a few others, 1,024 ranks and a
// spot check at 4,096.

namespace {

std::int64_t alltoallValue(int from, int to, std::size_t i) {
  return from * 1000003LL + to * 1009LL + static_cast<std::int64_t>(i);
}

/// `sendBuffer`: the input is read in place from a send buffer and the output starts at 0
/// of the work buffer (all_to_all_single's direct path); else the work buffer is
/// [input | output] (the staged path). The own block is copied beforehand, as c10d does.
void checkBruckAt(int p, std::size_t count, bool sendBuffer) {
  const std::size_t n = count * static_cast<std::size_t>(p);
  const std::size_t recvOffset = sendBuffer ? 0 : n;
  const std::size_t workspace = recvOffset + n;  // past both, as planAlltoall puts it
  const std::size_t workElements = alltoallBruck(0, p, count, 0, recvOffset, workspace).workElements;
  EXPECT_EQ(workElements, p > 1 ? workspace + alltoallBruckWorkspace(p, count) : 0);
  std::vector<Buffer> work(p, Buffer(std::max(workspace, workElements), -1));
  std::vector<Buffer> send;
  for (int r = 0; r < p; ++r) {
    Buffer in(n);
    for (int d = 0; d < p; ++d) {
      for (std::size_t i = 0; i < count; ++i) in[d * count + i] = alltoallValue(r, d, i);
    }
    std::copy(in.begin() + r * count, in.begin() + (r + 1) * count, work[r].begin() + recvOffset + r * count);
    if (sendBuffer) {
      send.push_back(std::move(in));
    } else {
      std::copy(in.begin(), in.end(), work[r].begin());
    }
  }
  const std::size_t steps = logSteps(p);
  auto make = [&](int r) {
    Schedule s = alltoallBruck(r, p, count, 0, recvOffset, workspace);
    std::size_t messages = 0;
    for (const Step& step : s.steps) {
      EXPECT_EQ(step.sends.size(), step.recvs.size());
      EXPECT_LE(step.sends.size(), 1u) << "one message per step";
      for (const Transfer& t : step.sends) {
        ++messages;
        EXPECT_LE(t.count, static_cast<std::size_t>(p / 2) * count) << "p=" << p;
        EXPECT_GE(t.offset, workspace);
        EXPECT_LE(t.offset + t.count, workElements);
      }
    }
    EXPECT_EQ(messages, steps) << "p=" << p;
    EXPECT_LE(s.steps.size(), steps + 1) << "p=" << p;  // and one of the last unpack
    EXPECT_LT(maxRound(s), std::max<std::uint32_t>(1, static_cast<std::uint32_t>(steps)));
    expectNoOverlap(s, r);
    return s;
  };
  // Not checked(): that would hold every rank's schedule twice (1.3 GB each at 4,095 ranks).
  auto res = simulate(p, make, std::move(work), {}, 0, send);
  expectAllDone(res);
  for (int r = 0; r < p; ++r) {
    for (int from = 0; from < p; ++from) {
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_EQ(res.buffers[r][recvOffset + from * count + i], alltoallValue(from, r, i))
            << "p=" << p << " count " << count << " rank " << r << " block from " << from
            << (sendBuffer ? " (send buffer)" : " (staged)");
      }
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// The round field of the tag (wire/tag.hpp) keeps rounds modulo 4,096, COMMUX_ROUND_WRAP
// lowers that to 2 for tests. Every shipped algorithm must survive any wrap: no step has two
// transfers with one peer whose rounds the field cannot tell apart (findRoundClash, which
// every launch checks), and a run that matches messages on the wrapped round pairs each
// message with its own receive (the simulator fails on a message of another round) and ends
// with what the unwrapped run ends with.

namespace {

struct Algorithm {
  const char* name;
  std::function<Schedule(int rank, int size)> make;
  std::size_t elements;  // the work buffer
};

/// Every algorithm c10d ships, for `p` ranks, `n` elements per rank and pipeline/ring
/// pieces of `chunk` elements.
std::vector<Algorithm> shippedAlgorithms(int p, std::size_t n, std::size_t chunk) {
  const std::size_t total = n * static_cast<std::size_t>(p);
  const auto even = evenBlocks(total, p);
  const int root = p / 2;
  std::vector<Algorithm> out = {
      {"allreduce recursive doubling",
       [=](int r, int s) { return allreduceRecursiveDoubling(r, s, total); }, total},
      {"allreduce ring", [=](int r, int s) { return allreduceRing(r, s, total); }, total},
      {"allreduce ring chunked", [=](int r, int s) { return allreduceRing(r, s, total, chunk); },
       total},
      {"allreduce rabenseifner", [=](int r, int s) { return allreduceRabenseifner(r, s, total); },
       total},
      {"broadcast binomial", [=](int r, int s) { return broadcastBinomial(r, s, root, total); },
       total},
      {"broadcast chain", [=](int r, int s) { return broadcastChain(r, s, root, total, chunk); },
       total},
      {"broadcast scatter allgather",
       [=](int r, int s) { return broadcastScatterAllgather(r, s, root, total); }, total},
      {"reduce binomial", [=](int r, int s) { return reduceBinomial(r, s, root, total); }, total},
      {"reduce chain", [=](int r, int s) { return reduceChain(r, s, root, total, chunk); }, total},
      {"barrier dissemination", [=](int r, int s) { return barrierDissemination(r, s); }, 0},
      {"gather binomial", [=](int r, int s) { return gatherBinomial(r, s, root, n); }, total},
      {"scatter binomial", [=](int r, int s) { return scatterBinomial(r, s, root, n); }, total},
      {"allgather ring", [=](int r, int s) { return allgatherRing(r, s, even); }, total},
      {"allgather dissemination", [=](int r, int s) { return allgatherDissemination(r, s, even); },
       total},
      {"reduce_scatter ring", [=](int r, int s) { return reduceScatterRing(r, s, even); }, total},
      {"reduce_scatter ring chunked",
       [=](int r, int s) { return reduceScatterRing(r, s, even, 0, chunk); }, total},
      {"reduce_scatter recursive halving",
       [=](int r, int s) { return reduceScatterRecursiveHalving(r, s, even); }, total},
      // All-to-all over one buffer [send blocks | receive blocks], n elements to each rank.
      {"alltoall pairwise",
       [=](int r, int s) {
         std::vector<Range> recv = evenBlocks(total, s);
         for (Range& b : recv) b.offset += total;
         return alltoallPairwise(r, s, even, recv);
       },
       2 * total},
  };
  if (isPowerOfTwo(p)) {
    out.push_back({"allgather recursive doubling",
                   [=](int r, int s) { return allgatherRecursiveDoubling(r, s, even); }, total});
  }
  return out;
}

void expectSurvivesWrap(int p, const Algorithm& a, std::uint32_t wrap) {
  SCOPED_TRACE(std::string(a.name) + ", " + std::to_string(p) + " ranks, wrap " +
               std::to_string(wrap));
  std::vector<Schedule> schedules;
  for (int r = 0; r < p; ++r) {
    schedules.push_back(a.make(r, p));
    ASSERT_EQ(findRoundClash(schedules.back(), wrap), "") << a.name << " p=" << p << " rank " << r;
  }
  const Maker cached = [&](int r) { return schedules[static_cast<std::size_t>(r)]; };
  std::vector<Buffer> in;
  for (int r = 0; r < p; ++r) in.push_back(input(r, a.elements));
  const SimResult plain = simulate(p, cached, in);
  const SimResult wrapped = simulate(p, cached, in, {}, wrap);
  expectAllDone(wrapped);
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(wrapped.buffers[r], plain.buffers[r])
        << a.name << " p=" << p << " wrap " << wrap << " rank " << r;
  }
}

}  // namespace

TEST(SchedulesAtScale, AlltoallBruckAnySize) {
  for (int p : ranksUpTo(33)) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
      checkBruckAt(p, count, true);
      checkBruckAt(p, count, false);
    }
  }
  for (int p : {47, 63, 64, 65, 100, 127, 129, 255}) checkBruckAt(p, 2, p % 2 == 1);
}

TEST(SchedulesAtScale, AlltoallBruckThousandRanks) {
  const auto start = std::chrono::steady_clock::now();
  checkBruckAt(1000, 1, true);
  checkBruckAt(1024, 2, false);
  std::printf("[ timing ] Bruck at 1,000 and 1,024 ranks: %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

TEST(SchedulesAtScale, AlltoallBruckFourThousandRanksSpotCheck) {
  const auto start = std::chrono::steady_clock::now();
  checkBruckAt(4095, 1, true);
  std::printf("[ timing ] Bruck at 4,095 ranks: %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

TEST(SchedulesAtScale, AlltoallSelection) {
  Thresholds t;
  auto blocks = [](int p, std::size_t count, std::size_t base) {
    std::vector<Range> out;
    for (int r = 0; r < p; ++r) out.push_back(Range{base + r * count, count});
    return out;
  };
  auto plan = [&](int p, std::size_t count, bool cpu = true, bool uniform = true) {
    return planAlltoall(0, p, blocks(p, count, 0), blocks(p, count, 0), 4, cpu, uniform, t);
  };
  EXPECT_STREQ(plan(8, 1).algorithm, "pairwise");  // below logAlgorithmsMinRanks
  EXPECT_STREQ(plan(16, 1).algorithm, "bruck");
  EXPECT_STREQ(plan(16, 1, false).algorithm, "pairwise");  // GPU buffers: no copies
  // Equal splits or lists here may be unequal elsewhere; every rank must choose alike.
  EXPECT_STREQ(plan(16, 1, true, false).algorithm, "pairwise");
  EXPECT_STREQ(plan(1024, 4).algorithm, "bruck");           // 16 B blocks
  EXPECT_STREQ(plan(1024, 256).algorithm, "bruck");         // 1 KiB
  EXPECT_STREQ(plan(1024, 16 * 1024).algorithm, "pairwise");  // 64 KiB
  EXPECT_STREQ(plan(16, 16 * 1024).algorithm, "pairwise");
  // Blocks of different sizes stay pairwise (Bruck would need the sizes exchanged first).
  std::vector<Range> uneven = blocks(16, 1, 0);
  uneven.back().count = 2;
  EXPECT_STREQ(planAlltoall(0, 16, uneven, uneven, 4, true, true, t).algorithm, "pairwise");
  // At 3 ranks both take two steps of one block; Bruck's copies make it dearer.
  t.logAlgorithmsMinRanks = 2;
  EXPECT_STREQ(plan(3, 1).algorithm, "pairwise");
  EXPECT_STREQ(plan(4, 1).algorithm, "bruck");
  EXPECT_STREQ(plan(5, 1).algorithm, "bruck");
  // The plan is Bruck's schedule with the pack areas past input and output.
  const Plan staged = planAlltoall(3, 16, blocks(16, 2, 0), blocks(16, 2, 32), 4, true, true, t);
  EXPECT_EQ(staged.schedule.steps.size(), 5u);
  EXPECT_EQ(staged.schedule.workElements, 64 + alltoallBruckWorkspace(16, 2));
  // The closed forms: ceil(log2 p) messages of the blocks with bit k set against p-1.
  const CostModel& m = t.model;
  const double b = 16;
  EXPECT_DOUBLE_EQ(cost::alltoallPairwise(m, 1024, b), 1023 * (m.alpha + m.gamma + m.beta * b));
  EXPECT_DOUBLE_EQ(cost::alltoallBruck(m, 1024, b),
                   10 * (m.alpha + m.gamma + 512 * b * (m.beta + 2 * m.epsilon)));
  EXPECT_EQ(alltoallBruckBlocks(5, 0), 2u);  // 1, 3
  EXPECT_EQ(alltoallBruckBlocks(5, 1), 2u);  // 2, 3
  EXPECT_EQ(alltoallBruckBlocks(5, 2), 1u);  // 4
}

TEST(RoundWrap, EveryAlgorithmSurvivesTheSmallestWraps) {
  for (int p : {2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 33}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{7}}) {
      for (const Algorithm& a : shippedAlgorithms(p, n, 2)) {
        for (std::uint32_t wrap : {2u, 4u}) expectSurvivesWrap(p, a, wrap);
      }
    }
  }
}

TEST(RoundWrap, RunsPastTheTagsRoundField) {
  // More than 4,096 rounds in one collective, matched modulo the real field.
  const std::uint32_t wrap = 1u << commux::wire::kRoundBits;
  // 3 ranks, pieces of one element: chains of 6,300 rounds, rings of 2 x 2,100 + 2.
  for (const Algorithm& a : shippedAlgorithms(3, 2100, 1)) {
    const std::string name = a.name;
    if (name == "broadcast chain" || name == "reduce chain" ||
        name.find("ring chunked") != std::string::npos) {
      expectSurvivesWrap(3, a, wrap);
    }
  }
  // A chunked ring of 65 ranks: 64 x 70 reduce-scatter rounds, then 64 allgather ones.
  for (const Algorithm& a : shippedAlgorithms(65, 70, 1)) {
    if (std::string(a.name) == "allreduce ring chunked") expectSurvivesWrap(65, a, wrap);
  }
}

TEST(RoundWrap, NoClashAtFourThousandRanks) {
  // Every algorithm at 4,095 and 4,096 ranks (rings with three pieces a block, so over
  // 16,000 rounds), seen from a sample of ranks: building every rank's ring is too slow.
  for (int p : {4095, 4096}) {
    for (const Algorithm& a : shippedAlgorithms(p, 3, 1)) {
      for (int r : {0, 1, 2, p / 2 - 1, p / 2, p / 2 + 1, p - 2, p - 1}) {
        for (std::uint32_t wrap : {2u, 4096u}) {
          EXPECT_EQ(findRoundClash(a.make(r, p), wrap), "")
              << a.name << " p=" << p << " rank " << r;
        }
      }
    }
  }
}

TEST(RoundWrap, EqualTagsOutOfRoundOrderArePairedCrosswise) {
  // Why the launch refuses such a schedule: rank 0 sends rounds 0 and 4 in one step, rank 1
  // lists its receives the other way round. Exact rounds pair them right; modulo 4 the
  // first receive takes the first message, which is the other round's.
  const Maker make = [](int r) {
    return r == 0 ? oneStepSchedule({{1, 0, 0, 1}, {1, 4, 1, 1}}, {})
                  : oneStepSchedule({}, {{0, 4, 1, 1}, {0, 0, 0, 1}});
  };
  const std::vector<Buffer> in = {{10, 20}, {0, 0}};
  EXPECT_EQ(simulate(2, make, in).buffers[1], (Buffer{10, 20}));
  EXPECT_EQ(findRoundClash(make(0), 4), "");
  EXPECT_NE(findRoundClash(make(1), 4), "");
  ::testing::TestPartResultArray failures;
  {
    const ::testing::ScopedFakeTestPartResultReporter intercept(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    EXPECT_EQ(simulate(2, make, in, {}, 4).buffers[1], (Buffer{20, 10}));
  }
  ASSERT_EQ(failures.size(), 2) << "both receives took the other round's message";
  EXPECT_NE(
      std::string(failures.GetTestPartResult(0).message()).find("took another round's message"),
      std::string::npos);
}
