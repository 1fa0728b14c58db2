#pragma once
// The bootstrap store's server: a key-value store over TCP that ranks without torch meet
// through (the C API's unique id names it; COMMUX_BOOTSTRAP=host:port names it for an init
// from the environment). It runs on a thread of its own in one process of the job and
// serves until destroyed. A connection that cannot prove it holds the job's secret, sends a
// frame that breaks the protocol's limits, or takes too long to greet, is dropped; nothing
// it sends is trusted, and a connection whose handling fails is dropped alone.
//
// It also keeps two jobs that meet on one port from forming one communicator when they
// share a secret (no launcher job id and no COMMUX_BOOTSTRAP_SECRET): each rank joins
// (Join) from a connection it keeps open for as long as its communicator lives, and a
// rank joined from two live processes, or ranks of different sizes, poison the store: every
// member is told, every request from then on fails, with a text that names the port and
// what to set.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/keyed_digest.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/store_protocol.hpp"

namespace commux::bootstrap {

using Secret = std::array<std::uint8_t, protocol::kSecretBytes>;
/// Who joins: random per process (a restarted process is another), and a text for errors.
using ProcessToken = std::array<std::uint8_t, 16>;

/// The greeting's proofs (store_protocol.hpp): the server's over the client's nonce, its
/// own and its instance; the client's over the two nonces.
Digest serverProof(const Secret& secret, const std::uint8_t* clientNonce,
                   const std::uint8_t* serverNonce, const std::uint8_t* instance);
Digest clientProof(const Secret& secret, const std::uint8_t* serverNonce,
                   const std::uint8_t* clientNonce);

class StoreServer {
 public:
  /// Listens at `at` (port 0: one the system picks); raises Network when it cannot.
  StoreServer(const Endpoint& at, const Secret& secret);
  /// Serves on `listener`, bound and listening.
  StoreServer(Socket listener, const Secret& secret);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  /// The port it listens on.
  std::uint16_t port() const noexcept { return port_; }
  /// Connections it dropped for a failed greeting, a malformed frame, a greeting that took
  /// too long or room for a newer one (for tests).
  std::uint64_t dropped() const noexcept;
  /// Connections open now, greeted or not (for tests).
  std::size_t connections() const noexcept;
  /// Why the store refuses everything (two jobs met on it); empty while it serves.
  std::string poisoned() const;

 private:
  struct Connection;
  struct Claim {
    std::uint64_t connection;
    ProcessToken token;
    std::string who;
  };
  void run();
  void serveOnce();
  void accept(Clock::time_point now);
  void dropOldestUngreeted();
  /// Reads what arrived and answers the requests it completes; false: drop the connection.
  bool receive(Connection& c);
  /// Answers buffered requests while the last answer is out; false: drop the connection.
  bool pump(Connection& c);
  /// Serves the one request at the front of `c.in`: false to drop `c`; `used` is left 0
  /// while the request is incomplete.
  bool serveOne(Connection& c, std::size_t& used);
  bool greet(Connection& c, std::size_t& used);
  void join(Connection& c, std::uint32_t rank, std::uint32_t size, const ProcessToken& token,
            const std::string& who);
  void poison(const std::string& reason);
  /// A Failed reply carrying `why` on `c`.
  void fail(Connection& c, const std::string& why);
  /// Answers `c`'s waiting Get when it can (its keys are there, or its deadline passed).
  void tryAnswer(Connection& c, bool deadlinePassed);
  bool flush(Connection& c);
  bool pending(const Connection& c) const noexcept;
  /// Whether the connection with this serial is open and its peer has not closed it.
  bool alive(std::uint64_t serial);
  void noteDropped();

  Socket listener_;
  Socket wakeRead_, wakeWrite_;
  std::uint16_t port_ = 0;
  const Secret secret_;
  const std::array<std::uint8_t, 16> instance_;
  std::map<std::string, std::vector<std::uint8_t>> values_;
  std::size_t storedBytes_ = 0;
  std::map<int, std::unique_ptr<Connection>> connections_;
  std::uint64_t nextSerial_ = 1;
  Clock::time_point listenerPausedUntil_{};
  // Joins: the size the first one named, the live claims per rank, the joins per rank
  // (a rank's n-th join meets the others' n-th: rebuilt communicators meet apart).
  std::int64_t size_ = -1;
  std::multimap<std::uint32_t, Claim> claims_;
  std::map<std::uint32_t, std::int64_t> joins_;
  mutable std::mutex statsMutex_;
  std::uint64_t dropped_ = 0;
  std::size_t open_ = 0;
  std::string poisoned_;
  std::thread thread_;
};

}  // namespace commux::bootstrap
