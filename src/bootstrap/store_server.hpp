#pragma once
// The bootstrap store's server: a key-value store over TCP that ranks without torch meet
// through (the C API's unique id names it; COMMUX_BOOTSTRAP=host:port names it for an init
// from the environment). It runs on a thread of its own in one process of the job and
// serves until destroyed. A connection that does not greet it with the job's secret, or
// sends a frame that breaks the protocol's limits, is dropped; nothing it sends is trusted.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "bootstrap/socket.hpp"
#include "bootstrap/store_protocol.hpp"

namespace commux::bootstrap {

using Secret = std::array<std::uint8_t, protocol::kSecretBytes>;

class StoreServer {
 public:
  /// Listens at `at` (port 0: one the system picks); raises Network when it cannot.
  StoreServer(const Endpoint& at, const Secret& secret);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  /// The port it listens on.
  std::uint16_t port() const noexcept { return port_; }
  /// Connections it dropped for a wrong secret or a malformed frame (for tests).
  std::uint64_t dropped() const noexcept;

 private:
  struct Connection;
  void run();
  void accept();
  /// Reads what arrived and answers the requests it completes; false: drop the connection.
  bool receive(Connection& c);
  bool serveRequests(Connection& c);
  /// Answers `c`'s waiting Get when it can (its keys are there, or its deadline passed).
  void tryAnswer(Connection& c, bool deadlinePassed);
  bool flush(Connection& c);

  Socket listener_;
  Socket wakeRead_, wakeWrite_;
  std::uint16_t port_ = 0;
  const Secret secret_;
  std::map<std::string, std::vector<std::uint8_t>> values_;
  std::size_t storedBytes_ = 0;
  std::map<int, std::unique_ptr<Connection>> connections_;
  mutable std::mutex statsMutex_;
  std::uint64_t dropped_ = 0;
  std::thread thread_;
};

}  // namespace commux::bootstrap
