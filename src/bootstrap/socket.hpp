#pragma once
// A TCP connection of the bootstrap store, as an owned file descriptor: whole frames in and
// out before a deadline, so that a peer that stops answering costs a clear error, not a hang.
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace commux::bootstrap {

using Clock = std::chrono::steady_clock;

/// An owned descriptor: closed once, by its last owner.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) noexcept : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() noexcept;

  /// Writes all of [data, data + size) before `deadline`; false when the connection broke
  /// or the deadline passed.
  bool sendAll(const void* data, std::size_t size, Clock::time_point deadline);
  /// Reads exactly `size` bytes before `deadline`; false when the connection closed or broke
  /// first, or the deadline passed.
  bool recvAll(void* data, std::size_t size, Clock::time_point deadline);

 private:
  int fd_ = -1;
};

/// An IPv4 or IPv6 address and port.
struct Endpoint {
  sockaddr_storage address{};
  socklen_t length = 0;
  std::string str() const;  // "10.0.0.1:29500", "[::1]:29500"
  std::uint16_t port() const noexcept;
};

/// `host` (a name or a literal address) and `port`, resolved; raises InvalidArgument when it
/// cannot be.
Endpoint resolve(const std::string& host, std::uint16_t port);
/// "host:port" (IPv6 literals in brackets), resolved; raises InvalidArgument naming `what`.
Endpoint parseHostPort(const std::string& text, const char* what);
/// Connects to `to`, retrying refused connections until `deadline` (the server may not
/// listen yet); raises Network naming the endpoint when it cannot.
Socket connectTo(const Endpoint& to, Clock::time_point deadline);
/// A listening socket on `at` (its port 0: one the system picks); raises Network. With
/// `inUse`, a port another socket holds returns an invalid socket and sets it instead.
Socket listenAt(const Endpoint& at, bool* inUse = nullptr);
/// The address and port a socket is bound to.
Endpoint localEndpoint(const Socket& socket);
/// The address other hosts reach this one at: `chosen` when not empty (a name or a literal
/// address), else the first IPv4 address of an interface that is up and not loopback, else
/// 127.0.0.1.
Endpoint advertisedAddress(const std::string& chosen);

}  // namespace commux::bootstrap
