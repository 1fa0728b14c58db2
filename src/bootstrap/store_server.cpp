#include "bootstrap/store_server.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"

namespace commux::bootstrap {

using protocol::Command;
using protocol::Reply;

namespace {

// How long the listener rests when the process is out of descriptors (EMFILE): accepting
// again at once would spin on the same error.
constexpr std::chrono::milliseconds kDescriptorPause{100};

Digest digestOf(const Secret& secret, char role, const std::uint8_t* first, const std::uint8_t* second,
                const std::uint8_t* third) {
  std::uint8_t input[1 + 3 * protocol::kNonceBytes];
  input[0] = static_cast<std::uint8_t>(role);
  std::size_t size = 1;
  for (const std::uint8_t* part : {first, second, third}) {
    if (part == nullptr) continue;
    std::memcpy(input + size, part, protocol::kNonceBytes);
    size += protocol::kNonceBytes;
  }
  return keyedDigest(secret, input, size);
}

}  // namespace

Digest serverProof(const Secret& secret, const std::uint8_t* clientNonce,
                   const std::uint8_t* serverNonce, const std::uint8_t* instance) {
  return digestOf(secret, 'S', clientNonce, serverNonce, instance);
}

Digest clientProof(const Secret& secret, const std::uint8_t* serverNonce,
                   const std::uint8_t* clientNonce) {
  return digestOf(secret, 'C', serverNonce, clientNonce, nullptr);
}

struct StoreServer::Connection {
  Socket socket;
  std::uint64_t serial = 0;
  enum class Stage { Hello, Proving, Greeted } stage = Stage::Hello;
  Clock::time_point accepted;
  std::array<std::uint8_t, protocol::kNonceBytes> clientNonce{}, serverNonce{};
  bool member = false;  // joined a rank: told when the store is poisoned
  std::vector<std::uint8_t> in;
  std::vector<std::uint8_t> out;
  std::size_t outSent = 0;
  // A Get that waits for its keys: answered when the last arrives or at its deadline.
  struct Waiting {
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };
  std::optional<Waiting> waiting;
};

StoreServer::StoreServer(const Endpoint& at, const Secret& secret)
    : StoreServer(listenAt(at), secret) {}

StoreServer::StoreServer(Socket listener, const Secret& secret)
    : listener_(std::move(listener)), secret_(secret), instance_(randomBytes16()) {
  port_ = localEndpoint(listener_).port();
  int pipeFds[2];
  COMMUX_CHECK(::pipe2(pipeFds, O_CLOEXEC | O_NONBLOCK) == 0, Runtime,
               "commux: pipe2 failed: ", std::strerror(errno));
  wakeRead_ = Socket(pipeFds[0]);
  wakeWrite_ = Socket(pipeFds[1]);
  ::fcntl(listener_.fd(), F_SETFL, O_NONBLOCK);
  thread_ = std::thread([this] { run(); });
}

StoreServer::~StoreServer() {
  const char stop = 1;
  [[maybe_unused]] ssize_t n = ::write(wakeWrite_.fd(), &stop, 1);
  if (thread_.joinable()) thread_.join();
}

std::uint64_t StoreServer::dropped() const noexcept {
  std::lock_guard<std::mutex> lock(statsMutex_);
  return dropped_;
}

std::size_t StoreServer::connections() const noexcept {
  std::lock_guard<std::mutex> lock(statsMutex_);
  return open_;
}

std::string StoreServer::poisoned() const {
  std::lock_guard<std::mutex> lock(statsMutex_);
  return poisoned_;
}

void StoreServer::noteDropped() {
  std::lock_guard<std::mutex> lock(statsMutex_);
  ++dropped_;
}

bool StoreServer::pending(const Connection& c) const noexcept { return c.outSent < c.out.size(); }

void StoreServer::run() {
  for (;;) {
    pollfd wake{wakeRead_.fd(), POLLIN, 0};
    if (::poll(&wake, 1, 0) > 0) return;  // destroyed
    try {
      serveOnce();
    } catch (const std::exception& e) {
      // Only the loop's own bookkeeping gets here (a connection's failure drops that
      // connection): the store goes on rather than take its process down.
      core::log(core::LogLevel::Warning,
                core::concat("commux: the bootstrap store on port ", port_, ": ", e.what()));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

void StoreServer::serveOnce() {
  std::vector<pollfd> fds;
  auto now = Clock::now();
  const bool listening = now >= listenerPausedUntil_;
  fds.push_back({wakeRead_.fd(), POLLIN, 0});
  fds.push_back({listener_.fd(), static_cast<short>(listening ? POLLIN : 0), 0});
  auto nearest = listening ? Clock::time_point::max() : listenerPausedUntil_;
  // Serials beside the descriptors: accept() may drop a connection and reuse its number.
  std::vector<std::uint64_t> serials(2, 0);
  for (auto& [fd, c] : connections_) {
    serials.push_back(c->serial);
    // One request at a time per connection, and no more input while an answer is still
    // going out: what a connection makes the server hold stays bounded by one reply.
    short events = c->waiting || pending(*c) ? 0 : POLLIN;
    if (pending(*c)) events |= POLLOUT;
    fds.push_back({fd, events, 0});
    if (c->waiting) nearest = std::min(nearest, c->waiting->deadline);
    if (c->stage != Connection::Stage::Greeted) {
      nearest = std::min(nearest, c->accepted + protocol::kGreetingDeadline);
    }
  }
  int timeout = -1;
  if (nearest != Clock::time_point::max()) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(nearest - now).count();
    timeout = static_cast<int>(std::clamp<long long>(left, 0, 60'000));
  }
  const int n = ::poll(fds.data(), fds.size(), timeout);
  if (n < 0 && errno != EINTR) {
    COMMUX_FAIL(Runtime, "poll failed: ", std::strerror(errno));
  }
  if (fds[0].revents != 0) return;  // destroyed: run() sees it
  now = Clock::now();
  if (fds[1].revents & POLLIN) accept(now);
  std::vector<int> drop;
  for (std::size_t i = 2; i < fds.size(); ++i) {
    auto it = connections_.find(fds[i].fd);
    if (it == connections_.end() || it->second->serial != serials[i]) continue;
    Connection& c = *it->second;
    bool keep = true;
    try {
      if (fds[i].revents & (POLLERR | POLLNVAL)) keep = false;
      if (keep && (fds[i].revents & (POLLIN | POLLHUP))) keep = receive(c);
      if (keep && (fds[i].revents & POLLOUT)) keep = flush(c) && pump(c);
    } catch (const std::exception& e) {
      // A request that cannot be served (memory, a bug): that client goes, the store stays.
      core::log(core::LogLevel::Warning,
                core::concat("commux: the bootstrap store on port ", port_,
                             " dropped a connection: ", e.what()));
      noteDropped();
      keep = false;
    }
    if (!keep) drop.push_back(fds[i].fd);
  }
  // Greetings that took too long: a stranger holding a connection open.
  for (auto& [fd, c] : connections_) {
    if (c->stage != Connection::Stage::Greeted && c->accepted + protocol::kGreetingDeadline <= now &&
        std::find(drop.begin(), drop.end(), fd) == drop.end()) {
      noteDropped();
      drop.push_back(fd);
    }
  }
  for (int fd : drop) {
    auto it = connections_.find(fd);
    if (it == connections_.end()) continue;
    const std::uint64_t serial = it->second->serial;
    for (auto claim = claims_.begin(); claim != claims_.end();) {
      claim = claim->second.connection == serial ? claims_.erase(claim) : std::next(claim);
    }
    connections_.erase(it);
  }
  // Deadlines of waiting Gets.
  for (auto& [fd, c] : connections_) {
    if (c->waiting && c->waiting->deadline <= now) tryAnswer(*c, true);
  }
  std::lock_guard<std::mutex> lock(statsMutex_);
  open_ = connections_.size();
}

void StoreServer::dropOldestUngreeted() {
  auto oldest = connections_.end();
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (it->second->stage == Connection::Stage::Greeted) continue;
    if (oldest == connections_.end() || it->second->accepted < oldest->second->accepted) oldest = it;
  }
  if (oldest == connections_.end()) return;
  noteDropped();
  connections_.erase(oldest);
}

void StoreServer::accept(Clock::time_point now) {
  for (;;) {
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: make room from the connections that have not greeted, and
        // rest the listener a moment instead of spinning on the same error.
        dropOldestUngreeted();
        listenerPausedUntil_ = now + kDescriptorPause;
      }
      return;  // EAGAIN, or a connection that went away before it was accepted
    }
    std::size_t ungreeted = 0;
    for (auto& [other, c] : connections_) {
      if (c->stage != Connection::Stage::Greeted) ++ungreeted;
    }
    if (ungreeted >= protocol::kMaxUngreeted) dropOldestUngreeted();
    auto c = std::make_unique<Connection>();
    c->socket = Socket(fd);
    c->serial = nextSerial_++;
    c->accepted = now;
    connections_[fd] = std::move(c);
  }
}

bool StoreServer::receive(Connection& c) {
  std::uint8_t chunk[65536];
  for (;;) {
    const ssize_t n = ::recv(c.socket.fd(), chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      c.in.insert(c.in.end(), chunk, chunk + n);
      if (c.in.size() > protocol::kMaxRequestBytes) {
        noteDropped();
        return false;
      }
      if (static_cast<std::size_t>(n) < sizeof(chunk)) break;
    } else if (n == 0) {
      return false;  // the client left
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else if (errno != EINTR) {
      return false;
    }
  }
  return pump(c);
}

bool StoreServer::pump(Connection& c) {
  while (!c.waiting && !pending(c) && !c.in.empty()) {
    std::size_t used = 0;
    if (!serveOne(c, used)) {
      noteDropped();
      return false;
    }
    if (used == 0) break;  // the rest of the request has not arrived
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(used));
    if (!flush(c)) return false;
  }
  return true;
}

bool StoreServer::greet(Connection& c, std::size_t& used) {
  protocol::Reader r(c.in.data(), c.in.size());
  if (c.stage == Connection::Stage::Hello) {
    std::uint32_t magic = 0;
    std::uint16_t version = 0;
    if (!r.u32(magic)) return true;
    if (magic != protocol::kMagic) return false;
    if (!r.u16(version)) return true;
    if (version != protocol::kVersion) return false;
    if (!r.raw(c.clientNonce.data(), c.clientNonce.size())) return true;
    c.serverNonce = randomBytes16();
    const Digest proof = serverProof(secret_, c.clientNonce.data(), c.serverNonce.data(), instance_.data());
    protocol::Writer challenge;
    challenge.u32(protocol::kMagic).u16(protocol::kVersion);
    challenge.raw(c.serverNonce.data(), c.serverNonce.size()).raw(instance_.data(), instance_.size());
    challenge.raw(proof.data(), proof.size());
    c.out.insert(c.out.end(), challenge.bytes().begin(), challenge.bytes().end());
    c.stage = Connection::Stage::Proving;
  } else {
    Digest proof{};
    if (!r.raw(proof.data(), proof.size())) return true;
    if (!sameDigest(proof, clientProof(secret_, c.serverNonce.data(), c.clientNonce.data()))) {
      return false;  // not this job's secret
    }
    c.stage = Connection::Stage::Greeted;
    c.out.push_back(static_cast<std::uint8_t>(Reply::Ok));
  }
  used = r.consumed(c.in.data());
  return true;
}

void StoreServer::fail(Connection& c, const std::string& why) {
  protocol::Writer reply;
  reply.u8(static_cast<std::uint8_t>(Reply::Failed)).str(why.substr(0, protocol::kMaxTextBytes));
  c.out.insert(c.out.end(), reply.bytes().begin(), reply.bytes().end());
}

bool StoreServer::serveOne(Connection& c, std::size_t& used) {
  if (c.stage != Connection::Stage::Greeted) return greet(c, used);
  const std::uint8_t* start = c.in.data();
  protocol::Reader r(start, c.in.size());
  protocol::Writer reply;
  std::uint8_t command = 0;
  if (!r.u8(command)) return true;
  // Each case returns true with `used` 0 while its request is incomplete, false for a frame
  // that breaks the protocol.
  switch (static_cast<Command>(command)) {
    case Command::Set: {
      std::string key;
      std::vector<std::uint8_t> value;
      if (!r.str(key, protocol::kMaxKeyBytes) || !r.str(value, protocol::kMaxValueBytes)) {
        return !r.bad();
      }
      if (!poisoned_.empty()) {
        fail(c, poisoned_);
        break;
      }
      auto it = values_.find(key);
      const std::size_t before = it == values_.end() ? 0 : key.size() + it->second.size();
      if (storedBytes_ - before + key.size() + value.size() > protocol::kMaxStoredBytes) {
        reply.u8(static_cast<std::uint8_t>(Reply::Refused));
        break;
      }
      storedBytes_ = storedBytes_ - before + key.size() + value.size();
      values_[key] = std::move(value);
      reply.u8(static_cast<std::uint8_t>(Reply::Ok));
      break;
    }
    case Command::Get:
    case Command::Check: {
      std::uint32_t timeoutMs = 0, count = 0;
      if (static_cast<Command>(command) == Command::Get && !r.u32(timeoutMs)) return true;
      if (!r.u32(count)) return true;
      if (count > protocol::kMaxKeys) return false;
      std::vector<std::string> keys;
      for (std::uint32_t i = 0; i < count; ++i) {
        std::string key;
        if (!r.str(key, protocol::kMaxKeyBytes)) return !r.bad();
        keys.push_back(std::move(key));
      }
      if (!poisoned_.empty()) {
        fail(c, poisoned_);
      } else if (static_cast<Command>(command) == Command::Check) {
        bool all = std::all_of(keys.begin(), keys.end(),
                               [&](const std::string& k) { return values_.count(k) != 0; });
        reply.u8(static_cast<std::uint8_t>(Reply::Ok)).u8(all ? 1 : 0);
      } else {
        c.waiting = Connection::Waiting{std::move(keys),
                                        Clock::now() + std::chrono::milliseconds(timeoutMs)};
      }
      break;
    }
    case Command::Add: {
      std::string key;
      std::int64_t delta = 0;
      if (!r.str(key, protocol::kMaxKeyBytes)) return !r.bad();
      if (!r.i64(delta)) return true;
      if (!poisoned_.empty()) {
        fail(c, poisoned_);
        break;
      }
      auto it = values_.find(key);
      std::int64_t now = 0;
      if (it != values_.end() && it->second.size() != sizeof(now)) {
        reply.u8(static_cast<std::uint8_t>(Reply::Refused));
        break;
      }
      if (it == values_.end()) {
        // A new counter is stored bytes like any value.
        if (storedBytes_ + key.size() + sizeof(now) > protocol::kMaxStoredBytes) {
          reply.u8(static_cast<std::uint8_t>(Reply::Refused));
          break;
        }
        storedBytes_ += key.size() + sizeof(now);
        it = values_.emplace(key, std::vector<std::uint8_t>(sizeof(now), 0)).first;
      }
      std::memcpy(&now, it->second.data(), sizeof(now));
      now = static_cast<std::int64_t>(static_cast<std::uint64_t>(now) +
                                      static_cast<std::uint64_t>(delta));
      std::memcpy(it->second.data(), &now, sizeof(now));
      reply.u8(static_cast<std::uint8_t>(Reply::Ok)).i64(now);
      break;
    }
    case Command::Join: {
      std::uint32_t rank = 0, size = 0;
      ProcessToken token{};
      std::string who;
      if (!r.u32(rank) || !r.u32(size) || !r.raw(token.data(), token.size())) return true;
      if (!r.str(who, protocol::kMaxTextBytes)) return !r.bad();
      used = r.consumed(start);
      join(c, rank, size, token, who);
      return true;
    }
    default:
      return false;
  }
  used = r.consumed(start);
  c.out.insert(c.out.end(), reply.bytes().begin(), reply.bytes().end());
  if (c.waiting) tryAnswer(c, false);
  const auto done = static_cast<Command>(command);
  if (done == Command::Set || done == Command::Add) {
    // A value arrived: the Gets that waited for it may be answered now.
    for (auto& [fd, other] : connections_) {
      if (other.get() != &c && other->waiting) {
        tryAnswer(*other, false);
        if (!flush(*other)) other->waiting.reset();  // dropped at its next poll
      }
    }
  }
  return true;
}

bool StoreServer::alive(std::uint64_t serial) {
  for (auto& [fd, c] : connections_) {
    if (c->serial != serial) continue;
    char byte;
    const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    // 0: the peer closed it (its process may have died a moment ago); an error other than
    // "nothing to read" means the same.
    return !(n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR));
  }
  return false;
}

void StoreServer::join(Connection& c, std::uint32_t rank, std::uint32_t size,
                       const ProcessToken& token, const std::string& who) {
  if (!poisoned_.empty()) return fail(c, poisoned_);
  if (size == 0 || rank >= size) {
    return fail(c, core::concat("commux: rank ", rank, " of ", size,
                                " ranks cannot join the bootstrap store on port ", port_));
  }
  if (size_ < 0) size_ = size;
  if (static_cast<std::int64_t>(size) != size_) {
    poison(core::concat("ranks of a ", size_, "-rank job and of a ", size, "-rank job (rank ",
                        rank, ", ", who, ") joined it"));
    return fail(c, poisoned_);
  }
  auto [first, last] = claims_.equal_range(rank);
  for (auto it = first; it != last;) {
    it = alive(it->second.connection) ? std::next(it) : claims_.erase(it);
  }
  std::tie(first, last) = claims_.equal_range(rank);
  for (auto it = first; it != last; ++it) {
    if (it->second.token != token) {
      poison(core::concat("rank ", rank, " joined it twice, from two processes that both run (",
                          it->second.who, "; ", who, ")"));
      return fail(c, poisoned_);
    }
  }
  claims_.emplace(rank, Claim{c.serial, token, who});
  c.member = true;
  const std::int64_t generation = joins_[rank]++;
  protocol::Writer reply;
  reply.u8(static_cast<std::uint8_t>(Reply::Ok)).i64(generation);
  c.out.insert(c.out.end(), reply.bytes().begin(), reply.bytes().end());
}

void StoreServer::poison(const std::string& reason) {
  std::string text = core::concat(
      "commux: two jobs met at the bootstrap store on port ", port_, ": ", reason,
      ". It cannot tell which rank belongs to which job, so every rank that met there fails. "
      "Give each job its own COMMUX_BOOTSTRAP port (or unique id), or set "
      "COMMUX_BOOTSTRAP_SECRET to a text of the job's own on all of its ranks (a launcher's "
      "job id, as torchrun --rdzv-id, mpirun or srun set, serves too)");
  {
    std::lock_guard<std::mutex> lock(statsMutex_);
    poisoned_ = text;
  }
  core::log(core::LogLevel::Warning, poisoned_);
  // Members hear it on the connection they joined from (idle since); waiting Gets end.
  for (auto& [fd, other] : connections_) {
    if (other->member || other->waiting) {
      other->waiting.reset();
      fail(*other, poisoned_);
      flush(*other);
    }
  }
}

void StoreServer::tryAnswer(Connection& c, bool deadlinePassed) {
  const auto& keys = c.waiting->keys;
  protocol::Writer reply;
  std::size_t bytes = 1;
  for (std::uint32_t i = 0; i < keys.size(); ++i) {
    auto it = values_.find(keys[i]);
    if (it == values_.end()) {
      if (!deadlinePassed) return;
      reply.u8(static_cast<std::uint8_t>(Reply::TimedOut)).u32(i);
      c.out.insert(c.out.end(), reply.bytes().begin(), reply.bytes().end());
      c.waiting.reset();
      flush(c);
      return;
    }
    bytes += 4 + it->second.size();
  }
  const std::vector<std::string> asked = std::move(c.waiting->keys);
  c.waiting.reset();
  if (bytes > protocol::kMaxReplyBytes) {
    // Asked for more than one reply may carry (the same large value named many times):
    // refused before anything of it is built.
    fail(c, core::concat("commux: the bootstrap store refuses a get whose reply would be ",
                         bytes, " bytes (at most ", protocol::kMaxReplyBytes, ")"));
  } else {
    reply.u8(static_cast<std::uint8_t>(Reply::Ok));
    for (const auto& key : asked) reply.str(values_.at(key));
    c.out.insert(c.out.end(), reply.bytes().begin(), reply.bytes().end());
  }
  flush(c);
}

bool StoreServer::flush(Connection& c) {
  while (c.outSent < c.out.size()) {
    const ssize_t n = ::send(c.socket.fd(), c.out.data() + c.outSent, c.out.size() - c.outSent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.outSent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;  // the rest when the socket can take it (POLLOUT)
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  c.out.clear();
  c.outSent = 0;
  return true;
}

}  // namespace commux::bootstrap
