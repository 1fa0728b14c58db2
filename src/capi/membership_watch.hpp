#pragma once
// A communicator made by an init keeps the connection it joined the bootstrap store from
// open for its life: the store tells its members there when two jobs met on it (store_
// server.hpp). This thread waits on that connection and hands the notice to the
// communicator, which fails every call from then on: ranks that already formed a
// communicator with another job's ranks must not go on exchanging data.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "bootstrap/socket.hpp"

namespace commux::bootstrap {
class TcpStore;
}

namespace commux::capi {

class MembershipWatch {
 public:
  /// Watches `membership` (joined); `onNotice` runs on the watch's thread, once.
  MembershipWatch(std::shared_ptr<bootstrap::TcpStore> membership,
                  std::function<void(const std::string&)> onNotice);
  /// Stops the thread and closes the membership (the store releases the rank).
  ~MembershipWatch();
  MembershipWatch(const MembershipWatch&) = delete;
  MembershipWatch& operator=(const MembershipWatch&) = delete;

 private:
  std::shared_ptr<bootstrap::TcpStore> membership_;
  bootstrap::Socket stopRead_, stopWrite_;
  std::thread thread_;
};

/// 16 random bytes that name this process to the store (a forked child gets its own).
std::array<std::uint8_t, 16> processToken();
/// "host NAME pid N": how the store names a joining process in its errors.
std::string processDescription();

}  // namespace commux::capi
