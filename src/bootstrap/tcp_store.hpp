#pragma once
// A client of the bootstrap store (store_server.hpp): the KeyValueStore the core's Group
// meets its peers through when there is no torch. One request at a time per connection
// (a mutex serialises callers; clone() gives a thread a connection of its own). Every
// answer is checked against the protocol's limits before it is used.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/socket.hpp"
#include "bootstrap/store_server.hpp"
#include "core/kv_store.hpp"

namespace commux::bootstrap {

class TcpStore : public core::KeyValueStore {
 public:
  /// Connects to the store at `server` (retrying until `timeout` while it starts) and
  /// greets it with `secret`; keys are stored under `prefix` (a group's own names).
  /// Raises Network when it cannot connect, Store when the server refuses the greeting.
  TcpStore(const Endpoint& server, const Secret& secret, std::chrono::milliseconds timeout,
           std::string prefix = "");

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override;
  std::vector<std::vector<std::uint8_t>> multiGet(const std::vector<std::string>& keys) override;
  bool check(const std::vector<std::string>& keys) override;
  /// Adds `delta` to the 8-byte counter at `key` (0 when missing) and returns its new value.
  std::int64_t add(const std::string& key, std::int64_t delta);
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
  void read(void* data, std::size_t size);
  [[noreturn]] void broken(const char* doing);

  const Endpoint server_;
  const Secret secret_;
  const std::chrono::milliseconds timeout_;
  const std::string prefix_;
  std::mutex mutex_;
  Socket socket_;
  Clock::time_point replyDeadline_;
};

}  // namespace commux::bootstrap
