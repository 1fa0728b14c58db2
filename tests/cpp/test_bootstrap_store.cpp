// The bootstrap store on real sockets: what ranks meet through without torch. Its server
// must survive any bytes a stranger sends, and its clients must fail clearly (the key a wait
// ran out on, a secret of another job) instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/keyed_digest.hpp"
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
  // The server cannot prove the client's secret: the client stops before it proves its own.
  EXPECT_EQ(kindOf([&] { TcpStore(s.at, randomSecret(), 2s); }, message), core::ErrorKind::Store);
  EXPECT_NE(message.find("belongs to another job"), std::string::npos) << message;
  EXPECT_NE(message.find("COMMUX_BOOTSTRAP_SECRET"), std::string::npos) << message;
  EXPECT_NE(message.find(s.at.str()), std::string::npos) << message;
}

// The greeting done by hand: hello, the server's challenge (checked), this side's proof.
Socket greetedSocket(const Endpoint& at, const Secret& secret, bool proveRight = true) {
  Socket socket = connectTo(at, Clock::now() + 2s);
  const auto nonce = randomBytes16();
  protocol::Writer hello;
  hello.u32(protocol::kMagic).u16(protocol::kVersion).raw(nonce.data(), nonce.size());
  EXPECT_TRUE(socket.sendAll(hello.bytes().data(), hello.bytes().size(), Clock::now() + 2s));
  std::uint8_t challenge[protocol::kChallengeBytes];
  EXPECT_TRUE(socket.recvAll(challenge, sizeof(challenge), Clock::now() + 5s));
  const std::uint8_t* serverNonce = challenge + 6;
  const std::uint8_t* instance = serverNonce + protocol::kNonceBytes;
  Digest proof{};
  std::memcpy(proof.data(), instance + 16, proof.size());
  EXPECT_TRUE(sameDigest(proof, serverProof(secret, nonce.data(), serverNonce, instance)));
  Digest mine = clientProof(secret, serverNonce, nonce.data());
  if (!proveRight) mine[0] ^= 1;
  EXPECT_TRUE(socket.sendAll(mine.data(), mine.size(), Clock::now() + 2s));
  if (proveRight) {
    std::uint8_t ok = 0xff;
    EXPECT_TRUE(socket.recvAll(&ok, 1, Clock::now() + 5s));
    EXPECT_EQ(ok, 0);
  }
  return socket;
}

TEST(BootstrapStore, AClientThatCannotProveTheSecretIsDropped) {
  Served s;
  // A replayed or guessed proof: the server drops the connection without an Ok.
  Socket wrong = greetedSocket(s.at, s.secret, /*proveRight=*/false);
  std::uint8_t byte = 0;
  EXPECT_FALSE(wrong.recvAll(&byte, 1, Clock::now() + 5s));
  EXPECT_EQ(s.server.dropped(), 1u);
  // The protocol's own digest: SipHash-2-4's published vector (key 00..0f, empty input).
  DigestKey key{};
  for (std::uint8_t i = 0; i < 16; ++i) key[i] = i;
  EXPECT_EQ(sipHash24(key, nullptr, 0), 0x726fdb47dd0e0e31ull);
  std::uint8_t input[15];
  for (std::uint8_t i = 0; i < 15; ++i) input[i] = i;
  EXPECT_EQ(sipHash24(key, input, sizeof(input)), 0xa129ca6149be45e5ull);
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
  // Frames after a real greeting, sent on that connection.
  auto sendGreeted = [&](std::initializer_list<std::uint8_t> tail) {
    Socket socket = greetedSocket(s.at, s.secret);
    std::vector<std::uint8_t> raw(tail);
    ASSERT_TRUE(socket.sendAll(raw.data(), raw.size(), Clock::now() + 2s));
    std::uint8_t reply[64];
    while (socket.recvAll(reply, 1, Clock::now() + 5s)) {
    }
  };
  sendRaw(s.at, {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P'});      // not a greeting
  sendGreeted({1, 0xff, 0xff, 0xff, 0xff});                    // a 4 GiB key
  sendGreeted({2, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff});        // 4 billion keys
  sendGreeted({77});                                           // no such command
  sendGreeted({1, 1, 0, 0, 0, 'x', 0xff, 0xff, 0xff, 0x7f});   // a 2 GiB value
  EXPECT_EQ(s.server.dropped(), 5u);
  // Random bytes after a proper greeting, from a seed.
  const auto seed = std::random_device{}();
  std::mt19937 random(seed);
  for (int i = 0; i < 20; ++i) {
    std::vector<std::uint8_t> raw;
    const int n = 1 + static_cast<int>(random() % 64);
    for (int j = 0; j < n; ++j) raw.push_back(static_cast<std::uint8_t>(random()));
    // Either dropped or left waiting for the rest of a frame; closing ends it either way.
    Socket socket = greetedSocket(s.at, s.secret);
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

// What this process uses: resident memory (statm) and CPU time.
std::size_t residentBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<std::size_t>(resident) * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

double cpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

TEST(BootstrapStore, AFloodOfIdleConnectionsKeepsNoRankOut) {
  Served s;
  // A stranger (another process: its descriptors are its own) opens 1000 connections that
  // never greet, and holds them.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t stranger = ::fork();
  ASSERT_GE(stranger, 0);
  if (stranger == 0) {
    rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_NOFILE, &limit);
    std::vector<Socket> held;
    for (int i = 0; i < 1000; ++i) {
      try {
        held.push_back(connectTo(s.at, Clock::now() + 2s));
      } catch (...) {
      }
    }
    [[maybe_unused]] ssize_t n = ::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char byte;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  ::close(ready[1]);
  // A rank still gets in at once, and the server holds no more than its cap of strangers.
  const auto start = Clock::now();
  auto rank = s.client(10s);
  rank->set("k", bytes("v"));
  EXPECT_EQ(rank->multiGet({"k"})[0], bytes("v"));
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_LE(s.server.connections(), protocol::kMaxUngreeted + 1);
  // Idle, the store sleeps: no spinning over the strangers' connections.
  const double before = cpuSeconds();
  std::this_thread::sleep_for(1s);
  EXPECT_LT(cpuSeconds() - before, 0.3);
  // The strangers that never greeted are dropped at the greeting's deadline.
  const auto deadline = Clock::now() + protocol::kGreetingDeadline + 5s;
  while (s.server.connections() > 1 && Clock::now() < deadline) std::this_thread::sleep_for(100ms);
  EXPECT_EQ(s.server.connections(), 1u);
  ::kill(stranger, SIGKILL);
  ::waitpid(stranger, nullptr, 0);
  EXPECT_EQ(rank->multiGet({"k"})[0], bytes("v"));
}

TEST(BootstrapStore, AGetWhoseReplyWouldBeHugeIsRefusedAndTheStoreLives) {
  Served s;
  auto a = s.client();
  a->set("big", std::vector<std::uint8_t>(16u << 20, 7));
  std::string message;
  // The same 16 MiB value named 4096 times: 64 GiB of reply, never built.
  const std::vector<std::string> keys(4096, "big");
  EXPECT_EQ(kindOf([&] { a->multiGet(keys); }, message), core::ErrorKind::Store);
  EXPECT_NE(message.find("reply would be"), std::string::npos) << message;
  // The connection and the store go on.
  EXPECT_EQ(a->multiGet({"big"})[0].size(), 16u << 20);
  auto b = s.client();
  EXPECT_EQ(b->multiGet({"big", "big"}).size(), 2u);
}

TEST(BootstrapStore, AClientThatNeverReadsCannotMakeTheServerHoldItsReplies) {
  Served s;
  s.client()->set("big", std::vector<std::uint8_t>(16u << 20, 7));
  // 200 Gets of a 16 MiB value in one write, and nothing read: 3.2 GB of replies if the
  // server answered them all at once.
  Socket slow = greetedSocket(s.at, s.secret);
  protocol::Writer gets;
  for (int i = 0; i < 200; ++i) {
    gets.u8(static_cast<std::uint8_t>(protocol::Command::Get)).u32(1000).u32(1).str(std::string("big"));
  }
  const std::size_t before = residentBytes();
  ASSERT_TRUE(slow.sendAll(gets.bytes().data(), gets.bytes().size(), Clock::now() + 5s));
  std::this_thread::sleep_for(1s);
  EXPECT_LT(residentBytes(), before + (100u << 20));
  // Others are still served.
  EXPECT_EQ(s.client()->multiGet({"big"})[0].size(), 16u << 20);
}

ProcessToken tokenOf(std::uint8_t b) {
  ProcessToken t{};
  t.fill(b);
  return t;
}

TEST(BootstrapStore, ARankJoinedFromTwoLiveProcessesPoisonsTheStoreForEveryone) {
  Served s;
  auto zero = s.client(), one = s.client(), waiting = s.client(5s);
  EXPECT_EQ(zero->join(0, 2, tokenOf(1), "job A rank 0"), 0);
  EXPECT_EQ(one->join(1, 2, tokenOf(2), "job A rank 1"), 0);
  // The same process joins again (a rebuilt communicator): its next generation.
  auto again = s.client();
  EXPECT_EQ(again->join(1, 2, tokenOf(2), "job A rank 1"), 1);
  std::string heard;
  std::thread watch([&] { heard = zero->awaitNotice(-1); });
  std::thread wait([&] {
    std::string message;
    EXPECT_EQ(kindOf([&] { waiting->multiGet({"never"}); }, message), core::ErrorKind::Store);
    EXPECT_NE(message.find("two jobs met"), std::string::npos) << message;
  });
  std::this_thread::sleep_for(100ms);
  // Another process claims rank 1 while the first still runs: another job on this port.
  auto stranger = s.client();
  std::string message;
  EXPECT_EQ(kindOf([&] { stranger->join(1, 2, tokenOf(3), "job B rank 1"); }, message),
            core::ErrorKind::Store);
  for (const char* part : {"two jobs met", "rank 1 joined it twice", "job A rank 1", "job B rank 1",
                           "COMMUX_BOOTSTRAP_SECRET", "port "}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " in " << message;
  }
  watch.join();
  wait.join();
  EXPECT_NE(heard.find("two jobs met"), std::string::npos) << heard;
  // Every later request fails alike, on every connection.
  EXPECT_EQ(kindOf([&] { one->set("k", bytes("v")); }, message), core::ErrorKind::Store);
  EXPECT_NE(message.find("two jobs met"), std::string::npos) << message;
  EXPECT_FALSE(s.server.poisoned().empty());
}

TEST(BootstrapStore, RanksOfTwoSizesPoisonTheStore) {
  Served s;
  auto a = s.client(), b = s.client();
  EXPECT_EQ(a->join(0, 2, tokenOf(1), "job A rank 0"), 0);
  std::string message;
  EXPECT_EQ(kindOf([&] { b->join(3, 4, tokenOf(2), "job B rank 3"); }, message), core::ErrorKind::Store);
  EXPECT_NE(message.find("2-rank job and of a 4-rank job"), std::string::npos) << message;
}

TEST(BootstrapStore, ARankWhoseProcessLeftMayJoinFromAnother) {
  Served s;
  {
    auto first = s.client();
    EXPECT_EQ(first->join(1, 2, tokenOf(1), "rank 1, first life"), 0);
  }  // its connection closes: the process died or destroyed its communicator
  auto restarted = s.client();
  EXPECT_EQ(restarted->join(1, 2, tokenOf(2), "rank 1, restarted"), 1);
  EXPECT_TRUE(s.server.poisoned().empty());
}

TEST(BootstrapStore, AClientNeverMovesToAnotherServerOnItsPort) {
  auto secret = randomSecret();
  auto server = std::make_unique<StoreServer>(resolve("127.0.0.1", 0), secret);
  const auto at = resolve("127.0.0.1", server->port());
  auto joined = std::make_shared<TcpStore>(at, secret, 5s);
  server.reset();
  // The same secret (a job restarted with the same settings), the same port, a new server.
  server = std::make_unique<StoreServer>(at, secret);
  std::string message;
  EXPECT_EQ(kindOf([&] { joined->withPrefix("world/0/"); }, message), core::ErrorKind::Store);
  EXPECT_NE(message.find("is not the one this rank joined"), std::string::npos) << message;
}

TEST(BootstrapStore, TheStoreListensOnlyOnTheAddressItIsGiven) {
  const auto secret = randomSecret();
  StoreServer server(resolve("127.0.0.1", 0), secret);
  // Another address of this host (all of 127/8 is loopback): nothing listens there.
  std::string message;
  EXPECT_EQ(kindOf([&] { connectTo(resolve("127.0.0.2", server.port()), Clock::now() + 300ms); },
                   message),
            core::ErrorKind::Network);
  EXPECT_NO_THROW(TcpStore(resolve("127.0.0.1", server.port()), secret, 2s));
  // A unique id's store: on the address the id names.
  UniqueId id = makeUniqueId("127.0.0.1");
  EXPECT_EQ(id.store.str(), core::concat("127.0.0.1:", id.store.port()));
  EXPECT_EQ(kindOf([&] { connectTo(resolve("127.0.0.2", id.store.port()), Clock::now() + 300ms); },
                   message),
            core::ErrorKind::Network);
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
