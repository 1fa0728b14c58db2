#include "bootstrap/tcp_store.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <limits>

#include "bootstrap/store_protocol.hpp"
#include "core/error.hpp"

namespace commux::bootstrap {

using protocol::Command;
using protocol::Reply;

namespace {
// How long past its own wait a reply may take before the connection counts as broken.
constexpr std::chrono::seconds kReplySlack{30};
}  // namespace

TcpStore::TcpStore(const Endpoint& server, const Secret& secret, std::chrono::milliseconds timeout,
                   std::string prefix, std::optional<Instance> instance)
    : server_(server), secret_(secret), timeout_(timeout), prefix_(std::move(prefix)) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto deadline = Clock::now() + timeout_;
  // A server full of connections that never greet drops the oldest: a rank caught in such
  // a flood greets again, for a while (a server of another version closes at once too).
  const auto retryUntil = std::min(deadline, Clock::now() + 3 * protocol::kGreetingDeadline);
  auto pause = std::chrono::milliseconds(1);
  while (!greet(deadline)) {
    COMMUX_CHECK(Clock::now() < retryUntil, Store, "commux: the bootstrap store at ", server_.str(),
                 " closed the connection before it answered the greeting (a server of another "
                 "commux version, or one flooded with connections)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  COMMUX_CHECK(!instance || *instance == instance_, Store, "commux: the bootstrap store at ",
               server_.str(),
               " is not the one this rank joined: its process exited and another serves the "
               "port now");
}

bool TcpStore::greet(Clock::time_point deadline) {
  socket_ = connectTo(server_, deadline);
  const auto clientNonce = randomBytes16();
  protocol::Writer hello;
  hello.u32(protocol::kMagic).u16(protocol::kVersion).raw(clientNonce.data(), clientNonce.size());
  const auto replyBy = Clock::now() + protocol::kGreetingDeadline;
  if (!socket_.sendAll(hello.bytes().data(), hello.bytes().size(), replyBy)) return false;
  std::uint8_t challenge[protocol::kChallengeBytes];
  if (!socket_.recvAll(challenge, sizeof(challenge), replyBy)) return false;
  protocol::Reader r(challenge, sizeof(challenge));
  std::uint32_t magic = 0;
  std::uint16_t version = 0;
  std::array<std::uint8_t, protocol::kNonceBytes> serverNonce{};
  Digest proof{};
  r.u32(magic);
  r.u16(version);
  r.raw(serverNonce.data(), serverNonce.size());
  r.raw(instance_.data(), instance_.size());
  r.raw(proof.data(), proof.size());
  COMMUX_CHECK(magic == protocol::kMagic && version == protocol::kVersion, Store,
               "commux: what listens at ", server_.str(),
               " is not a commux bootstrap store of this version (COMMUX_BOOTSTRAP or the unique id "
               "names the wrong port?)");
  COMMUX_CHECK(sameDigest(proof, serverProof(secret_, clientNonce.data(), serverNonce.data(),
                                             instance_.data())),
               Store, "commux: the bootstrap store at ", server_.str(),
               " belongs to another job: it cannot prove this job's secret. Give each job its "
               "own COMMUX_BOOTSTRAP port (or unique id); the ranks of one job need the same "
               "COMMUX_BOOTSTRAP_SECRET and launcher job id");
  const Digest mine = clientProof(secret_, serverNonce.data(), clientNonce.data());
  std::uint8_t ok = 0xff;
  // The server proved it holds this job's secret, so this proof is right: a connection
  // closed now was dropped (a flood of strangers) or its process left: try again.
  if (!socket_.sendAll(mine.data(), mine.size(), replyBy) || !socket_.recvAll(&ok, 1, replyBy)) {
    return false;
  }
  COMMUX_CHECK(ok == static_cast<std::uint8_t>(Reply::Ok), Store, "commux: the bootstrap store at ",
               server_.str(), " answered the greeting with ", int(ok));
  return true;
}

std::string TcpStore::location() const { return "the bootstrap store at " + server_.str(); }

std::shared_ptr<core::KeyValueStore> TcpStore::clone() { return withPrefix(prefix_); }

std::shared_ptr<TcpStore> TcpStore::withPrefix(const std::string& prefix) const {
  return std::make_shared<TcpStore>(server_, secret_, timeout_, prefix, instance_);
}

void TcpStore::failed() {
  std::uint32_t size = 0;
  read(&size, sizeof(size));
  if (size > protocol::kMaxTextBytes) broken("answering (a text beyond the limit)");
  std::string text(size, '\0');
  if (size) read(text.data(), size);
  COMMUX_FAIL(Store, text, " [", location(), "]");
}

void TcpStore::broken(const char* doing) {
  socket_.reset();
  COMMUX_FAIL(Network, "commux: ", location(), " stopped answering while ", doing,
              " (the process that serves it may have exited)");
}

std::uint8_t TcpStore::roundTrip(const std::vector<std::uint8_t>& request,
                                 std::chrono::milliseconds wait) {
  if (!socket_.valid()) broken("reconnecting");
  const auto start = Clock::now();
  if (!socket_.sendAll(request.data(), request.size(), start + timeout_ + kReplySlack)) {
    broken("sending a request");
  }
  replyDeadline_ = Clock::now() + wait + kReplySlack;
  std::uint8_t reply = 0;
  read(&reply, 1);
  if (reply == static_cast<std::uint8_t>(Reply::Failed)) failed();
  return reply;
}

void TcpStore::read(void* data, std::size_t size) {
  if (!socket_.recvAll(data, size, replyDeadline_)) broken("answering");
}

void TcpStore::set(const std::string& key, const std::vector<std::uint8_t>& value) {
  const std::string name = prefix_ + key;
  COMMUX_CHECK(name.size() <= protocol::kMaxKeyBytes, InvalidArgument, "commux: store key of ",
               name.size(), " bytes is longer than ", protocol::kMaxKeyBytes);
  COMMUX_CHECK(value.size() <= protocol::kMaxValueBytes, InvalidArgument,
               "commux: store value of ", value.size(), " bytes is larger than ",
               protocol::kMaxValueBytes);
  protocol::Writer w;
  w.u8(static_cast<std::uint8_t>(Command::Set)).str(name).str(value);
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint8_t reply = roundTrip(w.bytes(), std::chrono::milliseconds(0));
  COMMUX_CHECK(reply == static_cast<std::uint8_t>(Reply::Ok), Store, "commux: ", location(),
               " refused to store '", name, "' (it holds its limit of ",
               protocol::kMaxStoredBytes, " bytes)");
}

std::vector<std::vector<std::uint8_t>> TcpStore::multiGet(const std::vector<std::string>& keys) {
  COMMUX_CHECK(keys.size() <= protocol::kMaxKeys, InvalidArgument, "commux: ", keys.size(),
               " keys in one store request; at most ", protocol::kMaxKeys);
  protocol::Writer w;
  const auto waitMs = static_cast<std::uint32_t>(
      std::min<long long>(timeout_.count(), std::numeric_limits<std::uint32_t>::max()));
  w.u8(static_cast<std::uint8_t>(Command::Get)).u32(waitMs).u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys) {
    const std::string name = prefix_ + key;
    COMMUX_CHECK(name.size() <= protocol::kMaxKeyBytes, InvalidArgument, "commux: store key of ",
                 name.size(), " bytes is longer than ", protocol::kMaxKeyBytes);
    w.str(name);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint8_t reply = roundTrip(w.bytes(), std::chrono::milliseconds(waitMs));
  if (reply == static_cast<std::uint8_t>(Reply::TimedOut)) {
    std::uint32_t missing = 0;
    read(&missing, sizeof(missing));
    COMMUX_CHECK(missing < keys.size(), Store, "commux: ", location(), " answered out of range");
    COMMUX_FAIL(Store, "commux: wait timeout after ", timeout_.count(), " ms for '",
                keys[missing], "' at ", location());
  }
  COMMUX_CHECK(reply == static_cast<std::uint8_t>(Reply::Ok), Store, "commux: ", location(),
               " answered a get with ", int(reply));
  std::vector<std::vector<std::uint8_t>> values(keys.size());
  for (auto& value : values) {
    std::uint32_t size = 0;
    read(&size, sizeof(size));
    if (size > protocol::kMaxValueBytes) broken("answering (a value beyond the limit)");
    value.resize(size);
    if (size) read(value.data(), size);
  }
  return values;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  COMMUX_CHECK(keys.size() <= protocol::kMaxKeys, InvalidArgument, "commux: ", keys.size(),
               " keys in one store request; at most ", protocol::kMaxKeys);
  protocol::Writer w;
  w.u8(static_cast<std::uint8_t>(Command::Check)).u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys) w.str(prefix_ + key);
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint8_t reply = roundTrip(w.bytes(), std::chrono::milliseconds(0));
  COMMUX_CHECK(reply == static_cast<std::uint8_t>(Reply::Ok), Store, "commux: ", location(),
               " answered a check with ", int(reply));
  std::uint8_t all = 0;
  read(&all, 1);
  return all == 1;
}

std::int64_t TcpStore::join(std::uint32_t rank, std::uint32_t size, const ProcessToken& token,
                            const std::string& who) {
  protocol::Writer w;
  w.u8(static_cast<std::uint8_t>(Command::Join)).u32(rank).u32(size).raw(token.data(), token.size());
  w.str(who.substr(0, protocol::kMaxTextBytes));
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint8_t reply = roundTrip(w.bytes(), std::chrono::milliseconds(0));
  COMMUX_CHECK(reply == static_cast<std::uint8_t>(Reply::Ok), Store, "commux: ", location(),
               " answered a join with ", int(reply));
  std::int64_t generation = 0;
  read(&generation, sizeof(generation));
  return generation;
}

int TcpStore::currentFd() {
  std::lock_guard<std::mutex> lock(mutex_);
  return socket_.fd();
}

std::string TcpStore::pendingNotice() {
  const int fd = currentFd();
  pollfd p{fd, POLLIN, 0};
  if (fd < 0 || ::poll(&p, 1, 0) <= 0) return "";
  return awaitNotice(-1);
}

std::string TcpStore::awaitNotice(int stopFd) {
  const int fd = currentFd();
  if (fd < 0) return "";
  for (;;) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {stopFd, POLLIN, 0}};
    const int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || fds[1].revents != 0) return "";
    break;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint8_t reply = 0;
  replyDeadline_ = Clock::now() + kReplySlack;
  if (!socket_.recvAll(&reply, 1, replyDeadline_)) return "";  // the store went away
  if (reply != static_cast<std::uint8_t>(Reply::Failed)) return "";
  try {
    failed();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  protocol::Writer w;
  w.u8(static_cast<std::uint8_t>(Command::Add)).str(prefix_ + key).i64(delta);
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint8_t reply = roundTrip(w.bytes(), std::chrono::milliseconds(0));
  COMMUX_CHECK(reply == static_cast<std::uint8_t>(Reply::Ok), Store, "commux: ", location(),
               " refused to add to '", prefix_ + key, "', which holds no counter");
  std::int64_t value = 0;
  read(&value, sizeof(value));
  return value;
}

}  // namespace commux::bootstrap
