// The core's persistent neighbourhood exchange on real ranks (forked processes, no torch):
// every rank swaps a message with every rank (itself too), sender and receiver cutting it
// into different pieces at random places of their memory, packed or as iovs, several steps
// in a row; a bad plan is refused before anything moves (sizes that wrap included); a dead
// neighbour ends the step with an error that names it; a step that ends by itself copies
// this rank's own message only once it is marked ready.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core_group_rig.hpp"
#include "fork_ranks.hpp"
#include "group/group.hpp"
#include "halo/cart_plan.hpp"
#include "halo/cart_topology.hpp"
#include "halo/face_runs.hpp"
#include "halo/neighbour_exchange.hpp"
#include "halo/row_copy.hpp"
#include "halo/shared_sides.hpp"
#include "shm/steps.hpp"
#include "shm/channel.hpp"
#include "test_seed.hpp"

namespace {

using namespace commux;
using namespace std::chrono_literals;
using commux::testing::check;
using commux::testing::Folder;
using commux::testing::Member;

// A message of `bytes` cut into random pieces, laid out with random gaps in `memory`.
std::vector<halo::Piece> cut(std::mt19937& random, std::vector<std::uint8_t>& memory,
                             std::size_t bytes) {
  std::vector<std::size_t> sizes;
  // A third of the messages in long pieces (rows a neighbour on the host reads where they
  // lie), the rest mostly short (a column: packed, or staged in shared memory).
  const bool rows = random() % 3 == 0;
  for (std::size_t left = bytes; left > 0;) {
    const std::size_t n = std::min<std::size_t>(
        left, rows                ? 4096 + random() % 12288
              : random() % 4 == 0 ? 1 + random() % 4096
                                  : 1 + random() % 16);
    sizes.push_back(n);
    left -= n;
  }
  if (random() % 3 == 0) sizes.insert(sizes.begin() + random() % (sizes.size() + 1), 0);
  memory.assign(bytes + 8 * sizes.size() + 8, 0);
  std::vector<halo::Piece> pieces;
  std::size_t at = random() % 8;
  for (std::size_t n : sizes) {
    pieces.push_back({memory.data() + at, n});
    at += n + random() % 8;
  }
  return pieces;
}

std::uint8_t byteOf(int from, int to, int step, std::size_t i) {
  return static_cast<std::uint8_t>(from * 37 + to * 11 + step * 5 + i * 13);
}

// A plan with every rank of `size` (this one too), each message cut at random places of
// `out` / `in`, of the sizes `bytesOf(from, to)` says.
template <typename BytesOf>
std::vector<halo::NeighbourMessages> randomPlan(std::mt19937& random, int rank, int size,
                                                std::vector<std::vector<std::uint8_t>>& out,
                                                std::vector<std::vector<std::uint8_t>>& in,
                                                BytesOf&& bytesOf) {
  out.assign(static_cast<std::size_t>(size), {});
  in.assign(static_cast<std::size_t>(size), {});
  std::vector<halo::NeighbourMessages> plan;
  for (int peer = 0; peer < size; ++peer) {
    halo::NeighbourMessages n;
    n.rank = peer;
    n.sends = n.receives = true;
    n.send = cut(random, out[peer], bytesOf(rank, peer));
    n.recv = cut(random, in[peer], bytesOf(peer, rank));
    plan.push_back(std::move(n));
  }
  return plan;
}

// Step `step`'s bytes into every message this rank sends.
void fillSends(const std::vector<halo::NeighbourMessages>& plan, int rank, int step) {
  for (const auto& n : plan) {
    std::size_t i = 0;
    for (const auto& p : n.send) {
      for (std::size_t k = 0; k < p.bytes; ++k, ++i) {
        static_cast<std::uint8_t*>(p.data)[k] = byteOf(rank, n.rank, step, i);
      }
    }
  }
}

// The first wrong byte received in step `step`, described; empty when all are right.
std::string wrongReceived(const std::vector<halo::NeighbourMessages>& plan, int rank, int step) {
  for (const auto& n : plan) {
    std::size_t i = 0;
    for (const auto& p : n.recv) {
      for (std::size_t k = 0; k < p.bytes; ++k, ++i) {
        if (static_cast<std::uint8_t*>(p.data)[k] != byteOf(n.rank, rank, step, i)) {
          return "rank " + std::to_string(rank) + " step " + std::to_string(step) + ": byte " +
                 std::to_string(i) + " from rank " + std::to_string(n.rank) + " is wrong";
        }
      }
    }
  }
  return "";
}

TEST(NeighbourExchange, RowsOfMergesEvenlySpacedPiecesOnly) {
  std::vector<char> m(1000);
  char* b = m.data();
  const auto rows = halo::rowsOf({{b, 8},
                                  {b + 40, 8},
                                  {b + 80, 8},
                                  {b + 100, 0},
                                  {b + 120, 8},
                                  {b + 200, 8},
                                  {b + 210, 4},
                                  {b + 300, 4}});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].data, b);
  EXPECT_EQ(rows[0].count, 4u);  // 0, 40, 80, 120: the empty piece between drops out
  EXPECT_EQ(rows[0].stride, 40);
  EXPECT_EQ(rows[1].data, b + 200);  // 200 is not 160: a new run
  EXPECT_EQ(rows[1].count, 1u);
  EXPECT_EQ(rows[2].count, 2u);  // 4 bytes at 210 and 300
  EXPECT_EQ(rows[2].stride, 90);
}

// The kind of error `call` raises when its message holds `says`; Internal (never raised
// here) when it raises nothing or says something else (printed: a forked rank's gtest
// failures would be lost).
template <typename Call>
core::ErrorKind raisedKind(Call&& call, const std::string& says = "") {
  try {
    call();
  } catch (const core::Error& e) {
    if (std::string(e.what()).find(says) != std::string::npos) return e.kind();
    std::fprintf(stderr, "the error '%s' does not say '%s'\n", e.what(), says.c_str());
  }
  return core::ErrorKind::Internal;
}

TEST(NeighbourExchange, RowsOfKeepsFarApartPiecesApartWithoutWrapping) {
  // Addresses are only compared, never dereferenced: a stride times a count that would wrap
  // 64 bits starts a new run instead of matching a piece far away (issue 59).
  const auto at = [](std::uintptr_t address) { return reinterpret_cast<void*>(address); };
  const std::uintptr_t high = std::uintptr_t{1} << 62;
  const auto rows = halo::rowsOf({{at(16), 8}, {at(16 + high), 8}, {at(16 + 2 * high), 8},
                                  {at(16 + 3 * high), 8}});
  std::size_t pieces = 0;
  for (const auto& r : rows) pieces += r.count;
  EXPECT_EQ(pieces, 4u);
  for (const auto& r : rows) {
    for (std::size_t k = 0; k < r.count; ++k) {
      const auto address = reinterpret_cast<std::uintptr_t>(r.data) +
                           static_cast<std::uintptr_t>(r.stride) * k;
      EXPECT_EQ((address - 16) % high, 0u) << "a row that is no piece";
    }
  }
}

TEST(NeighbourExchange, HaloSizesThatWrapAreRefused) {
  // Widths near 2^63: checkHalo must not compute 2w or 3w (signed overflow), only refuse.
  const std::int64_t huge = std::int64_t{1} << 62;
  EXPECT_EQ(raisedKind([&] { halo::checkHalo({10}, {huge + 5}); }, "narrower than the halo"),
            core::ErrorKind::InvalidArgument);
  EXPECT_EQ(raisedKind([&] { halo::checkHalo({10}, {INT64_MAX}); }, "narrower than the halo"),
            core::ErrorKind::InvalidArgument);
  EXPECT_EQ(raisedKind([&] { halo::checkHalo({INT64_MAX}, {INT64_MAX / 3}); }),
            core::ErrorKind::Internal);  // fits: refused nothing
  // A box whose cells' count, or last offset, does not fit 64 bits.
  halo::Box big{{0, 0}, {huge, 8}};
  EXPECT_EQ(raisedKind([&] { big.cells(); }), core::ErrorKind::InvalidArgument);
  halo::Box empty{{0, 0, 0}, {huge, huge, 0}};
  EXPECT_EQ(empty.cells(), 0);
  halo::Box far{{huge}, {4}};
  EXPECT_EQ(raisedKind([&] { halo::contiguousRuns(far, {8}); }),
            core::ErrorKind::InvalidArgument);
  // A Cartesian plan whose shape's strides wrap, an empty dimension first (the cells' count
  // is 0, the strides are still products of the others).
  const halo::CartTopology grid({1}, {true}, false);
  std::vector<char> memory(64);
  const std::vector<halo::Field> fields{{memory.data(), 8}};
  EXPECT_EQ(raisedKind([&] { halo::cartMessages(grid, 0, {0, huge, huge}, {0}, fields); },
                       "more cells than memory"),
            core::ErrorKind::InvalidArgument);
}

// Pieces whose sizes a caller gave unchecked (the C API's commuxPiece.bytes): a sum that
// wrapped (2^63 + (2^63 + 8) = 8) sized an 8-byte staging buffer that the first start()
// overran. Every such plan is refused, InvalidArgument, before anything is allocated.
TEST(NeighbourExchange, PieceSizesThatWrapAreRefusedBeforeAnythingIsAllocated) {
  Folder folder;
  const int size = 2;
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    Member me(folder.path(), rank, size);
    group::Group& g = *me.group;
    std::vector<std::uint8_t> memory(64);
    const std::size_t half = std::size_t{1} << 63;
    const auto plan = [&](int peer, std::vector<halo::Piece> send, std::vector<halo::Piece> recv) {
      halo::NeighbourMessages n;
      n.rank = peer;
      n.sends = n.receives = true;
      n.send = std::move(send);
      n.recv = std::move(recv);
      std::vector<halo::NeighbourMessages> out;
      out.push_back(std::move(n));
      return out;
    };
    const auto refusedAs = [&](std::vector<halo::NeighbourMessages> p, const std::string& says) {
      return raisedKind([&] { halo::NeighbourExchange ex(g, std::move(p), 1, 20s); }, says) ==
             core::ErrorKind::InvalidArgument;
    };
    const int other = 1 - rank;
    const halo::Piece eight{memory.data(), 8};
    // The pieces, sent and received, to another rank (packed: short on average)
    // and to this rank itself (its own copy: 8 bytes "fill" 8 bytes).
    check(refusedAs(plan(other, {{memory.data(), half}, {memory.data(), half + 8}}, {eight}),
                    "add up to more than"),
          "pieces of 2^63 and 2^63 + 8 bytes to send were not refused");
    check(refusedAs(plan(other, {eight}, {{memory.data(), half}, {memory.data(), half + 8}}),
                    "add up to more than"),
          "pieces of 2^63 and 2^63 + 8 bytes to receive were not refused");
    check(refusedAs(plan(rank, {{memory.data(), half}, {memory.data(), half + 8}}, {eight}),
                    "add up to more than"),
          "pieces of 2^63 and 2^63 + 8 bytes to this rank itself were not refused");
    // A sum that fits 64 bits but no object: past PTRDIFF_MAX, strides and offsets wrap.
    const std::size_t quarter = std::size_t{1} << 62;
    check(refusedAs(plan(other, {eight}, {{memory.data(), quarter}, {memory.data(), quarter}}),
                    "add up to more than"),
          "pieces of 2^63 bytes in all were not refused");
    // One piece that runs past the end of the address space.
    const auto top = reinterpret_cast<void*>(~std::uintptr_t{0} - 15);
    check(refusedAs(plan(other, {{top, 32}}, {eight}), "past the end of memory"),
          "a piece past the end of memory was not refused");
    // Right at the limits the plan is taken (nothing moves here: no step is started).
    halo::NeighbourExchange fine(g, plan(other, {eight, eight}, {{memory.data(), 16}}), 2, 20s);
    commux::testing::leaveTogether(g);
  });
  EXPECT_EQ(problems, "");
}

// Partitioned steps that end by themselves (a future's way) with this rank its own
// neighbour: its own message is copied only once it is marked ready, and the step does
// not end before (issue 59: at 1 rank finishWhenDone() itself copied it; with more, the
// step ended once the others' messages were in, copying faces not computed yet).
TEST(NeighbourExchange, AStepThatEndsByItselfCopiesItsOwnMessageOnlyOnceReady) {
  for (const int size : {1, 2}) {
    Folder folder;
    const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
      Member me(folder.path(), rank, size);
      group::Group& g = *me.group;
      std::vector<std::vector<std::uint8_t>> out(static_cast<std::size_t>(size),
                                                 std::vector<std::uint8_t>(48)),
          in = out;
      std::vector<halo::NeighbourMessages> plan;
      for (int peer = 0; peer < size; ++peer) {
        auto& o = out[static_cast<std::size_t>(peer)];
        auto& i = in[static_cast<std::size_t>(peer)];
        halo::NeighbourMessages n;
        n.rank = peer;
        n.sends = n.receives = true;
        n.send = {{o.data(), 16}, {o.data() + 24, 16}};  // two rows: copied row by row
        n.recv = {{i.data(), 16}, {i.data() + 24, 16}};
        plan.push_back(std::move(n));
      }
      const auto pieces = plan;
      // Before the exchange: a failed check destroys it, which ends the step through the
      // callback that writes these.
      std::atomic<int> calls{0};
      std::atomic<bool> good{false};
      halo::NeighbourExchange ex(g, std::move(plan), 79, 20s);
      const auto where = [&](int step) {
        return "size " + std::to_string(size) + " rank " + std::to_string(rank) + " step " +
               std::to_string(step);
      };
      for (int step = 0; step < 4; ++step) {
        fillSends(pieces, rank, 2 * step);  // the old values: the own faces not computed
        for (auto& i : in) std::fill(i.begin(), i.end(), 0);
        calls = 0;
        good = false;
        ex.startReceives();
        ex.finishWhenDone([&](std::exception_ptr error) {
          good = error == nullptr;
          ++calls;
        });
        for (int peer = 0; peer < size; ++peer) {
          if (peer != rank) ex.ready(peer);
        }
        // Long enough for the others' messages to be in: the step must wait all the same.
        std::this_thread::sleep_for(200ms);
        check(calls.load() == 0 && ex.inFlight(),
              where(step) + ": the step ended before this rank's own message was ready");
        check(std::all_of(in[static_cast<std::size_t>(rank)].begin(),
                          in[static_cast<std::size_t>(rank)].end(),
                          [](std::uint8_t b) { return b == 0; }),
              where(step) + ": this rank's own message was copied before it was ready");
        // "Computed" now: the own message's new values, then marked ready (twice: harmless).
        fillSends({pieces[static_cast<std::size_t>(rank)]}, rank, 2 * step + 1);
        ex.ready(rank);
        ex.ready(rank);
        const auto deadline = std::chrono::steady_clock::now() + 20s;
        while (calls.load() == 0 && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(50us);
        }
        check(calls.load() == 1 && good.load(), where(step) + ": the step did not end well");
        const auto& own = pieces[static_cast<std::size_t>(rank)];
        check(wrongReceived({own}, rank, 2 * step + 1).empty(),
              where(step) + ": the own message's ghost bytes hold the old values");
        for (int peer = 0; peer < size; ++peer) {
          if (peer == rank) continue;
          check(wrongReceived({pieces[static_cast<std::size_t>(peer)]}, rank, 2 * step).empty(),
                where(step) + ": rank " + std::to_string(peer) + "'s bytes are wrong");
        }
        ex.wait();  // its outcome, after the end
      }
      // wait() still sends (copies) the own message that was never marked ready.
      fillSends(pieces, rank, 9);
      ex.startReceives();
      ex.wait();
      check(wrongReceived(pieces, rank, 9).empty(), "wait() did not copy the own message");
      commux::testing::leaveTogether(g);
    });
    EXPECT_EQ(problems, "") << "size " << size;
  }
}

TEST(NeighbourExchange, EveryRankGetsItsNeighboursBytesPackedOrAsTheyLie) {
  const unsigned s = commux::testing::testSeed();
  Folder folder;
  const int size = 3;
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    Member me(folder.path(), rank, size);
    group::Group& g = *me.group;
    std::mt19937 mine(s * 7 + static_cast<unsigned>(rank));
    const auto bytesOf = [&](int from, int to) {
      std::mt19937 pair(s ^ static_cast<unsigned>(from * 131 + to));
      return static_cast<std::size_t>(pair() % 3 == 0 ? pair() % 64 : pair() % 70000);
    };
    // COMMUX_SHM=0 (the suite runs again so) has no channel; Yama may keep ranks apart.
    const auto channel = g.channel();
    const bool sharedHere =
        channel && channel->shape().cma[shm::CmaUse::Neighbours].from != 0;
    for (const std::size_t packBelow :
         {std::size_t{0}, halo::kDefaultPackBelow, std::size_t{1} << 40}) {
      std::vector<std::vector<std::uint8_t>> out, in;
      auto plan = randomPlan(mine, rank, size, out, in, bytesOf);
      const auto pieces = plan;  // the exchange takes its plan
      halo::NeighbourExchange ex(g, std::move(plan), 77, 20s, packBelow);
      for (int step = 0; step < 3; ++step) {
        fillSends(pieces, rank, step);
        if (step == 1) {
          // Partitioned: receives first, then messages one by one as they are "computed"
          // (a random subset, in a random order); wait() sends the rest.
          ex.startReceives();
          std::vector<int> order(size);
          for (int r = 0; r < size; ++r) order[r] = r;
          std::shuffle(order.begin(), order.end(), mine);
          for (int r : order) {
            if (mine() % 3 != 0) ex.ready(r);
          }
        } else {
          ex.start();
        }
        check(ex.inFlight(), "no step in flight after start()");
        ex.wait();
        const std::string wrong = wrongReceived(pieces, rank, step);
        check(wrong.empty(), wrong + " (pack below " + std::to_string(packBelow) + ")");
        // From the second step on, the other ranks' messages go through shared memory
        // where the host lets its ranks read each other (the first step greets them).
        for (std::size_t i = 0; i < pieces.size(); ++i) {
          const bool other = pieces[i].rank != rank;
          const bool sends = other && bytesOf(rank, pieces[i].rank) != 0;
          const bool receives = other && bytesOf(pieces[i].rank, rank) != 0;
          check(ex.sendsShared(i) == (sharedHere && sends && step > 0) &&
                    ex.receivesShared(i) == (sharedHere && receives && step > 0),
                "rank " + std::to_string(rank) + " step " + std::to_string(step) +
                    ": neighbour " + std::to_string(pieces[i].rank) + " goes " +
                    (ex.sendsShared(i) ? "shared" : "through UCX"));
        }
      }
    }
    commux::testing::leaveTogether(g);
  });
  EXPECT_EQ(problems, "") << "COMMUX_TEST_SEED=" << s;
}

// A step finished where it ends (finishWhenDone, a future's way): the callback runs once,
// with nobody in wait(), after the ghost bytes are written (packed ones unpacked, this
// rank's own copied), and the step is closed by then; also when the sends go by ready()
// after it was asked, and when wait() is called anyway.
TEST(NeighbourExchange, AStepFinishesWhereItEndsWithoutWait) {
  const unsigned s = commux::testing::testSeed();
  Folder folder;
  const int size = 3;
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    Member me(folder.path(), rank, size);
    group::Group& g = *me.group;
    std::mt19937 mine(s * 11 + static_cast<unsigned>(rank));
    std::vector<std::vector<std::uint8_t>> out, in;
    auto plan = randomPlan(mine, rank, size, out, in, [](int, int) { return std::size_t{3000}; });
    const auto pieces = plan;
    halo::NeighbourExchange ex(g, std::move(plan), 78, 20s);
    const auto fill = [&](int step) { fillSends(pieces, rank, step); };
    const auto arrived = [&](int step) { return wrongReceived(pieces, rank, step).empty(); };
    for (int step = 0; step < 6; ++step) {
      fill(step);
      std::atomic<int> calls{0};
      std::atomic<bool> good{false};
      const auto done = [&](std::exception_ptr error) {
        // Checked here, before anyone waits: the callback sees the finished step.
        good = error == nullptr && arrived(step) && !ex.inFlight();
        ++calls;
      };
      const int way = step % 3;
      if (way == 1) {  // partitioned: asked first, then every message by ready()
        ex.startReceives();
        ex.finishWhenDone(done);
        for (int peer = 0; peer < size; ++peer) ex.ready(peer);
      } else {
        ex.start();
        ex.finishWhenDone(done);
      }
      if (way == 2) ex.wait();  // wait() anyway: it waits for the finishing, which runs once
      const auto deadline = std::chrono::steady_clock::now() + 20s;
      while (calls.load() == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(50us);
      }
      check(calls.load() == 1, "rank " + std::to_string(rank) + " step " + std::to_string(step) +
                                   ": the callback ran " + std::to_string(calls.load()) +
                                   " times (seed " + std::to_string(s) + ")");
      check(good.load(), "rank " + std::to_string(rank) + " step " + std::to_string(step) +
                             ": the callback saw an error, wrong bytes or the step open");
      ex.wait();  // after the step ended: its outcome (none), nothing posted
      check(!ex.inFlight() && calls.load() == 1, "wait() after the end reopened the step");
    }
    // Polled (MPI_Test's way): the bytes are there when test() says so, before any wait.
    for (int step = 6; step < 8; ++step) {
      fill(step);
      if (step == 6) {
        ex.start();
      } else {  // partitioned: test() sends what was not marked ready
        ex.startReceives();
        ex.ready((rank + 1) % size);
      }
      const auto deadline = std::chrono::steady_clock::now() + 20s;
      bool ended = false;
      while (!(ended = ex.test()) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(20us);
      }
      check(ended && arrived(step) && !ex.inFlight(),
            "rank " + std::to_string(rank) + " step " + std::to_string(step) +
                ": test() never said the step ended, or it said so before the bytes were there");
      check(ex.test(), "test() after the end did not say ended");
    }
    // Chained: each step's callback checks it and starts the next (on whichever thread
    // ends it); this thread touches the exchange only once the chain is over.
    const int last = 12;
    std::atomic<int> reached{8};
    std::atomic<bool> chainGood{true};
    std::function<void(std::exception_ptr)> next = [&](std::exception_ptr error) {
      const int step = reached.load();
      if (error || !arrived(step)) chainGood = false;
      if (step + 1 < last && chainGood) {
        fill(step + 1);
        reached = step + 1;
        ex.start();
        ex.finishWhenDone(next);
      } else {
        reached = last;
      }
    };
    fill(8);
    ex.start();
    const auto first = ex.finishWhenDone(next);
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (reached.load() < last && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(50us);
    }
    check(reached.load() == last && chainGood.load(),
          "rank " + std::to_string(rank) + ": the chain of steps stopped at " +
              std::to_string(reached.load()) + (chainGood.load() ? "" : " with wrong bytes"));
    ex.waitStep(first);  // long over: its outcome, the exchange's later steps untouched
    ex.wait();
    commux::testing::leaveTogether(g);
  });
  EXPECT_EQ(problems, "") << "COMMUX_TEST_SEED=" << s;
}

std::string refusal(group::Group& g, std::vector<halo::NeighbourMessages> plan) {
  try {
    halo::NeighbourExchange ex(g, std::move(plan), 1, 20s);
  } catch (const core::Error& e) {
    return e.kind() == core::ErrorKind::InvalidArgument ? e.what() : "";
  }
  return "";
}

TEST(NeighbourExchange, BadPlansAreRefusedAndADeadNeighbourEndsTheStep) {
  Folder folder;
  const int size = 3;
  const int victim = 2;
  const std::string problems = commux::testing::forkRanks(
      size,
      [&](int rank) {
        Member me(folder.path(), rank, size);
        group::Group& g = *me.group;
        std::vector<std::uint8_t> a(64), b(64);
        const auto message = [&](int peer, std::size_t sent, std::size_t received) {
          halo::NeighbourMessages n;
          n.rank = peer;
          n.sends = n.receives = true;
          n.send = {{a.data(), sent}};
          n.recv = {{b.data(), received}};
          return n;
        };
        check(refusal(g, {message(3, 8, 8)}).find("not a rank") != std::string::npos,
              "a neighbour outside the group was not refused");
        check(refusal(g, {message(1, 8, 8), message(1, 8, 8)}).find("twice") != std::string::npos,
              "a neighbour named twice was not refused");
        check(refusal(g, {message(rank, 8, 16)}).find("own neighbour") != std::string::npos,
              "an own message that does not fill its receive was not refused");
        // Every rank swaps 64 bytes with every other once, so all have met.
        std::vector<halo::NeighbourMessages> all;
        for (int peer = 0; peer < size; ++peer) {
          if (peer != rank) all.push_back(message(peer, 64, 64));
        }
        // Then the survivors swap with the victim alone, on a tag of their own.
        std::vector<std::uint8_t> c(32), d(32);
        std::vector<halo::NeighbourMessages> withVictim(1);
        withVictim[0].rank = victim;
        withVictim[0].sends = withVictim[0].receives = true;
        withVictim[0].send = {{c.data(), c.size()}};
        withVictim[0].recv = {{d.data(), d.size()}};
        halo::NeighbourExchange first(g, std::move(all), 1, 20s);
        const auto refusedWith = [](auto&& call, core::ErrorKind kind, const std::string& says) {
          try {
            call();
          } catch (const core::Error& e) {
            return e.kind() == kind && std::string(e.what()).find(says) != std::string::npos;
          }
          return false;
        };
        check(refusedWith([&] { first.ready(1 - (rank == 1)); }, core::ErrorKind::Runtime,
                          "outside a step"),
              "ready() outside a step was not refused");
        first.startReceives();
        const int peer = rank == 0 ? 1 : 0;
        first.ready(peer);
        check(refusedWith([&] { first.ready(peer); }, core::ErrorKind::Runtime, "already sent"),
              "ready() twice was not refused");
        check(refusedWith([&] { first.ready(rank); }, core::ErrorKind::InvalidArgument,
                          "not a neighbour"),
              "ready() for a rank that is no neighbour was not refused");
        first.wait();
        if (rank == victim) {
          ::usleep(100000);
          ::raise(SIGKILL);
        }
        halo::NeighbourExchange second(g, std::move(withVictim), 2, 20s);
        std::string why;
        std::atomic<int> calls{0};
        std::string told;  // what the step's callback was told (read after calls turns 1)
        try {
          second.start();
          // The step's end also reaches a callback (a future's way), with the same error.
          second.finishWhenDone([&](std::exception_ptr error) {
            try {
              if (error) std::rethrow_exception(error);
            } catch (const std::exception& e) {
              told = e.what();
            }
            ++calls;
          });
          second.wait();
        } catch (const std::exception& e) {
          why = e.what();
        }
        check(why.find("rank 2") != std::string::npos,
              "the step with a dead neighbour ended with: '" + why + "'");
        // wait() returns once the step ended; its callback may still be on its way.
        for (int i = 0; i < 20000 && calls.load() == 0; ++i) ::usleep(1000);
        check(calls.load() == 1 && told.find("rank 2") != std::string::npos,
              "the failed step's callback ran " + std::to_string(calls.load()) + " times, told: '" +
                  told + "'");
        check(!second.inFlight(), "a failed step is still in flight");
        // The survivors still swap, on the first exchange's plan less the victim.
        std::vector<std::uint8_t> e(8, static_cast<std::uint8_t>(rank)), f(8);
        std::vector<halo::NeighbourMessages> survivors(1);
        survivors[0].rank = 1 - rank;
        survivors[0].sends = survivors[0].receives = true;
        survivors[0].send = {{e.data(), e.size()}};
        survivors[0].recv = {{f.data(), f.size()}};
        halo::NeighbourExchange third(g, std::move(survivors), 3, 20s);
        third.start();
        third.wait();
        check(f == std::vector<std::uint8_t>(8, static_cast<std::uint8_t>(1 - rank)),
              "the survivors' exchange delivered the wrong bytes");
        // Neither leaves before the other is done (a leaving rank looks dead).
        third.start();
        third.wait();
      },
      {victim});
  EXPECT_EQ(problems, "");
}

// Steps through shared memory (neighbours on this host, from the second step on) end like
// any other: a neighbour that dies during one ends it with an error naming it, in wait()
// and in a step that ends by itself; one that never starts its step times the step out.
TEST(NeighbourExchange, ASharedStepEndsWhenItsNeighbourDiesOrNeverComes) {
  Folder folder;
  const int size = 3;
  const int victim = 2;
  const std::string problems = commux::testing::forkRanks(
      size,
      [&](int rank) {
        Member me(folder.path(), rank, size);
        group::Group& g = *me.group;
        const auto channel = g.channel();
        const bool sharedHere =
            channel && channel->shape().cma[shm::CmaUse::Neighbours].from != 0;
        std::vector<std::uint8_t> out(4096, static_cast<std::uint8_t>(rank)), in(4096);
        const auto ring = [&](int tag, std::chrono::milliseconds timeout) {
          std::vector<halo::NeighbourMessages> plan;
          for (int peer : {(rank + 1) % size, (rank + size - 1) % size}) {
            halo::NeighbourMessages n;
            n.rank = peer;
            n.sends = n.receives = true;
            // Two pieces each way (rows of 2 KiB): the neighbour reads them as they lie.
            const std::size_t half = 2048 * (peer == (rank + 1) % size);
            n.send = {{out.data() + half, 1024}, {out.data() + half + 1024, 1024}};
            n.recv = {{in.data() + half, 2048}};
            plan.push_back(std::move(n));
          }
          return std::make_unique<halo::NeighbourExchange>(g, std::move(plan), tag, timeout);
        };
        // A neighbour that never starts its step: the step times out.
        {
          auto ex = ring(5, 1500ms);
          for (int step = 0; step < 2; ++step) {
            ex->start();
            ex->wait();
          }
          check(ex->sendsShared(0) == sharedHere, "the second step did not go shared");
          if (rank != 0) {
            std::string why;
            try {
              ex->start();
              ex->wait();
            } catch (const std::exception& e) {
              why = e.what();
            }
            check(why.find("Timed out") != std::string::npos,
                  "a step whose neighbour never came ended with: '" + why + "'");
          }
          // Rank 0 comes late: its neighbours gave the step up (their memory is theirs
          // again), so it must not copy their messages and call the step a success.
          commux::testing::leaveTogether(g, 990);
          if (rank == 0 && sharedHere) {
            std::string why;
            try {
              ex->start();
              ex->wait();
            } catch (const std::exception& e) {
              why = e.what();
            }
            check(why.find("gave the step up") != std::string::npos,
                  "a step whose neighbours gave it up ended with: '" + why + "'");
          }
        }
        commux::testing::leaveTogether(g);
        {
          // A step that ends by itself whose callback destroys the exchange (a future's
          // last owner dropping it): on the thread that finishes the shared part.
          auto owned = ring(8, 20s);
          for (int step = 0; step < 2; ++step) {
            owned->start();
            owned->wait();
          }
          std::atomic<bool> gone{false};
          std::string told = "(not called)";
          auto* raw = owned.release();
          raw->start();
          raw->finishWhenDone([raw, &gone, &told](std::exception_ptr error) {
            told = error ? "an error" : "";
            delete raw;
            gone = true;
          });
          for (int i = 0; i < 20000 && !gone.load(); ++i) ::usleep(1000);
          check(gone.load() && told.empty(),
                "a step's callback that destroys its exchange: done " +
                    std::to_string(gone.load()) + ", told " + told);
        }
        commux::testing::leaveTogether(g, 980);
        auto ex = ring(6, 20s);
        for (int step = 0; step < 2; ++step) {
          ex->start();
          ex->wait();
        }
        if (rank == victim) {
          ::usleep(100000);
          ::raise(SIGKILL);
        }
        if (rank == 1) {
          // This rank's message to the victim is never read: the step ends by itself
          // (finishWhenDone's thread) with the error.
          std::atomic<int> calls{0};
          std::string told;
          ex->start();
          auto step = ex->finishWhenDone([&](std::exception_ptr error) {
            try {
              if (error) std::rethrow_exception(error);
            } catch (const std::exception& e) {
              told = e.what();
            }
            ++calls;
          });
          std::string why;
          try {
            ex->waitStep(step);
          } catch (const std::exception& e) {
            why = e.what();
          }
          for (int i = 0; i < 20000 && calls.load() == 0; ++i) ::usleep(1000);
          check(why.find("rank 2") != std::string::npos && told.find("rank 2") != std::string::npos &&
                    calls.load() == 1,
                "the step with a dead neighbour ended with: '" + why + "', told '" + told + "'");
        } else {
          std::string why;
          try {
            ex->start();
            ex->wait();
          } catch (const std::exception& e) {
            why = e.what();
          }
          check(why.find("rank 2") != std::string::npos,
                "the step with a dead neighbour ended with: '" + why + "'");
        }
        // Neither survivor leaves before the other saw its error (a rank that left is
        // reported as such); their own exchange still runs.
        std::vector<std::uint8_t> e(8, static_cast<std::uint8_t>(rank)), f(8);
        std::vector<halo::NeighbourMessages> survivors(1);
        survivors[0].rank = 1 - rank;
        survivors[0].sends = survivors[0].receives = true;
        survivors[0].send = {{e.data(), e.size()}};
        survivors[0].recv = {{f.data(), f.size()}};
        halo::NeighbourExchange last(g, std::move(survivors), 7, 20s);
        for (int step = 0; step < 3; ++step) {
          std::fill(f.begin(), f.end(), 0);
          last.start();
          last.wait();
          check(f == std::vector<std::uint8_t>(8, static_cast<std::uint8_t>(1 - rank)),
                "the survivors' exchange delivered the wrong bytes");
        }
      },
      {victim});
  EXPECT_EQ(problems, "");
}

}  // namespace

namespace commux::halo {
namespace {

// Two ends of one pair in this process: a greeting shares only when the process it names is
// the one the group's peer record names for that neighbour.
TEST(NeighbourExchange, AGreetingThatNamesAnotherProcessThanThePeerRecordSharesNothing) {
  std::vector<char> out(4096, 1), in(4096, 0);
  const std::vector<Rows> sendRows{{out.data(), out.size(), 0, 1}};
  const std::vector<Rows> recvRows{{in.data(), in.size(), 0, 1}};
  const shm::CmaRange everySize{1, 0};
  auto pair = [&](std::int64_t recordedPid) {
    SharedSides::Neighbour toOne{0, 1, true, true, true, out.size(), in.size(), &sendRows, &recvRows,
                                 recordedPid};
    SharedSides::Neighbour toZero{0, 0, true, true, true, out.size(), in.size(), &sendRows,
                                  &recvRows, ::getpid()};
    auto zero = std::make_unique<SharedSides>(std::vector<SharedSides::Neighbour>{toOne}, everySize,
                                              std::chrono::microseconds(0), std::chrono::nanoseconds(0));
    auto one = std::make_unique<SharedSides>(std::vector<SharedSides::Neighbour>{toZero}, everySize,
                                             std::chrono::microseconds(0), std::chrono::nanoseconds(0));
    zero->connect({one->hello(0)});
    return std::make_pair(zero->sendsShared(0), zero->receivesShared(0));
  };
  EXPECT_EQ(pair(::getpid()), std::make_pair(true, true));
  // The record names another process (a greeting that lies about who it is, or a record
  // rewritten in the store): nothing of that neighbour is read or mapped.
  EXPECT_EQ(pair(::getpid() + 1), std::make_pair(false, false));
  EXPECT_EQ(pair(-1), std::make_pair(false, false));
}

}  // namespace
}  // namespace commux::halo
