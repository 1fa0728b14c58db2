// The bootstrap store against a seeded stream of hostile clients: bytes before and after
// the greeting, frames cut anywhere, lengths at and past every limit, requests pipelined
// and never read, floods of connections, joins that poison. After every case a proper
// client must still be served the values it stored, and at the end the server holds no
// connection of the fuzzer's. COMMUX_FUZZ_CASES sets how many cases (CI runs a slice);
// COMMUX_TEST_SEED replays a run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "bootstrap/keyed_digest.hpp"
#include "bootstrap/store_protocol.hpp"
#include "bootstrap/store_server.hpp"
#include "bootstrap/tcp_store.hpp"
#include "bootstrap/unique_id.hpp"
#include "test_seed.hpp"

namespace commux::bootstrap {
namespace {

using namespace std::chrono_literals;
using protocol::Command;

int fuzzCases(int fallback) {
  const char* given = std::getenv("COMMUX_FUZZ_CASES");
  return given ? std::max(1, std::atoi(given)) : fallback;
}

class Fuzzer {
 public:
  Fuzzer(std::mt19937& random, const Endpoint& at, const Secret& secret)
      : random_(random), at_(at), secret_(secret) {}

  std::uint32_t below(std::uint32_t n) { return static_cast<std::uint32_t>(random_() % n); }

  // A length near a limit, at it, past it, or small.
  std::uint32_t length(std::uint32_t limit) {
    switch (below(6)) {
      case 0: return limit;
      case 1: return limit + 1;
      case 2: return 0xffffffffu - below(4);
      case 3: return limit - below(std::min<std::uint32_t>(limit, 16));
      default: return below(64);
    }
  }

  std::vector<std::uint8_t> bytes(std::size_t n) {
    std::vector<std::uint8_t> out(n);
    for (auto& b : out) b = static_cast<std::uint8_t>(random_());
    return out;
  }

  // A frame of a real command with fields drawn at random: some well formed, some claiming
  // lengths they do not carry.
  std::vector<std::uint8_t> frame(bool joins) {
    protocol::Writer w;
    const std::uint32_t pick = below(joins ? 6 : 5);
    auto keyText = [&] {
      // Keys from a small set, so that sets, gets and adds meet.
      return std::string("k") + std::to_string(below(8));
    };
    auto lengthPrefixed = [&](std::uint32_t limit) {
      const std::uint32_t claimed = length(limit);
      w.u32(claimed);
      const std::size_t carried = std::min<std::size_t>(claimed, 256 + below(512));
      w.raw(bytes(carried).data(), carried);
    };
    switch (pick) {
      case 0:
        w.u8(static_cast<std::uint8_t>(Command::Set));
        if (below(2)) w.str(keyText()).str(bytes(below(300))); else { lengthPrefixed(protocol::kMaxKeyBytes); lengthPrefixed(protocol::kMaxValueBytes); }
        break;
      case 1: {
        w.u8(static_cast<std::uint8_t>(Command::Get)).u32(below(30));
        const std::uint32_t count = below(3) ? below(6) : length(protocol::kMaxKeys);
        w.u32(count);
        for (std::uint32_t i = 0; i < std::min<std::uint32_t>(count, 8); ++i) w.str(keyText());
        break;
      }
      case 2:
        w.u8(static_cast<std::uint8_t>(Command::Check)).u32(below(4));
        for (int i = 0; i < 3; ++i) w.str(keyText());
        break;
      case 3:
        w.u8(static_cast<std::uint8_t>(Command::Add));
        w.str(keyText()).i64(static_cast<std::int64_t>(random_()));
        break;
      case 4: {
        w.u8(static_cast<std::uint8_t>(below(256)));  // any command byte
        const auto junk = bytes(below(40));
        w.raw(junk.data(), junk.size());
        break;
      }
      default: {
        ProcessToken token{};
        token[0] = static_cast<std::uint8_t>(below(3));
        w.u8(static_cast<std::uint8_t>(Command::Join)).u32(below(5)).u32(below(5));
        w.raw(token.data(), token.size());
        if (below(2)) w.str(std::string("fuzz")); else lengthPrefixed(protocol::kMaxTextBytes);
        break;
      }
    }
    auto out = w.bytes();
    if (below(5) == 0 && !out.empty()) out.resize(below(static_cast<std::uint32_t>(out.size())));
    return out;
  }

  // Greets properly (or, one time in eight, with a wrong proof).
  Socket greeted() {
    Socket s = connectTo(at_, Clock::now() + 5s);
    const auto nonce = randomBytes16();
    protocol::Writer hello;
    hello.u32(protocol::kMagic).u16(protocol::kVersion).raw(nonce.data(), nonce.size());
    if (!s.sendAll(hello.bytes().data(), hello.bytes().size(), Clock::now() + 5s)) return s;
    std::uint8_t challenge[protocol::kChallengeBytes];
    if (!s.recvAll(challenge, sizeof(challenge), Clock::now() + 5s)) return s;
    Digest proof = clientProof(secret_, challenge + 6, nonce.data());
    if (below(8) == 0) proof[below(16)] ^= 1;
    s.sendAll(proof.data(), proof.size(), Clock::now() + 5s);
    return s;
  }

  // One hostile client, as the case number's scenario says.
  void oneCase(bool joins) {
    std::vector<Socket> held;
    switch (below(5)) {
      case 0: {  // bytes before any greeting, sometimes a greeting's start
        Socket s = connectTo(at_, Clock::now() + 5s);
        auto raw = bytes(below(80));
        if (below(2) && raw.size() >= 6) {
          const std::uint32_t magic = protocol::kMagic;
          std::memcpy(raw.data(), &magic, 4);
        }
        s.sendAll(raw.data(), raw.size(), Clock::now() + 5s);
        break;
      }
      case 1: {  // frames after a greeting, cut anywhere
        Socket s = greeted();
        for (std::uint32_t i = 0, n = 1 + below(6); i < n; ++i) {
          auto f = frame(joins);
          if (!s.sendAll(f.data(), f.size(), Clock::now() + 2s)) break;
        }
        drain(s, below(2) ? 20ms : 0ms);
        break;
      }
      case 2: {  // requests pipelined and never read, then gone
        Socket s = greeted();
        protocol::Writer w;
        for (int i = 0; i < 64; ++i) {
          w.u8(static_cast<std::uint8_t>(Command::Get)).u32(0).u32(1).str(std::string("big"));
        }
        s.sendAll(w.bytes().data(), w.bytes().size(), Clock::now() + 2s);
        break;
      }
      case 3:  // a burst of idle connections, held through the next check
        for (std::uint32_t i = 0, n = 20 + below(100); i < n; ++i) {
          held.push_back(connectTo(at_, Clock::now() + 5s));
        }
        break;
      default: {  // a slow greeting, a byte at a time
        Socket s = connectTo(at_, Clock::now() + 5s);
        protocol::Writer hello;
        hello.u32(protocol::kMagic).u16(protocol::kVersion).raw(bytes(16).data(), 16);
        for (std::uint8_t b : hello.bytes()) {
          if (!s.sendAll(&b, 1, Clock::now() + 2s)) break;
          if (below(4) == 0) std::this_thread::sleep_for(1ms);
        }
        drain(s, 5ms);
        break;
      }
    }
    held_.swap(held);
  }

  static void drain(Socket& s, std::chrono::milliseconds wait) {
    std::uint8_t sink[4096];
    const auto until = Clock::now() + wait;
    while (Clock::now() < until && s.recvAll(sink, 1, until)) {
    }
  }

 private:
  std::mt19937& random_;
  Endpoint at_;
  Secret secret_;
  std::vector<Socket> held_;
};

// A live store on loopback, with its secret and a seeded stream.
struct Target {
  unsigned seed = testing::testSeed();
  std::mt19937 random{seed};
  Secret secret = randomSecret();
  StoreServer server{resolve("127.0.0.1", 0), secret};
  Endpoint at = resolve("127.0.0.1", server.port());
};

TEST(BootstrapStore, FuzzedClientsNeverTakeTheStoreDown) {
  Target t;
  auto& [seed, random, secret, server, at] = t;
  auto good = std::make_shared<TcpStore>(at, secret, 10s);
  good->set("big", std::vector<std::uint8_t>(1u << 20, 3));
  good->set("mine", {1, 2, 3});
  Fuzzer fuzz(random, at, secret);
  const int cases = fuzzCases(200);
  for (int i = 0; i < cases; ++i) {
    fuzz.oneCase(/*joins=*/false);
    if (i % 10 == 9) {
      // The proper client is served, and what it stored is intact.
      ASSERT_EQ(good->multiGet({"mine"})[0], (std::vector<std::uint8_t>{1, 2, 3}))
          << "seed " << seed << " case " << i;
      ASSERT_EQ(good->multiGet({"big"})[0].size(), 1u << 20) << "seed " << seed;
    }
  }
  fuzz.oneCase(false);  // lets go of a burst held by the last case
  auto late = std::make_shared<TcpStore>(at, secret, 10s);
  EXPECT_EQ(late->multiGet({"mine"})[0], (std::vector<std::uint8_t>{1, 2, 3})) << "seed " << seed;
  std::printf("bootstrap store fuzz: %d cases, %llu connections dropped\n", cases,
              static_cast<unsigned long long>(server.dropped()));
}

TEST(BootstrapStore, FuzzedJoinsEndInAnAnswerNeverACrash) {
  Target t;
  auto& [seed, random, secret, server, at] = t;
  Fuzzer fuzz(random, at, secret);
  const int cases = fuzzCases(200) / 4 + 1;
  for (int i = 0; i < cases; ++i) fuzz.oneCase(/*joins=*/true);
  // Poisoned or not, a proper client gets an answer: its value, or the store's reason.
  auto good = std::make_shared<TcpStore>(at, secret, 10s);
  try {
    good->set("k", {1});
    EXPECT_EQ(good->multiGet({"k"})[0], (std::vector<std::uint8_t>{1})) << "seed " << seed;
  } catch (const std::exception& e) {
    EXPECT_FALSE(server.poisoned().empty()) << e.what() << " seed " << seed;
    EXPECT_NE(std::string(e.what()).find("two jobs met"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace commux::bootstrap
