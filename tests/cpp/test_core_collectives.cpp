// The core's collectives over plain buffers (group/collectives.hpp), on real ranks with no
// torch: every collective, seeded sizes, roots, types and reductions, checked against the
// values each rank computes for itself; once through the host's shared-memory channel and
// once as UCX schedules (COMMUX_SHM=0); and arguments that are wrong are refused on every
// rank before anything moves, with the group still working afterwards.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "commux/options.hpp"
#include "core/buffer.hpp"
#include "core/error.hpp"
#include "core_group_rig.hpp"
#include "fork_ranks.hpp"
#include "group/collectives.hpp"
#include "group/group.hpp"
#include "test_seed.hpp"

namespace {

using namespace commux;
using namespace std::chrono_literals;
using commux::testing::check;
using commux::testing::Folder;
using commux::testing::Member;

constexpr auto kLimit = 30s;

template <typename T>
struct TypeOf;
template <>
struct TypeOf<float> {
  static constexpr core::Dtype value = core::Dtype::Float32;
};
template <>
struct TypeOf<double> {
  static constexpr core::Dtype value = core::Dtype::Float64;
};
template <>
struct TypeOf<std::int32_t> {
  static constexpr core::Dtype value = core::Dtype::Int32;
};
template <>
struct TypeOf<std::int64_t> {
  static constexpr core::Dtype value = core::Dtype::Int64;
};

template <typename T>
core::Buffer view(std::vector<T>& values) {
  return core::bufferOf(values.data(), values.size(), TypeOf<T>::value);
}

// Small integers: every reduction of them is exact in every type here.
template <typename T>
T valueOf(int rank, std::size_t i, int salt) {
  return static_cast<T>((rank + 1) *
                        static_cast<int>((i + static_cast<std::size_t>(salt)) % 5 + 1));
}

template <typename T>
T fold(core::ReduceOp op, T a, T b) {
  switch (op) {
    case core::ReduceOp::Sum:
      return a + b;
    case core::ReduceOp::Product:
      return a * b;
    case core::ReduceOp::Min:
      return std::min(a, b);
    case core::ReduceOp::Max:
      return std::max(a, b);
    default:
      throw std::runtime_error("not a reduction of this test");
  }
}

template <typename T>
T reducedAt(core::ReduceOp op, int size, std::size_t i, int salt) {
  T acc = valueOf<T>(0, i, salt);
  for (int r = 1; r < size; ++r) acc = fold(op, acc, valueOf<T>(r, i, salt));
  return acc;
}

template <typename T>
std::vector<T> filled(int rank, std::size_t count, int salt) {
  std::vector<T> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = valueOf<T>(rank, i, salt);
  return values;
}

void finish(group::Request& request) {
  request.wait(request.timeout());
  if (auto error = request.error()) std::rethrow_exception(error);
}

template <typename T>
void expectEach(const std::vector<T>& got, const std::function<T(std::size_t)>& want,
                const std::string& what) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want(i)) {
      throw std::runtime_error(what + ": element " + std::to_string(i) + " of " +
                               std::to_string(got.size()) + " is " + std::to_string(got[i]) +
                               ", not " + std::to_string(want(i)));
    }
  }
}

// One round of every collective on elements of T, with sizes and roots drawn from `random`
// (the same draws on every rank). `path`: what the allreduce's description must name
// ("shared memory", "hierarchical"), or null for a schedule (neither).
template <typename T>
void everyCollective(group::Group& g, std::mt19937& random, const char* path) {
  const int rank = g.rank(), size = g.size();
  const auto n = static_cast<std::size_t>(size);
  const std::size_t counts[] = {0, 1, 7, random() % 1000, 1000 + random() % 100000};
  const core::ReduceOp ops[] = {core::ReduceOp::Sum, core::ReduceOp::Max, core::ReduceOp::Min,
                                core::ReduceOp::Product};
  for (const std::size_t count : counts) {
    const int salt = static_cast<int>(random() % 97);
    const core::ReduceOp op = ops[random() % 4];
    const int root = static_cast<int>(random() % n);
    const std::string at = " (" + std::to_string(count) + " x " + core::nameOf(TypeOf<T>::value) +
                           ", " + core::nameOf(op) + ", root " + std::to_string(root) + ")";

    auto values = filled<T>(rank, count, salt);
    auto request = group::allreduce(g, view(values), op, kLimit);
    const std::string ran = request->description();
    const bool named = path != nullptr ? ran.find(path) != std::string::npos
                                       : ran.find("shared memory") == std::string::npos &&
                                             ran.find("hierarchical") == std::string::npos;
    check(named, "the allreduce ran as " + ran + ", not " + (path ? path : "as a schedule"));
    finish(*request);
    expectEach<T>(
        values, [&](std::size_t i) { return reducedAt<T>(op, size, i, salt); }, "allreduce" + at);

    values = filled<T>(rank, count, salt);
    finish(*group::reduce(g, view(values), op, root, kLimit));
    expectEach<T>(
        values,
        [&](std::size_t i) {
          return rank == root ? reducedAt<T>(op, size, i, salt) : valueOf<T>(rank, i, salt);
        },
        "reduce" + at);

    values = filled<T>(rank, count, salt);
    finish(*group::broadcast(g, view(values), root, kLimit));
    expectEach<T>(
        values, [&](std::size_t i) { return valueOf<T>(root, i, salt); }, "broadcast" + at);

    // Allgather from a buffer of its own, then in place (the input is this rank's block).
    auto input = filled<T>(rank, count, salt);
    std::vector<T> gathered(count * n, T(-1));
    finish(*group::allgather(g, view(input), view(gathered), kLimit));
    const auto gatheredAt = [&](std::size_t i) {
      return valueOf<T>(static_cast<int>(i / std::max<std::size_t>(count, 1)),
                        i % std::max<std::size_t>(count, 1), salt);
    };
    expectEach<T>(gathered, gatheredAt, "allgather" + at);
    std::vector<T> inPlace(count * n, T(-1));
    std::copy(input.begin(), input.end(),
              inPlace.begin() + static_cast<std::ptrdiff_t>(count * rank));
    finish(*group::allgather(g,
                             core::bufferOf(inPlace.data() + count * rank, count, TypeOf<T>::value),
                             view(inPlace), kLimit));
    expectEach<T>(inPlace, gatheredAt, "allgather in place" + at);

    // Reduce-scatter: rank r's input holds size blocks; each rank ends with its block
    // reduced, and its input as it was.
    auto whole = filled<T>(rank, count * n, salt);
    const auto wholeBefore = whole;
    std::vector<T> mine(count, T(-1));
    finish(*group::reduceScatter(g, view(whole), view(mine), op, kLimit));
    expectEach<T>(
        mine, [&](std::size_t i) { return reducedAt<T>(op, size, count * rank + i, salt); },
        "reduce_scatter" + at);
    check(whole == wholeBefore, "reduce_scatter changed its input" + at);

    // Gather to the root, scatter from it; the output of a non-root is not looked at.
    std::vector<T> atRoot(rank == root ? count * n : 0, T(-1));
    finish(
        *group::gather(g, view(input), rank == root ? view(atRoot) : core::Buffer{}, root, kLimit));
    if (rank == root) expectEach<T>(atRoot, gatheredAt, "gather" + at);
    const auto toScatter = filled<T>(root, count * n, salt);
    auto scatterInput = toScatter;
    std::vector<T> scattered(count, T(-1));
    finish(*group::scatter(g, rank == root ? view(scatterInput) : core::Buffer{}, view(scattered),
                           root, kLimit));
    expectEach<T>(
        scattered, [&](std::size_t i) { return toScatter[count * rank + i]; }, "scatter" + at);

    // All-to-all in equal blocks, then in blocks of sizes drawn for every pair (the same
    // draws on every rank): block d of rank s's input goes to rank d.
    auto equalIn = filled<T>(rank, count * n, salt);
    std::vector<T> equalOut(count * n, T(-1));
    finish(*group::alltoall(g, view(equalIn), view(equalOut), {}, {}, kLimit));
    expectEach<T>(
        equalOut,
        [&](std::size_t i) {
          const std::size_t from = i / std::max<std::size_t>(count, 1);
          return valueOf<T>(static_cast<int>(from),
                            count * rank + i % std::max<std::size_t>(count, 1), salt);
        },
        "alltoall in equal blocks" + at);
    std::vector<std::vector<std::size_t>> pair(n, std::vector<std::size_t>(n));
    for (auto& row : pair) {
      for (auto& c : row) c = random() % (count / n + 3);
    }
    std::vector<std::size_t> sendCounts(n), recvCounts(n), sendOffset(n, 0);
    for (std::size_t d = 0; d < n; ++d) {
      sendCounts[d] = pair[rank][d];
      recvCounts[d] = pair[d][rank];
    }
    std::size_t sent = 0, wanted = 0;
    for (std::size_t d = 0; d < n; ++d) sent += sendCounts[d];
    for (std::size_t d = 0; d < n; ++d) wanted += recvCounts[d];
    auto unevenIn = filled<T>(rank, sent, salt);
    std::vector<T> unevenOut(wanted, T(-1));
    finish(*group::alltoall(g, view(unevenIn), view(unevenOut), sendCounts, recvCounts, kLimit));
    std::vector<T> expected;
    for (std::size_t from = 0; from < n; ++from) {
      std::size_t offset = 0;  // where rank `from`'s block for this rank starts in its input
      for (std::size_t d = 0; d < static_cast<std::size_t>(rank); ++d) offset += pair[from][d];
      for (std::size_t k = 0; k < pair[from][rank]; ++k) {
        expected.push_back(valueOf<T>(static_cast<int>(from), offset + k, salt));
      }
    }
    expectEach<T>(
        unevenOut, [&](std::size_t i) { return expected[i]; }, "alltoall in uneven blocks" + at);

    finish(*group::barrier(g, kLimit));
  }
}

void runEveryCollective(const char* shm, int size) {
  ::setenv("COMMUX_SHM", shm, 1);
  if (Config::get().shm != (std::string(shm) == "1")) {
    GTEST_SKIP() << "this process read COMMUX_SHM before the test set it: run it alone (ctest "
                    "runs every test in a process of its own)";
  }
  const unsigned s = commux::testing::testSeed();
  Folder folder;
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    Member me(folder.path(), rank, size);
    std::mt19937 random(s);  // the same draws on every rank
    const char* path = Config::get().shm ? "shared memory" : nullptr;
    everyCollective<float>(*me.group, random, path);
    everyCollective<std::int32_t>(*me.group, random, path);
    everyCollective<double>(*me.group, random, path);
    everyCollective<std::int64_t>(*me.group, random, path);
    // While every rank is still there: after leaveTogether a rank may see another's exit.
    check(me.group->status().healthy, "the group is not healthy: " + me.group->status().reason);
    commux::testing::leaveTogether(*me.group);
  });
  EXPECT_EQ(problems, "") << "COMMUX_TEST_SEED=" << s;
}

TEST(CoreCollectives, EveryCollectiveOverSharedMemory) { runEveryCollective("1", 3); }

TEST(CoreCollectives, EveryCollectiveAsSchedulesOverUcx) {
  // Four ranks: the power-of-two algorithms (recursive doubling, halving) are chosen too.
  runEveryCollective("0", 4);
}

// Ranks on "hosts" (COMMUX_HOST splits this machine) run every collective in parts.
// `labels`: each rank's host; `hierarchy`: COMMUX_HIERARCHY. Each rank sets both before it
// reads its settings (the test process must not read them before it forks).
void runInParts(const std::vector<std::string>& labels, const char* hierarchy) {
  const unsigned s = commux::testing::testSeed();
  Folder folder;
  const int size = static_cast<int>(labels.size());
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    ::setenv("COMMUX_SHM", "1", 1);
    ::setenv("COMMUX_HOST", labels[static_cast<std::size_t>(rank)].c_str(), 1);
    ::setenv("COMMUX_HIERARCHY", hierarchy, 1);
    check(Config::get().host == labels[static_cast<std::size_t>(rank)],
          "this rank read its settings before the test set them");
    Member me(folder.path(), rank, size);
    std::mt19937 random(s);
    everyCollective<float>(*me.group, random, "hierarchical");
    everyCollective<std::int32_t>(*me.group, random, "hierarchical");
    everyCollective<double>(*me.group, random, "hierarchical");
    check(me.group->layout() != nullptr && me.group->hosts().size() == 2,
          "the group did not find two hosts");
    check(me.group->status().healthy, "the group is not healthy: " + me.group->status().reason);
    commux::testing::leaveTogether(*me.group);
  });
  EXPECT_EQ(problems, "") << "COMMUX_TEST_SEED=" << s;
}

TEST(CoreCollectives, InPartsAcrossInterleavedHosts) {
  // Ranks not numbered host by host: the blocks cross in host order and are put back.
  runInParts({"a", "b", "a", "b"}, "leader");
}

TEST(CoreCollectives, InPartsWithEveryRankCrossingForItsBlock) {
  runInParts({"a", "a", "b", "b"}, "parallel");
}

TEST(CoreCollectives, InPartsWithARankAloneOnItsHost) {
  runInParts({"a", "a", "a", "b"}, "leader");
}

TEST(CoreCollectives, ASharedMemoryCollectiveNobodyWaitsForStillRunsAtOnce) {
  // A caller that starts a collective on the channel and only polls it (no wait) leaves its
  // lane's work to the engine's hand-off: it must not sit until the sleep's safety net
  // (100 ms). 20 rounds; the median must stay far below that, even under load.
  ::setenv("COMMUX_SHM", "1", 1);
  if (!Config::get().shm) GTEST_SKIP() << "COMMUX_SHM was read as 0 before the test set it";
  Folder folder;
  const int size = 2;
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    Member me(folder.path(), rank, size);
    std::vector<double> took;
    for (int round = 0; round < 20; ++round) {
      std::vector<float> values(64, 1.0f);
      const auto start = std::chrono::steady_clock::now();
      auto request = group::allreduce(*me.group, view(values), core::ReduceOp::Sum, kLimit);
      while (!request->done()) ::usleep(200);
      took.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      finish(*request);
      check(values == std::vector<float>(64, 2.0f), "the allreduce summed wrong");
    }
    std::sort(took.begin(), took.end());
    commux::testing::leaveTogether(*me.group);
    check(took[took.size() / 2] < 30.0,
          "a polled shared-memory allreduce took " + std::to_string(took[took.size() / 2]) +
              " ms (median of 20): its lane waited for the safety net");
  });
  EXPECT_EQ(problems, "");
}

// What the call raised, as text ("" when nothing).
std::string refusal(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::exception& e) {
    const auto error = core::readError(std::current_exception());
    if (error.kind != core::ErrorKind::InvalidArgument) {
      return std::string("not an InvalidArgument: ") + e.what();
    }
    return e.what();
  }
  return "";
}

TEST(CoreCollectives, WrongArgumentsAreRefusedBeforeAnythingMovesAndTheGroupGoesOn) {
  Folder folder;
  const int size = 2;
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    Member me(folder.path(), rank, size);
    group::Group& g = *me.group;
    std::vector<float> four(4, 1.0f), four2(4, 1.0f), seven(7, 1.0f), eight(8, 1.0f);
    std::vector<std::int32_t> ints(8, 1);
    const auto refused = [&](const char* what, const char* says,
                             const std::function<void()>& call) {
      const std::string message = refusal(call);
      check(
          message.find(says) != std::string::npos,
          std::string(what) + ": expected a refusal naming '" + says + "', got '" + message + "'");
    };
    refused("allgather into a short output", "must hold the group's size",
            [&] { group::allgather(g, view(four), view(seven), kLimit); });
    refused("reduce_scatter of a ragged input", "must hold the group's size",
            [&] { group::reduceScatter(g, view(seven), view(four), core::ReduceOp::Sum, kLimit); });
    refused("allgather across types", "must hold one type",
            [&] { group::allgather(g, view(four), view(ints), kLimit); });
    refused("a bitwise fold of floats", "is not defined on float32",
            [&] { group::allreduce(g, view(four), core::ReduceOp::BitOr, kLimit); });
    refused("a root outside the group", "root 2 is not a rank",
            [&] { group::broadcast(g, view(four), 2, kLimit); });
    refused("reduce_scatter into its own input", "overlaps the input", [&] {
      group::reduceScatter(g, view(eight),
                           core::bufferOf(eight.data() + 2, 4, core::Dtype::Float32),
                           core::ReduceOp::Sum, kLimit);
    });
    refused("allgather from inside the output but not its block", "other than as this rank's", [&] {
      group::allgather(g, core::bufferOf(eight.data() + 1, 4, core::Dtype::Float32), view(eight),
                       kLimit);
    });
    refused("an all-to-all whose counts do not add up",
            "input counts add up to more than the input's 4 elements", [&] {
              group::alltoall(g, view(four), view(four2), {2, 3}, {2, 2}, kLimit);
            });
    refused("an all-to-all that keeps more than it has room for", "sends 3 elements to itself",
            [&] {
              std::vector<std::size_t> send =
                  rank == 0 ? std::vector<std::size_t>{3, 1} : std::vector<std::size_t>{1, 3};
              group::alltoall(g, view(four), view(four2), send, {2, 2}, kLimit);
            });
    // Only a root can tell: each rank names itself the root here.
    refused("a gather whose root's output is short", "the root's output holds 7",
            [&] { group::gather(g, view(four), view(seven), rank, kLimit); });
    core::Buffer lying = view(four);
    lying.elementSize = 8;
    refused("a buffer whose element size is not its type's", "float32 has 4",
            [&] { group::allreduce(g, lying, core::ReduceOp::Sum, kLimit); });
    refused("a null buffer", "at a null address", [&] {
      group::allreduce(g, core::bufferOf(nullptr, 3, core::Dtype::Float32), core::ReduceOp::Sum,
                       kLimit);
    });
    // Nothing moved, and the ranks are still in step.
    std::vector<float> values(5, static_cast<float>(rank + 1));
    finish(*group::allreduce(g, view(values), core::ReduceOp::Sum, kLimit));
    check(values == std::vector<float>(5, 3.0f), "the allreduce after the refusals summed wrong");
    check(g.status().healthy, "a refusal hurt the group: " + g.status().reason);
    commux::testing::leaveTogether(g);
  });
  EXPECT_EQ(problems, "");
}

// COMMUX_SHM=0 and COMMUX_CHECK_COLLECTIVES=1 for this process; false when it read its
// settings before (another test ran first in it).
bool schedulesWithCallChecks() {
  ::setenv("COMMUX_SHM", "0", 1);
  ::setenv("COMMUX_CHECK_COLLECTIVES", "1", 1);
  return !Config::get().shm && Config::get().checkCollectives;
}

TEST(CoreCollectives, RanksThatCallDifferentCollectivesAreToldBeforeAnythingMoves) {
  // COMMUX_CHECK_COLLECTIVES on the schedules' path: rank 1 calls a larger allreduce than
  // the others, then a broadcast where they reduce. Every rank raises, and the group goes on.
  if (!schedulesWithCallChecks()) {
    GTEST_SKIP() << "this process read the settings before the test set them: run it alone";
  }
  Folder folder;
  const int size = 3;
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    Member me(folder.path(), rank, size);
    group::Group& g = *me.group;
    std::vector<float> values(rank == 1 ? 9 : 8, 1.0f);
    std::string said =
        refusal([&] { group::allreduce(g, view(values), core::ReduceOp::Sum, kLimit); });
    check(said.find("the ranks called different collectives (rank 0: allreduce of 8 x float32, "
                    "SUM; rank 1: allreduce of 9 x float32, SUM)") != std::string::npos,
          "a size mismatch was told as: '" + said + "'");
    std::vector<float> same(8, 1.0f);
    said = refusal([&] {
      if (rank == 1) {
        group::broadcast(g, view(same), 0, kLimit);
      } else {
        group::reduce(g, view(same), core::ReduceOp::Max, 0, kLimit);
      }
    });
    check(said.find("rank 1: broadcast of 8 x float32)") != std::string::npos,
          "a different collective was told as: '" + said + "'");
    check(same == std::vector<float>(8, 1.0f), "a refused call changed its buffer");
    // An all-to-all with counts on one rank and equal blocks on the others would be planned
    // apart (pairwise against Bruck at scale): told too.
    std::vector<float> in(6, 1.0f), out(6, 0.0f);
    said = refusal([&] {
      if (rank == 1) {
        group::alltoall(g, view(in), view(out), {2, 2, 2}, {2, 2, 2}, kLimit);
      } else {
        group::alltoall(g, view(in), view(out), {}, {}, kLimit);
      }
    });
    check(said.find("rank 1: all_to_all of float32)") != std::string::npos,
          "counts against equal blocks were told as: '" + said + "'");
    finish(*group::allreduce(g, view(same), core::ReduceOp::Sum, kLimit));
    check(same == std::vector<float>(8, 3.0f), "the allreduce after the refusals summed wrong");
    commux::testing::leaveTogether(g);
  });
  EXPECT_EQ(problems, "");
}

TEST(CoreCollectives, AllToAllCountsThatDoNotFitAreRefusedOnEveryRankAlike) {
  // COMMUX_CHECK_COLLECTIVES on the schedules' path: rank s's send count for rank d must be
  // rank d's receive count for rank s. Without the pairwise check, a block larger than its
  // room failed only its receiver ("Message truncated"), a smaller one nobody, and the
  // others waited for their timeout. Every rank is told, at once, and the group goes on.
  if (!schedulesWithCallChecks()) {
    GTEST_SKIP() << "this process read the settings before the test set them: run it alone";
  }
  Folder folder;
  const int size = 3;
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    Member me(folder.path(), rank, size);
    group::Group& g = *me.group;
    constexpr auto kLong = 45s;  // a rank left waiting would take this long
    struct Case {
      int from, to;
      std::size_t sent, expected;
    };
    // A block past its room (rank 1's receive would not fit), then one short of it (rank 2
    // would receive less than it made room for).
    for (const Case c : {Case{0, 1, 2, 1}, Case{1, 2, 1, 3}}) {
      std::vector<std::size_t> sendCounts(size, 1), recvCounts(size, 1);
      if (rank == c.from) sendCounts[static_cast<std::size_t>(c.to)] = c.sent;
      if (rank == c.to) recvCounts[static_cast<std::size_t>(c.from)] = c.expected;
      std::size_t sent = 0, room = 0;
      for (int r = 0; r < size; ++r) {
        sent += sendCounts[static_cast<std::size_t>(r)];
        room += recvCounts[static_cast<std::size_t>(r)];
      }
      auto in = filled<std::int32_t>(rank, sent, 1);
      std::vector<std::int32_t> out(room, -7);
      const auto start = std::chrono::steady_clock::now();
      const std::string said = refusal([&] {
        group::alltoall(g, view(in), view(out), sendCounts, recvCounts, kLong);
      });
      const auto took = std::chrono::steady_clock::now() - start;
      const std::string want = "rank " + std::to_string(c.from) + " sends " +
                               std::to_string(c.sent) + " elements to rank " +
                               std::to_string(c.to) + ", which expects " +
                               std::to_string(c.expected) + " from it";
      check(said.find(want) != std::string::npos,
            "counts that do not fit were told as: '" + said + "' (expected '" + want + "')");
      check(took < 15s, "the refusal took " +
                            std::to_string(std::chrono::duration<double>(took).count()) + " s");
      check(out == std::vector<std::int32_t>(room, -7), "a refused all-to-all wrote its output");
      check(g.status().healthy, "a refusal hurt the group: " + g.status().reason);
    }
    // Counts that fit, uneven: rank s sends s + d + 1 elements to rank d.
    std::vector<std::size_t> sendCounts(size), recvCounts(size);
    std::size_t sent = 0, room = 0;
    for (int d = 0; d < size; ++d) {
      sendCounts[static_cast<std::size_t>(d)] = static_cast<std::size_t>(rank + d + 1);
      recvCounts[static_cast<std::size_t>(d)] = static_cast<std::size_t>(d + rank + 1);
      sent += sendCounts[static_cast<std::size_t>(d)];
      room += recvCounts[static_cast<std::size_t>(d)];
    }
    auto in = filled<std::int32_t>(rank, sent, 2);
    std::vector<std::int32_t> out(room, -7);
    finish(*group::alltoall(g, view(in), view(out), sendCounts, recvCounts, kLimit));
    std::vector<std::int32_t> expected;
    for (int from = 0; from < size; ++from) {
      std::size_t offset = 0;  // where rank `from`'s block for this rank starts in its input
      for (int d = 0; d < rank; ++d) offset += static_cast<std::size_t>(from + d + 1);
      for (std::size_t k = 0; k < static_cast<std::size_t>(from + rank + 1); ++k) {
        expected.push_back(valueOf<std::int32_t>(from, offset + k, 2));
      }
    }
    check(out == expected, "the all-to-all after the refusals moved the wrong elements");
    std::vector<float> values(8, 1.0f);
    finish(*group::allreduce(g, view(values), core::ReduceOp::Sum, kLimit));
    check(values == std::vector<float>(8, 3.0f), "the allreduce after the refusals summed wrong");
    commux::testing::leaveTogether(g);
  });
  EXPECT_EQ(problems, "");
}

// The survivors of a death leave once each of them has checked what it had to (one that
// leaves looks dead to the others), meeting through the store's folder: a message sent
// just before its sender exits may be overtaken by the news of that exit.
void leaveTogetherWithout(const std::string& folder, int rank, int size, int dead) {
  std::fclose(std::fopen((folder + "/checked-" + std::to_string(rank)).c_str(), "w"));
  const auto deadline = std::chrono::steady_clock::now() + kLimit;
  for (int r = 0; r < size; ++r) {
    const std::string path = folder + "/checked-" + std::to_string(r);
    while (r != dead && ::access(path.c_str(), F_OK) != 0) {
      check(std::chrono::steady_clock::now() < deadline, "rank " + std::to_string(r) +
                                                             " never said it had checked");
      ::usleep(1000);
    }
  }
}

TEST(CoreCollectives, EverySurvivorOfARankKilledDuringAllreducesIsToldWhichRankDied) {
  // Over UCX (COMMUX_SHM=0) a survivor's transfer may fail with the transport's status
  // ("Input/output error") before the death watch has confirmed the death: the error, and
  // the group's status after it, must still name the dead rank (survivors need it to go on
  // without it). Rounds of a victim and a moment drawn from the seed.
  ::setenv("COMMUX_SHM", "0", 1);
  if (Config::get().shm) GTEST_SKIP() << "COMMUX_SHM was read as 1 before the test set it";
  const unsigned s = commux::testing::testSeed();
  std::mt19937 random(s);
  const int size = 4;
  for (int round = 0; round < 12; ++round) {
    const int victim = 1 + static_cast<int>(random() % (size - 1));
    const auto delay = std::chrono::microseconds(2000 + random() % 150000);
    // Large: a survivor reading the victim's block (CMA) as it dies gets UCX's
    // "Input/output error" before the death watch has seen the death.
    const std::size_t count = std::size_t{1} << (16 + random() % 7);  // 64 Ki .. 4 Mi floats
    Folder folder;
    const std::string problems = commux::testing::forkRanks(
        size,
        [&](int rank) {
          Member me(folder.path(), rank, size);
          group::Group& g = *me.group;
          std::vector<float> values(count, 1.0f);
          finish(*group::barrier(g, kLimit));
          if (rank == victim) {
            std::thread([delay] {
              std::this_thread::sleep_for(delay);
              ::raise(SIGKILL);
            }).detach();
          }
          std::string failure;  // what this survivor found wrong
          try {
            const auto start = std::chrono::steady_clock::now();
            std::string said;
            for (long calls = 0; said.empty(); ++calls) {
              std::fill(values.begin(), values.end(), 1.0f);
              try {
                finish(*group::allreduce(g, view(values), core::ReduceOp::Sum, kLimit));
              } catch (const std::exception& e) {
                said = e.what();
              }
              check(std::chrono::steady_clock::now() - start < 40s,
                    "no allreduce failed in 40 s (" + std::to_string(calls) + " calls)");
            }
            check(rank != victim, "the victim's allreduce failed before it died: " + said);
            const std::string died = "rank " + std::to_string(victim) + " died";
            check(said.find(died) != std::string::npos,
                  "an allreduce of " + std::to_string(count) +
                      " floats failed without naming the dead rank: '" + said + "'");
            const group::Group::Status status = g.status();
            check(!status.healthy && status.reason.find(died) != std::string::npos &&
                      status.deadRanks == std::vector<int>{victim},
                  "the group's status after the failure does not name rank " +
                      std::to_string(victim) + ": '" + status.reason + "'");
          } catch (const std::exception& e) {
            failure = e.what();
          }
          // Also after a failure here: the others must not wait for this rank.
          leaveTogetherWithout(folder.path(), rank, size, victim);
          // Without tearing the engine down: UCX may still hold sends to the dead rank, and
          // purging them at ucp_worker_destroy calls back into an engine half destroyed
          // (a crash at exit of its own, seen with and without the naming).
          if (!failure.empty()) std::fprintf(stderr, "rank %d: %s\n", rank, failure.c_str());
          std::fflush(nullptr);
          ::_exit(failure.empty() ? 0 : 1);
        },
        {victim});
    EXPECT_EQ(problems, "") << "round " << round << ", rank " << victim << " killed after "
                            << delay.count() << " us, " << count
                            << " floats; COMMUX_TEST_SEED=" << s;
  }
}

}  // namespace
