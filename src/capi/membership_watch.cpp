#include "capi/membership_watch.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "bootstrap/keyed_digest.hpp"
#include "bootstrap/tcp_store.hpp"
#include "core/error.hpp"

namespace commux::capi {

MembershipWatch::MembershipWatch(std::shared_ptr<bootstrap::TcpStore> membership,
                                 std::function<void(const std::string&)> onNotice)
    : membership_(std::move(membership)) {
  int fds[2];
  COMMUX_CHECK(::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0, Runtime, "commux: pipe2 failed: ",
               std::strerror(errno));
  stopRead_ = bootstrap::Socket(fds[0]);
  stopWrite_ = bootstrap::Socket(fds[1]);
  thread_ = std::thread([this, onNotice = std::move(onNotice)] {
    const std::string notice = membership_->awaitNotice(stopRead_.fd());
    if (!notice.empty()) onNotice(notice);
  });
}

MembershipWatch::~MembershipWatch() {
  const char stop = 1;
  [[maybe_unused]] ssize_t n = ::write(stopWrite_.fd(), &stop, 1);
  if (thread_.joinable()) thread_.join();
}

std::array<std::uint8_t, 16> processToken() {
  static std::mutex mutex;
  static pid_t owner = -1;
  static std::array<std::uint8_t, 16> token{};
  std::lock_guard<std::mutex> lock(mutex);
  if (owner != ::getpid()) {
    token = bootstrap::randomBytes16();
    owner = ::getpid();
  }
  return token;
}

std::string processDescription() {
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  return core::concat("host ", host, " pid ", ::getpid());
}

}  // namespace commux::capi
