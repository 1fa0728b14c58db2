#include "bootstrap/socket.hpp"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.hpp"

namespace commux::bootstrap {
namespace {

int millisecondsUntil(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  // Wake at least every second: a signal-free way to re-check the deadline.
  return static_cast<int>(std::min<long long>(left.count(), 1000));
}

// Waits until `fd` is ready for `events`; false at the deadline.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int timeout = millisecondsUntil(deadline);
    const int n = ::poll(&p, 1, timeout);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
    if (n == 0 && Clock::now() >= deadline) return false;
  }
}

}  // namespace

void Socket::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool Socket::sendAll(const void* data, std::size_t size, Clock::time_point deadline) {
  auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!waitFor(fd_, POLLOUT, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool Socket::recvAll(void* data, std::size_t size, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd_, p, size, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!waitFor(fd_, POLLIN, deadline)) return false;
    } else {
      return false;  // closed (0) or broken
    }
  }
  return true;
}

std::string Endpoint::str() const {
  char host[INET6_ADDRSTRLEN] = "?";
  std::uint16_t port = 0;
  if (address.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (address.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
    port = ntohs(in->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "(no address)";
}

std::uint16_t Endpoint::port() const noexcept {
  if (address.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return 0;
}

Endpoint resolve(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  COMMUX_CHECK(rc == 0 && found != nullptr, InvalidArgument, "commux: cannot resolve host '", host,
               "': ", ::gai_strerror(rc));
  Endpoint endpoint;
  // The first IPv4 answer where there is one: a name like "localhost" may list ::1 first,
  // where a server bound to an IPv4 address does not listen.
  const addrinfo* chosen = found;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      chosen = a;
      break;
    }
  }
  std::memcpy(&endpoint.address, chosen->ai_addr, chosen->ai_addrlen);
  endpoint.length = static_cast<socklen_t>(chosen->ai_addrlen);
  ::freeaddrinfo(found);
  return endpoint;
}

Endpoint parseHostPort(const std::string& text, const char* what) {
  const auto colon = text.rfind(':');
  COMMUX_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < text.size(),
               InvalidArgument, "commux: ", what, " must be host:port, not '", text, "'");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string portText = text.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  const long port = std::strtol(portText.c_str(), &end, 10);
  COMMUX_CHECK(errno == 0 && end != nullptr && *end == '\0' && port > 0 && port < 65536,
               InvalidArgument, "commux: ", what, " has port '", portText,
               "', which is not a number from 1 to 65535");
  return resolve(host, static_cast<std::uint16_t>(port));
}

Socket connectTo(const Endpoint& to, Clock::time_point deadline) {
  int lastError = 0;
  auto pause = std::chrono::milliseconds(1);
  do {
    Socket s(::socket(to.address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    COMMUX_CHECK(s.valid(), Network, "commux: socket() failed: ", std::strerror(errno));
    if (::connect(s.fd(), reinterpret_cast<const sockaddr*>(&to.address), to.length) == 0) {
      const int one = 1;
      ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return s;
    }
    lastError = errno;
    if (lastError != ECONNREFUSED && lastError != ETIMEDOUT && lastError != EINTR &&
        lastError != ENETUNREACH && lastError != EHOSTUNREACH && lastError != ECONNRESET) {
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  } while (Clock::now() < deadline);
  COMMUX_FAIL(Network, "commux: cannot connect to the bootstrap store at ", to.str(), ": ",
              std::strerror(lastError));
}

Socket listenAt(const Endpoint& at, bool* inUse) {
  Socket s(::socket(at.address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  COMMUX_CHECK(s.valid(), Network, "commux: socket() failed: ", std::strerror(errno));
  const int one = 1;
  ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(s.fd(), reinterpret_cast<const sockaddr*>(&at.address), at.length) != 0) {
    const int error = errno;
    if (inUse != nullptr && error == EADDRINUSE) {
      *inUse = true;
      return Socket();
    }
    COMMUX_FAIL(Network, "commux: cannot listen at ", at.str(), ": ", std::strerror(error),
                error == EADDRNOTAVAIL ? " (the store listens only on the address it is given: "
                                         "name one of this host's)"
                                       : "");
  }
  COMMUX_CHECK(::listen(s.fd(), 1024) == 0, Network, "commux: listen() at ", at.str(),
               " failed: ", std::strerror(errno));
  return s;
}

Endpoint localEndpoint(const Socket& socket) {
  Endpoint endpoint;
  endpoint.length = sizeof(endpoint.address);
  COMMUX_CHECK(::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&endpoint.address),
                             &endpoint.length) == 0,
               Network, "commux: getsockname failed: ", std::strerror(errno));
  return endpoint;
}

Endpoint advertisedAddress(const std::string& chosen) {
  if (!chosen.empty()) return resolve(chosen, 0);
  ifaddrs* list = nullptr;
  Endpoint endpoint = resolve("127.0.0.1", 0);
  if (::getifaddrs(&list) != 0) return endpoint;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    std::memcpy(&endpoint.address, i->ifa_addr, sizeof(sockaddr_in));
    endpoint.length = sizeof(sockaddr_in);
    break;
  }
  ::freeifaddrs(list);
  return endpoint;
}

}  // namespace commux::bootstrap
