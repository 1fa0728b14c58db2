// Real ranks (forked processes) on the torch-free core: the engine's point-to-point and
// collective operations over plain host buffers, in processes that never load torch (this
// file builds in the core-only build, scripts/test_core.sh, where torch cannot be found).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <climits>
#include <functional>
#include <optional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/schedule.hpp"
#include "core/buffer.hpp"
#include "core/error.hpp"
#include "engine/schedule_op.hpp"
#include "engine/engine.hpp"
#include "engine/p2p_op.hpp"
#include "wire/tag.hpp"
#include "fork_ranks.hpp"
#include "test_seed.hpp"

namespace {

using namespace commux;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Routes = std::vector<std::shared_ptr<const engine::Route>>;

// Every rank gives this group the same communicator id, so the tags agree.
constexpr std::uint32_t kContext = 7;

// Each rank's worker address, through files in a fresh folder: the simplest store there is.
class Rendezvous {
 public:
  explicit Rendezvous(std::string dir) : dir_(std::move(dir)) {}

  void publish(int rank, const std::string& address) const {
    const std::string path = dir_ + "/" + std::to_string(rank);
    {
      std::ofstream out(path + ".tmp", std::ios::binary);
      out.write(address.data(), static_cast<std::streamsize>(address.size()));
    }
    std::rename((path + ".tmp").c_str(), path.c_str());  // readers see it whole or not at all
  }

  std::string read(int rank) const {
    const std::string path = dir_ + "/" + std::to_string(rank);
    const auto deadline = Clock::now() + 30s;
    for (;;) {
      std::ifstream in(path, std::ios::binary);
      if (in) {
        std::stringstream all;
        all << in.rdbuf();
        return all.str();
      }
      if (Clock::now() > deadline) throw std::runtime_error("rank " + std::to_string(rank) + " never published");
      std::this_thread::sleep_for(1ms);
    }
  }

 private:
  std::string dir_;
};

using Body = std::function<void(engine::Engine& engine, const Routes& routes, int rank, int size)>;

// Runs `body` in `size` forked ranks, each with an engine of its own; "" when every rank
// returned, else which did not and why.
std::string runCoreRanks(int size, const Body& body) {
  char folder[] = "/tmp/commux-core-ranks-XXXXXX";
  if (::mkdtemp(folder) == nullptr) return "mkdtemp failed";
  const Rendezvous rendezvous(folder);
  const std::string problems = commux::testing::forkRanks(size, [&](int rank) {
    auto engine = std::make_shared<engine::Engine>(engine::Settings{});
    rendezvous.publish(rank, engine->address());
    Routes routes;
    for (int peer = 0; peer < size; ++peer) {
      routes.push_back(std::make_shared<const engine::Route>(
          engine::Route{rendezvous.read(peer), kContext}));
    }
    body(*engine, routes, rank, size);
  });
  for (int rank = 0; rank < size; ++rank) std::remove((std::string(folder) + "/" + std::to_string(rank)).c_str());
  ::rmdir(folder);
  return problems;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// An operation's end, as its Done callback reports it. Shared with the callback: setDone
// may still touch the flag after the waiter saw it set.
struct Outcome {
  engine::DoneFlag flag;
  std::exception_ptr error;
  int source = -1;
};

engine::Op::Done reportTo(engine::Engine& engine, const std::shared_ptr<Outcome>& outcome) {
  return [&engine, outcome](std::exception_ptr error, int source) {
    outcome->error = error;
    outcome->source = source;
    engine.setDone(outcome->flag);
  };
}

void await(engine::Engine& engine, Outcome& outcome) {
  check(engine.wait(outcome.flag, Clock::now() + 30s), "an operation did not end in 30 s");
  if (outcome.error) std::rethrow_exception(outcome.error);
}

// Bytes owned by the operation that moves them (the owner keeps them alive).
std::shared_ptr<std::vector<std::uint8_t>> pattern(std::size_t bytes, int salt) {
  auto data = std::make_shared<std::vector<std::uint8_t>>(bytes);
  for (std::size_t i = 0; i < bytes; ++i) (*data)[i] = static_cast<std::uint8_t>(i * 31 + salt);
  return data;
}

engine::P2POp::Buffers viewsOf(const std::vector<std::shared_ptr<std::vector<std::uint8_t>>>& all) {
  engine::P2POp::Buffers buffers;
  for (const auto& data : all) {
    buffers.push_back(core::bufferOf(data->data(), data->size(), core::Dtype::UInt8, data));
  }
  return buffers;
}

void send(engine::Engine& engine, const Routes& routes, int rank, int to, int tag,
          const std::vector<std::shared_ptr<std::vector<std::uint8_t>>>& data, bool pack = false) {
  auto outcome = std::make_shared<Outcome>();
  const auto& route = routes[static_cast<std::size_t>(to)];
  engine.submit(engine::Submission::start(std::make_shared<engine::P2POp>(
      engine::P2POp::Kind::Send, viewsOf(data), route,
      wire::p2pTag(route->context, static_cast<std::uint32_t>(rank),
                   static_cast<std::uint32_t>(tag), pack),
      wire::kExactMask, pack, engine::Description::p2p("send", "to", to, tag, 0, data.size()),
      reportTo(engine, outcome))));
  await(engine, *outcome);
}

int recv(engine::Engine& engine, int from, int tag,
         const std::vector<std::shared_ptr<std::vector<std::uint8_t>>>& data, bool pack = false) {
  auto outcome = std::make_shared<Outcome>();
  const bool any = from < 0;
  engine.submit(engine::Submission::start(std::make_shared<engine::P2POp>(
      engine::P2POp::Kind::Recv, viewsOf(data), nullptr,
      wire::p2pTag(kContext, any ? 0 : static_cast<std::uint32_t>(from),
                   static_cast<std::uint32_t>(tag)),
      any ? wire::kAnySourceMask : wire::kExactMask, pack,
      engine::Description::p2p("recv", "from", from, tag, 0, data.size()),
      reportTo(engine, outcome))));
  await(engine, *outcome);
  return outcome->source;
}

std::uint32_t sequence = 0;  // per process: every rank runs the same collectives in order

template <typename T>
void collective(engine::Engine& engine, const Routes& routes, int rank, collectives::Schedule schedule,
                std::vector<T>& work, core::Dtype dtype, std::optional<core::ReduceOp> reduce) {
  engine::ScheduleOp::Setup setup;
  setup.schedule = std::move(schedule);
  setup.work = core::bufferOf(work.data(), work.size(), dtype);  // the caller keeps it alive
  setup.reduce = reduce;
  setup.routes = routes;
  setup.myContext = kContext;
  setup.myRank = rank;
  setup.sequence = sequence++;
  auto outcome = std::make_shared<Outcome>();
  engine.submit(engine::Submission::start(std::make_shared<engine::ScheduleOp>(
      std::move(setup), engine::Description("a core collective"), reportTo(engine, outcome))));
  await(engine, *outcome);
}

void barrier(engine::Engine& engine, const Routes& routes, int rank, int size) {
  std::vector<std::uint8_t> none;
  collective(engine, routes, rank, collectives::barrierDissemination(rank, size), none,
             core::Dtype::UInt8, std::nullopt);
}

TEST(CoreRanks, SendAndReceivePlainBuffers) {
  const std::vector<std::size_t> sizes{0, 1, 8, 4096, 300000, 1 << 20};
  EXPECT_EQ("", runCoreRanks(2, [&](engine::Engine& engine, const Routes& routes, int rank, int size) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const int tag = static_cast<int>(i) + 1;
      if (rank == 0) {
        send(engine, routes, rank, 1, tag, {pattern(sizes[i], tag)});
      } else {
        auto got = std::make_shared<std::vector<std::uint8_t>>(sizes[i], 0xee);
        check(recv(engine, 0, tag, {got}) == 0, "the receive names another sender");
        check(*got == *pattern(sizes[i], tag), "bytes differ at size " + std::to_string(sizes[i]));
      }
    }
    // Two buffers as one IOV message, and a receive from any source.
    if (rank == 0) {
      send(engine, routes, rank, 1, 50, {pattern(100, 1), pattern(70000, 2)}, /*pack=*/true);
      send(engine, routes, rank, 1, 51, {pattern(24, 3)});
    } else {
      auto a = std::make_shared<std::vector<std::uint8_t>>(100);
      auto b = std::make_shared<std::vector<std::uint8_t>>(70000);
      recv(engine, 0, 50, {a, b}, /*pack=*/true);
      check(*a == *pattern(100, 1) && *b == *pattern(70000, 2), "the packed message differs");
      auto c = std::make_shared<std::vector<std::uint8_t>>(24);
      check(recv(engine, -1, 51, {c}) == 0, "a receive from any source names the wrong sender");
      check(*c == *pattern(24, 3), "the receive from any source differs");
    }
    barrier(engine, routes, rank, size);
  }));
}

TEST(CoreRanks, ASizeMismatchIsTheCallersErrorAndTheEngineGoesOn) {
  EXPECT_EQ("", runCoreRanks(2, [&](engine::Engine& engine, const Routes& routes, int rank, int size) {
    if (rank == 0) {
      send(engine, routes, rank, 1, 9, {pattern(8, 0)});
      send(engine, routes, rank, 1, 10, {pattern(16, 1)});
    } else {
      auto bigger = std::make_shared<std::vector<std::uint8_t>>(16);
      try {
        recv(engine, 0, 9, {bigger});
        check(false, "a 16-byte receive took an 8-byte message");
      } catch (const core::Error& e) {
        check(e.kind() == core::ErrorKind::InvalidArgument,
              std::string("wrong kind of error: ") + core::nameOf(e.kind()));
        check(std::string(e.what()).find("message size mismatch") != std::string::npos,
              std::string("the error does not say what is wrong: ") + e.what());
      }
      auto next = std::make_shared<std::vector<std::uint8_t>>(16);
      recv(engine, 0, 10, {next});
      check(*next == *pattern(16, 1), "the next message differs");
    }
    barrier(engine, routes, rank, size);
  }));
}

// Seeded counts and schedules; each rank's values are small integers, so float sums are
// exact and every rank must hold exactly the expected result.
TEST(CoreRanks, AllreduceOnPlainBuffersFromASeed) {
  const unsigned seed = commux::testing::testSeed();  // COMMUX_TEST_SEED replays a run
  SCOPED_TRACE("seed " + std::to_string(seed) + " (COMMUX_TEST_SEED replays it)");
  EXPECT_EQ("", runCoreRanks(3, [&](engine::Engine& engine, const Routes& routes, int rank, int size) {
    std::mt19937 random(seed);  // the same on every rank
    for (int round = 0; round < 12; ++round) {
      const std::size_t count = std::uniform_int_distribution<std::size_t>(1, 200000)(random);
      const int which = std::uniform_int_distribution<int>(0, 2)(random);
      collectives::Schedule schedule =
          which == 0   ? collectives::allreduceRing(rank, size, count)
          : which == 1 ? collectives::allreduceRecursiveDoubling(rank, size, count)
                       : collectives::allreduceRabenseifner(rank, size, count);
      if (round % 2 == 0) {
        std::vector<float> work(count);
        for (std::size_t i = 0; i < count; ++i) work[i] = static_cast<float>((i + rank * 7) % 13);
        collective(engine, routes, rank, std::move(schedule), work, core::Dtype::Float32, core::ReduceOp::Sum);
        for (std::size_t i = 0; i < count; ++i) {
          float expected = 0;
          for (int r = 0; r < size; ++r) expected += static_cast<float>((i + r * 7) % 13);
          if (work[i] != expected) {
            throw std::runtime_error("sum: element " + std::to_string(i) + " of " + std::to_string(count) +
                                     " is " + std::to_string(work[i]) + ", not " + std::to_string(expected) +
                                     " (schedule " + std::to_string(which) + ")");
          }
        }
      } else {
        std::vector<std::int64_t> work(count);
        for (std::size_t i = 0; i < count; ++i) work[i] = static_cast<std::int64_t>((i * 5 + rank * 11) % 17) - 8;
        collective(engine, routes, rank, std::move(schedule), work, core::Dtype::Int64, core::ReduceOp::Max);
        for (std::size_t i = 0; i < count; ++i) {
          std::int64_t expected = INT64_MIN;
          for (int r = 0; r < size; ++r) expected = std::max<std::int64_t>(expected, static_cast<std::int64_t>((i * 5 + r * 11) % 17) - 8);
          if (work[i] != expected) {
            throw std::runtime_error("max: element " + std::to_string(i) + " is " + std::to_string(work[i]) +
                                     ", not " + std::to_string(expected));
          }
        }
      }
    }
    barrier(engine, routes, rank, size);
  }));
}

}  // namespace
