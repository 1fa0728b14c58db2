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

struct StoreServer::Connection {
  Socket socket;
  bool greeted = false;
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

StoreServer::StoreServer(const Endpoint& at, const Secret& secret) : secret_(secret) {
  listener_ = listenAt(at);
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

void StoreServer::run() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wakeRead_.fd(), POLLIN, 0});
    fds.push_back({listener_.fd(), POLLIN, 0});
    auto nearest = Clock::time_point::max();
    for (auto& [fd, c] : connections_) {
      short events = c->waiting ? 0 : POLLIN;  // one request at a time per connection
      if (c->outSent < c->out.size()) events |= POLLOUT;
      fds.push_back({fd, events, 0});
      if (c->waiting) nearest = std::min(nearest, c->waiting->deadline);
    }
    int timeout = -1;
    if (nearest != Clock::time_point::max()) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(nearest - Clock::now()).count();
      timeout = static_cast<int>(std::clamp<long long>(left, 0, 60'000));
    }
    const int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      core::log(core::LogLevel::Warning,
                core::concat("commux: the bootstrap store stops: poll failed: ", std::strerror(errno)));
      return;
    }
    if (fds[0].revents != 0) return;  // destroyed
    if (fds[1].revents & POLLIN) accept();
    std::vector<int> drop;
    for (std::size_t i = 2; i < fds.size(); ++i) {
      auto it = connections_.find(fds[i].fd);
      if (it == connections_.end()) continue;
      Connection& c = *it->second;
      bool keep = true;
      if (fds[i].revents & (POLLERR | POLLNVAL)) keep = false;
      if (keep && (fds[i].revents & (POLLIN | POLLHUP))) keep = receive(c);
      if (keep && (fds[i].revents & POLLOUT)) keep = flush(c);
      if (!keep) drop.push_back(fds[i].fd);
    }
    for (int fd : drop) connections_.erase(fd);
    // Deadlines of waiting Gets.
    const auto now = Clock::now();
    for (auto& [fd, c] : connections_) {
      if (c->waiting && c->waiting->deadline <= now) tryAnswer(*c, true);
    }
  }
}

void StoreServer::accept() {
  for (;;) {
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a connection that went away before it was accepted
    auto c = std::make_unique<Connection>();
    c->socket = Socket(fd);
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
        std::lock_guard<std::mutex> lock(statsMutex_);
        ++dropped_;
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
  if (!serveRequests(c)) {
    std::lock_guard<std::mutex> lock(statsMutex_);
    ++dropped_;
    return false;
  }
  return flush(c);
}

bool StoreServer::serveRequests(Connection& c) {
  std::size_t used = 0;
  while (!c.waiting && used < c.in.size()) {
    const std::uint8_t* start = c.in.data() + used;
    protocol::Reader r(start, c.in.size() - used);
    protocol::Writer reply;
    if (!c.greeted) {
      std::uint32_t magic = 0;
      std::uint16_t version = 0;
      Secret secret{};
      if (!r.u32(magic)) break;
      if (magic != protocol::kMagic) return false;
      if (!r.u16(version) || !r.raw(secret.data(), secret.size())) break;
      if (version != protocol::kVersion || secret != secret_) return false;
      c.greeted = true;
      reply.u8(static_cast<std::uint8_t>(Reply::Ok));
    } else {
      std::uint8_t command = 0;
      if (!r.u8(command)) break;
      switch (static_cast<Command>(command)) {
        case Command::Set: {
          std::string key;
          std::vector<std::uint8_t> value;
          if (!r.str(key, protocol::kMaxKeyBytes) || !r.str(value, protocol::kMaxValueBytes)) {
            if (r.bad()) return false;
            goto incomplete;
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
          if (static_cast<Command>(command) == Command::Get && !r.u32(timeoutMs)) goto incomplete;
          if (!r.u32(count)) goto incomplete;
          if (count > protocol::kMaxKeys) return false;
          std::vector<std::string> keys(count);
          for (auto& key : keys) {
            if (!r.str(key, protocol::kMaxKeyBytes)) {
              if (r.bad()) return false;
              goto incomplete;
            }
          }
          if (static_cast<Command>(command) == Command::Check) {
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
          if (!r.str(key, protocol::kMaxKeyBytes)) {
            if (r.bad()) return false;
            goto incomplete;
          }
          if (!r.i64(delta)) goto incomplete;
          auto& value = values_[key];
          std::int64_t now = 0;
          if (!value.empty() && value.size() != sizeof(now)) {
            reply.u8(static_cast<std::uint8_t>(Reply::Refused));
            break;
          }
          if (!value.empty()) std::memcpy(&now, value.data(), sizeof(now));
          if (value.empty()) storedBytes_ += key.size() + sizeof(now);
          now = static_cast<std::int64_t>(static_cast<std::uint64_t>(now) +
                                          static_cast<std::uint64_t>(delta));
          value.resize(sizeof(now));
          std::memcpy(value.data(), &now, sizeof(now));
          reply.u8(static_cast<std::uint8_t>(Reply::Ok)).i64(now);
          break;
        }
        default:
          return false;
      }
    }
    used += r.consumed(start);
    c.out.insert(c.out.end(), reply.bytes().begin(), reply.bytes().end());
    if (c.waiting) tryAnswer(c, false);
    if (static_cast<Command>(start[0]) == Command::Set ||
        static_cast<Command>(start[0]) == Command::Add) {
      // A value arrived: the Gets that waited for it may be answered now.
      for (auto& [fd, other] : connections_) {
        if (other.get() != &c && other->waiting) {
          tryAnswer(*other, false);
          if (!flush(*other)) other->waiting.reset();  // dropped at its next poll
        }
      }
    }
  }
incomplete:
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(used));
  return true;
}

void StoreServer::tryAnswer(Connection& c, bool deadlinePassed) {
  auto& keys = c.waiting->keys;
  protocol::Writer reply;
  for (std::uint32_t i = 0; i < keys.size(); ++i) {
    if (values_.count(keys[i]) == 0) {
      if (!deadlinePassed) return;
      reply.u8(static_cast<std::uint8_t>(Reply::TimedOut)).u32(i);
      c.out.insert(c.out.end(), reply.bytes().begin(), reply.bytes().end());
      c.waiting.reset();
      flush(c);
      return;
    }
  }
  reply.u8(static_cast<std::uint8_t>(Reply::Ok));
  for (const auto& key : keys) reply.str(values_[key]);
  c.out.insert(c.out.end(), reply.bytes().begin(), reply.bytes().end());
  c.waiting.reset();
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
