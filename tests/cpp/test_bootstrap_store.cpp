// The bootstrap store on real sockets: what ranks meet through without torch. Its server
// must survive any bytes a stranger sends, and its clients must fail clearly (the key a wait
// ran out on, a secret of another job) instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "bootstrap/store_protocol.hpp"
#include "bootstrap/store_server.hpp"
#include "bootstrap/tcp_store.hpp"
#include "bootstrap/unique_id.hpp"
#include "core/error.hpp"

namespace commux::bootstrap {
namespace {

using namespace std::chrono_literals;

struct Served {
  Secret secret = randomSecret();
  StoreServer server{resolve("127.0.0.1", 0), secret};
  Endpoint at = resolve("127.0.0.1", server.port());
  std::shared_ptr<TcpStore> client(std::chrono::milliseconds timeout = 5s) {
    return std::make_shared<TcpStore>(at, secret, timeout);
  }
};

std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

core::ErrorKind kindOf(const std::function<void()>& f, std::string& message) {
  try {
    f();
  } catch (const core::Error& e) {
    message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no error";
  return core::ErrorKind::Internal;
}

TEST(BootstrapStore, AGetWaitsForAValueAnotherClientSetsLater) {
  Served s;
  auto a = s.client(), b = s.client();
  EXPECT_FALSE(b->check({"k"}));
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    a->set("k", bytes("value"));
  });
  const auto start = std::chrono::steady_clock::now();
  auto values = b->multiGet({"k"});
  later.join();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 90ms);
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], bytes("value"));
  EXPECT_TRUE(b->check({"k"}));
  // Prefixes keep groups apart; add() counts across clients.
  auto p = a->withPrefix("g1/");
  p->set("k", bytes("other"));
  EXPECT_EQ(b->multiGet({"k"})[0], bytes("value"));
  EXPECT_EQ(b->multiGet({"g1/k"})[0], bytes("other"));
  EXPECT_EQ(a->add("n", 2), 2);
  EXPECT_EQ(b->add("n", 3), 5);
  std::string message;
  EXPECT_EQ(kindOf([&] { a->add("k", 1); }, message), core::ErrorKind::Store);
  EXPECT_NE(message.find("holds no counter"), std::string::npos) << message;
}

TEST(BootstrapStore, AWaitThatRunsOutNamesTheMissingKey) {
  Served s;
  auto a = s.client(200ms);
  a->set("here", bytes("1"));
  std::string message;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(kindOf([&] { a->multiGet({"here", "rank/3"}); }, message), core::ErrorKind::Store);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_NE(message.find("'rank/3'"), std::string::npos) << message;
  // The connection still serves.
  EXPECT_EQ(a->multiGet({"here"})[0], bytes("1"));
}

TEST(BootstrapStore, AClientWithAnotherJobsSecretIsRefused) {
  Served s;
  std::string message;
  EXPECT_EQ(kindOf([&] { TcpStore(s.at, randomSecret(), 2s); }, message), core::ErrorKind::Store);
  EXPECT_NE(message.find("refused"), std::string::npos) << message;
  EXPECT_EQ(s.server.dropped(), 1u);
}

// Writes raw bytes at the server, as a stranger or a broken client would.
void sendRaw(const Endpoint& at, const std::vector<std::uint8_t>& raw) {
  Socket socket = connectTo(at, Clock::now() + 2s);
  ASSERT_TRUE(socket.sendAll(raw.data(), raw.size(), Clock::now() + 2s));
  std::uint8_t reply[64];
  // Whatever the server answers, it must close the connection.
  while (socket.recvAll(reply, 1, Clock::now() + 5s)) {
  }
}

TEST(BootstrapStore, FramesThatBreakTheLimitsAreDroppedAndOthersAreStillServed) {
  Served s;
  auto good = s.client();
  good->set("k", bytes("v"));
  protocol::Writer greeting;
  greeting.u32(protocol::kMagic).u16(protocol::kVersion).raw(s.secret.data(), s.secret.size());
  auto greeted = [&](std::initializer_list<std::uint8_t> tail) {
    auto raw = greeting.bytes();
    raw.insert(raw.end(), tail);
    return raw;
  };
  sendRaw(s.at, {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P'});      // not a greeting
  sendRaw(s.at, greeted({1, 0xff, 0xff, 0xff, 0xff}));                    // a 4 GiB key
  sendRaw(s.at, greeted({2, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}));        // 4 billion keys
  sendRaw(s.at, greeted({77}));                                           // no such command
  sendRaw(s.at, greeted({1, 1, 0, 0, 0, 'x', 0xff, 0xff, 0xff, 0x7f}));   // a 2 GiB value
  EXPECT_EQ(s.server.dropped(), 5u);
  // Random bytes after a proper greeting, from a seed.
  const auto seed = std::random_device{}();
  std::mt19937 random(seed);
  for (int i = 0; i < 20; ++i) {
    auto raw = greeting.bytes();
    const int n = 1 + static_cast<int>(random() % 64);
    for (int j = 0; j < n; ++j) raw.push_back(static_cast<std::uint8_t>(random()));
    // Either dropped or left waiting for the rest of a frame; closing ends it either way.
    Socket socket = connectTo(s.at, Clock::now() + 2s);
    ASSERT_TRUE(socket.sendAll(raw.data(), raw.size(), Clock::now() + 2s)) << "seed " << seed;
  }
  EXPECT_EQ(good->multiGet({"k"})[0], bytes("v")) << "seed " << seed;
  auto late = s.client();
  EXPECT_EQ(late->multiGet({"k"})[0], bytes("v")) << "seed " << seed;
}

TEST(BootstrapStore, AClientSeesItsServerGoAwayAsANetworkError) {
  auto s = std::make_unique<Served>();
  auto a = s->client(10s);
  std::thread stop([&] {
    std::this_thread::sleep_for(100ms);
    s.reset();
  });
  std::string message;
  EXPECT_EQ(kindOf([&] { a->multiGet({"never"}); }, message), core::ErrorKind::Network);
  stop.join();
  EXPECT_NE(message.find("stopped answering"), std::string::npos) << message;
}

TEST(UniqueId, RoundTripsAndRefusesWhatIsNotOne) {
  UniqueId id;
  id.store = resolve("10.1.2.3", 29500);
  id.secret = randomSecret();
  char raw[kUniqueIdBytes];
  encode(id, raw);
  const UniqueId back = decode(raw);
  EXPECT_EQ(back.store.str(), "10.1.2.3:29500");
  EXPECT_EQ(back.secret, id.secret);

  std::string message;
  char garbage[kUniqueIdBytes];
  std::memset(garbage, 0x41, sizeof(garbage));
  EXPECT_EQ(kindOf([&] { decode(garbage); }, message), core::ErrorKind::InvalidArgument);
  EXPECT_NE(message.find("not one"), std::string::npos) << message;
  char newer[kUniqueIdBytes];
  std::memcpy(newer, raw, sizeof(raw));
  newer[4] = 9;
  EXPECT_EQ(kindOf([&] { decode(newer); }, message), core::ErrorKind::InvalidArgument);
  EXPECT_NE(message.find("version 9"), std::string::npos) << message;
  char noPort[kUniqueIdBytes];
  std::memcpy(noPort, raw, sizeof(raw));
  noPort[8] = noPort[9] = 0;
  EXPECT_EQ(kindOf([&] { decode(noPort); }, message), core::ErrorKind::InvalidArgument);
  EXPECT_NE(message.find("damaged"), std::string::npos) << message;
}

TEST(BootstrapStore, HostPortIsParsedOrRefusedByName) {
  EXPECT_EQ(parseHostPort("127.0.0.1:4000", "X").str(), "127.0.0.1:4000");
  std::string message;
  for (const char* bad : {"nohost", ":12", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000",
                          "127.0.0.1:12ab"}) {
    EXPECT_EQ(kindOf([&] { parseHostPort(bad, "COMMUX_BOOTSTRAP"); }, message),
              core::ErrorKind::InvalidArgument)
        << bad;
    EXPECT_NE(message.find("COMMUX_BOOTSTRAP"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace commux::bootstrap
