#pragma once
// A client of the bootstrap store (store_server.hpp): the KeyValueStore the core's Group
// meets its peers through when there is no torch. One request at a time per connection
// (a mutex serialises callers; clone() gives a thread a connection of its own). Every
// answer is checked against the protocol's limits before it is used.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap/socket.hpp"
#include "bootstrap/store_server.hpp"
#include "core/kv_store.hpp"

namespace commux::bootstrap {

class TcpStore : public core::KeyValueStore {
 public:
  using Instance = std::array<std::uint8_t, 16>;

  /// Connects to the store at `server` (retrying until `timeout` while it starts) and
  /// greets it: both sides prove they hold `secret`. Keys are stored under `prefix` (a
  /// group's own names). With `instance`, the server must be that one (not another that
  /// took its port since). Raises Network when it cannot connect, Store when the server is
  /// not the job's (it cannot prove the secret, or it is another instance) or refuses this
  /// client's proof.
  TcpStore(const Endpoint& server, const Secret& secret, std::chrono::milliseconds timeout,
           std::string prefix = "", std::optional<Instance> instance = std::nullopt);

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override;
  std::vector<std::vector<std::uint8_t>> multiGet(const std::vector<std::string>& keys) override;
  bool check(const std::vector<std::string>& keys) override;
  /// Adds `delta` to the 8-byte counter at `key` (0 when missing) and returns its new value.
  std::int64_t add(const std::string& key, std::int64_t delta);
  /// Joins the store as `rank` of `size` from this connection, which must stay open for as
  /// long as the rank's communicator lives (the server tells it when two jobs met there);
  /// returns the rank's joins before this one (its generation). Raises Store with the
  /// server's text when it refuses (two jobs on one port).
  std::int64_t join(std::uint32_t rank, std::uint32_t size, const ProcessToken& token,
                    const std::string& who);
  /// Waits until the server sends a notice on this (joined, otherwise idle) connection and
  /// returns its text; empty when the connection closed or `stopFd` became readable.
  std::string awaitNotice(int stopFd);
  /// A notice already sent on this connection, without waiting; empty when none.
  std::string pendingNotice();
  std::chrono::milliseconds timeout() const override { return timeout_; }
  std::shared_ptr<core::KeyValueStore> clone() override;
  std::string location() const override;

  const std::string& prefix() const noexcept { return prefix_; }
  /// The same server under another prefix (a new connection).
  std::shared_ptr<TcpStore> withPrefix(const std::string& prefix) const;

 private:
  /// Sends `request` and reads its reply's first byte, waiting up to `wait` beyond the
  /// usual round trip; raises Network when the connection breaks.
  std::uint8_t roundTrip(const std::vector<std::uint8_t>& request, std::chrono::milliseconds wait);
  /// Connects and greets; false when the server closed the connection before its challenge
  /// (it was full of connections that had not greeted: try again).
  bool greet(Clock::time_point deadline);
  /// Reads a Failed reply's text (the reply byte read) and raises it as a Store error.
  [[noreturn]] void failed();
  /// The connection's descriptor now (-1 once broken), for a wait outside the lock.
  int currentFd();
  void read(void* data, std::size_t size);
  [[noreturn]] void broken(const char* doing);

  const Endpoint server_;
  const Secret secret_;
  const std::chrono::milliseconds timeout_;
  const std::string prefix_;
  std::mutex mutex_;
  Socket socket_;
  Instance instance_{};
  Clock::time_point replyDeadline_;
};

}  // namespace commux::bootstrap
