// Real ranks (forked processes, no torch) on the core's Group: members meet over a
// key-value store (files in a folder), move plain buffers through Requests the Group tracks,
// take the Group's route to its shared-memory channel, and see a member's death and an abort
// fail what waits.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "collectives/route.hpp"
#include "core/buffer.hpp"
#include "core/error.hpp"
#include "core_group_rig.hpp"
#include "engine/engine.hpp"
#include "fork_ranks.hpp"
#include "group/group.hpp"
#include "group/peer_table.hpp"
#include "group/point_to_point.hpp"
#include "shm/channel.hpp"
#include "shm/channel_op.hpp"
#include "shm/job.hpp"
#include "test_seed.hpp"

namespace {

using namespace commux;
using namespace std::chrono_literals;
using Bytes = std::shared_ptr<std::vector<std::uint8_t>>;

using commux::testing::check;
using commux::testing::Folder;
using commux::testing::Member;

Bytes pattern(std::size_t bytes, int salt) {
  auto data = std::make_shared<std::vector<std::uint8_t>>(bytes);
  for (std::size_t i = 0; i < bytes; ++i) (*data)[i] = static_cast<std::uint8_t>(i * 13 + salt);
  return data;
}

core::Buffer viewOf(const Bytes& data) {
  return core::bufferOf(data->data(), data->size(), core::Dtype::UInt8, data);
}

std::shared_ptr<group::Request> send(group::Group& g, int to, int tag, const Bytes& data) {
  return group::send(g, viewOf(data), to, tag, 20s);
}

std::shared_ptr<group::Request> recv(group::Group& g, int from, int tag, const Bytes& data) {
  return group::recv(g, viewOf(data), from, tag, 20s);
}

// Waits (raising at the Request's timeout) and raises the Request's own error.
void finish(group::Request& request) {
  request.wait(request.timeout());
  if (auto error = request.error()) std::rethrow_exception(error);
}

// The error a Request ended with, as text; "" when it succeeded.
std::string errorOf(group::Request& request) {
  request.wait(request.timeout());
  const auto error = request.error();
  return error ? core::readError(error).message : std::string();
}

// Every rank sends to the next and receives from the one before: all have met after it.
void ring(group::Group& g, int tag, std::size_t bytes) {
  const int next = (g.rank() + 1) % g.size();
  const int before = (g.rank() + g.size() - 1) % g.size();
  const auto got = std::make_shared<std::vector<std::uint8_t>>(bytes);
  auto in = recv(g, before, tag, got);
  auto out = send(g, next, tag, pattern(bytes, g.rank()));
  finish(*out);
  finish(*in);
  check(*got == *pattern(bytes, before), "rank " + std::to_string(g.rank()) +
                                             " received the wrong bytes from rank " +
                                             std::to_string(before));
}

TEST(CoreGroup, MembersMeetMovePlainBuffersAndRouteThroughTheirChannel) {
  const unsigned s = commux::testing::testSeed();
  Folder folder;
  const int size = 3;
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    Member me(folder.path(), rank, size);
    group::Group& g = *me.group;
    std::mt19937 random(s);  // the same sizes on every rank
    std::vector<std::size_t> sizes{0, 1, 4096, 65539};
    for (int i = 0; i < 4; ++i) sizes.push_back(random() % (1u << 20));
    for (std::size_t i = 0; i < sizes.size(); ++i) ring(g, static_cast<int>(10 + i), sizes[i]);

    // One host, shared memory on: the route of an allreduce of host memory is the channel.
    std::shared_ptr<shm::Channel> channel;
    const std::size_t count = 1000 + random() % 5000;
    const auto route = g.route(collectives::Collective::Allreduce, "allreduce", true,
                               count * sizeof(float), channel);
    check(route.path == collectives::Path::SharedMemory && channel != nullptr,
          "an allreduce of host memory on one host did not route to the shared-memory channel");
    check(g.sharedMemoryShape().at("ranks") == size, "the channel does not hold every rank");
    auto values = std::make_shared<std::vector<float>>(count);
    for (std::size_t i = 0; i < count; ++i) (*values)[i] = static_cast<float>((rank + 1) * (i % 7));
    shm::Job job;
    job.kind = shm::Kind::Allreduce;
    job.reduce = core::ReduceOp::Sum;
    job.buffer = core::bufferOf(values->data(), count, core::Dtype::Float32, values);
    auto request = std::make_shared<group::Request>(
        group::Request::Kind::Other, engine::Description("allreduce over shared memory"), 20s,
        g.sharedEngine());
    g.watchMembers();
    g.launch(request,
             std::make_shared<shm::ChannelOp>(channel, std::move(job), nullptr, request->parts(),
                                              request->completer()),
             std::nullopt);
    finish(*request);
    for (std::size_t i = 0; i < count; ++i) {
      check((*values)[i] == static_cast<float>(6 * (i % 7)), "the allreduce summed wrong");
    }
    check(g.status().healthy, "the group is not healthy: " + g.status().reason);
    commux::testing::leaveTogether(g);
  });
  EXPECT_EQ(problems, "") << "COMMUX_TEST_SEED=" << s;
}

TEST(CoreGroup, ADeathFailsWhatWaitsOnItRefusesSendsToItAndTheOthersGoOn) {
  Folder folder;
  const int size = 3;
  const int victim = 2;
  const std::string problems = commux::testing::forkRanks(
      size,
      [&](int rank) {
        Member me(folder.path(), rank, size);
        group::Group& g = *me.group;
        ring(g, 1, 64);  // every rank has read the others' records (and watches them)
        if (rank == victim) {
          ::usleep(100000);
          ::raise(SIGKILL);
        }
        const auto never = std::make_shared<std::vector<std::uint8_t>>(16);
        auto waiting = recv(g, victim, 5, never);
        const std::string why = errorOf(*waiting);
        check(why.find("rank 2 died") != std::string::npos,
              "a receive from the dead rank ended with: '" + why + "'");
        const group::Group::Status status = g.status();
        check(!status.healthy && status.deadRanks == std::vector<int>{victim},
              "status after the death: " + status.reason);
        bool refused = false;
        try {
          send(g, victim, 6, pattern(8, 0));
        } catch (const std::exception& e) {
          refused = std::string(e.what()).find("fail from now on") != std::string::npos;
        }
        check(refused, "a send to the dead rank was not refused at launch");
        // The survivors still talk, tags matched as before.
        const int other = 1 - rank;
        const auto got = std::make_shared<std::vector<std::uint8_t>>(32);
        auto in = recv(g, other, 7, got);
        finish(*send(g, other, 7, pattern(32, rank)));
        finish(*in);
        check(*got == *pattern(32, other), "the survivors' message arrived wrong");
        // Neither leaves before the other checked (a leaving rank looks dead).
        auto last = recv(g, other, 8, std::make_shared<std::vector<std::uint8_t>>(1));
        finish(*send(g, other, 8, pattern(1, 0)));
        finish(*last);
      },
      {victim});
  EXPECT_EQ(problems, "");
}

TEST(CoreGroup, ASharedMemoryCollectiveIsLeftToItsChannelAtADeath) {
  // A peer that finished the collective and then died must not fail it on this rank from
  // outside (a death notice fails only what awaits the dead); the channel itself fails what
  // the death keeps from finishing.
  shm::ChannelOp op(std::weak_ptr<shm::Channel>(), shm::Job{}, nullptr,
                    engine::Description("barrier"), [](std::exception_ptr, int) {});
  EXPECT_FALSE(op.awaits(2));
  op.markRan();
  EXPECT_FALSE(op.awaits(2));
}

// The last reference to a channel can go on its lane's thread (an operation that fails
// there holds the channel while it withdraws), which the channel's teardown joins: the
// channel is then destroyed on a helper thread (a teardown there joined its own thread:
// "Resource deadlock avoided", and the process aborted).
TEST(CoreGroup, AChannelWhoseLastReferenceGoesOnItsLaneIsDestroyedElsewhere) {
  const std::string problems = commux::testing::forkRanks(
      1,
      [](int) {
        auto engine = engine::Engine::instance(1, engine::Settings{});
        shm::ChannelShape shape;
        shape.size = 1;
        shape.slotBytes = 4096;
        shape.smallBytes = 256;
        auto holder = std::make_shared<std::shared_ptr<shm::Channel>>(
            shm::Channel::make(shm::Segment::create(shm::Channel::segmentBytes(shape), true), 0,
                               shape, true, engine, {0}));
        const std::weak_ptr<shm::Channel> channel = *holder;
        shm::Job job;
        job.kind = shm::Kind::Hold;
        std::atomic<bool> onLane{false};
        auto done = std::make_shared<engine::DoneFlag>();
        auto op = std::make_shared<shm::ChannelOp>(
            channel, job,
            [holder, &onLane] {
              holder->reset();  // the last reference, on the thread that runs the lane
              onLane = true;
            },
            engine::Description("hold"),
            [done, e = engine.get()](std::exception_ptr, int) { e->setDone(*done); });
        engine->submit(engine::Submission::start(op));
        check(engine->wait(*done, std::chrono::steady_clock::now() + 10s),
              "the held operation never finished");
        check(onLane, "the operation finished without running its finalize");
        engine::Engine::shutdownInstance();  // waits for the helper that destroys the channel
        // The channel's own reference to the engine goes only once its destructor has run.
        check(channel.expired() && engine.use_count() == 1,
              "the channel was not destroyed after its last reference went");
      },
      {}, 20);
  EXPECT_EQ(problems, "");
}

TEST(CoreGroup, AbortFailsWhatIsInFlightAndRefusesWhatFollows) {
  Folder folder;
  const int size = 2;
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    Member me(folder.path(), rank, size);
    group::Group& g = *me.group;
    ring(g, 1, 8);
    auto pending = recv(g, 1 - rank, 42, std::make_shared<std::vector<std::uint8_t>>(8));
    g.abort();
    const std::string why = errorOf(*pending);
    // Its own abort, or the peer's notice that it aborted, whichever came first.
    check(why.find("was aborted") != std::string::npos ||
              why.find("it aborted its process group") != std::string::npos,
          "an aborted receive ended with: " + why);
    check(g.state() == group::Group::State::Aborted && !g.status().healthy,
          "the group does not say it was aborted");
    bool refused = false;
    try {
      g.checkUsable();
    } catch (const std::exception& e) {
      refused = std::string(e.what()).find("aborted") != std::string::npos;
    }
    check(refused, "an aborted group still calls itself usable");
  });
  EXPECT_EQ(problems, "");
}

TEST(CoreGroup, AnySourceReceivesNameTheirSenderAndBadMessagesAreRefused) {
  Folder folder;
  const int size = 3;
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    Member me(folder.path(), rank, size);
    group::Group& g = *me.group;
    const auto refusal = [&](const std::function<void()>& call) -> std::string {
      try {
        call();
      } catch (const std::exception& e) {
        if (core::readError(std::current_exception()).kind != core::ErrorKind::InvalidArgument) {
          return std::string("not an InvalidArgument: ") + e.what();
        }
        return e.what();
      }
      return "nothing raised";
    };
    const auto bytes = std::make_shared<std::vector<std::uint8_t>>(4);
    const std::pair<std::string, std::string> cases[] = {
        {refusal([&] { send(g, size, 1, bytes); }), "invalid destination rank 3"},
        {refusal([&] { send(g, group::kAnySource, 1, bytes); }), "invalid destination rank -1"},
        {refusal([&] { recv(g, -2, 1, bytes); }), "invalid source rank -2"},
        {refusal([&] { send(g, 0, -5, bytes); }), "tag must be in [0, 2147483647], got -5"},
        {refusal(
             [&] { group::recv(g, core::bufferOf(nullptr, 4, core::Dtype::UInt8), 0, 1, 20s); }),
         "at a null address"},
    };
    for (const auto& [got, want] : cases) {
      check(got.find(want) != std::string::npos,
            "expected a refusal naming '" + want + "', got '" + got + "'");
    }
    // Rank 0 receives from any rank, twice per peer; every message names its sender.
    if (rank == 0) {
      std::vector<int> seen;
      for (int i = 0; i < 2 * (size - 1); ++i) {
        const auto got = std::make_shared<std::vector<std::uint8_t>>(16);
        auto in = recv(g, group::kAnySource, 3, got);
        finish(*in);
        const int from = in->sourceRank();
        check(from > 0 && from < size,
              "an any-source receive names sender " + std::to_string(from));
        check(*got == *pattern(16, from),
              "the bytes from rank " + std::to_string(from) + " are not what it sent");
        seen.push_back(from);
      }
      std::sort(seen.begin(), seen.end());
      check(seen == std::vector<int>{1, 1, 2, 2}, "the any-source receives missed a message");
    } else {
      finish(*send(g, 0, 3, pattern(16, rank)));
      finish(*send(g, 0, 3, pattern(16, rank)));
    }
    commux::testing::leaveTogether(g);
  });
  EXPECT_EQ(problems, "");
}

}  // namespace
