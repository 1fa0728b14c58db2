#include "engine/peer_watch.hpp"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

namespace commux::engine {
namespace {

int pidfdOpen(std::int32_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

PeerWatch::PeerWatch(Notify onFailure) : notify_(std::move(onFailure)) {
  epollFd_ = ::epoll_create1(EPOLL_CLOEXEC);
  eventFd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = eventFd_;
  if (epollFd_ < 0 || eventFd_ < 0 || ::epoll_ctl(epollFd_, EPOLL_CTL_ADD, eventFd_, &ev) != 0) {
    if (eventFd_ >= 0) ::close(eventFd_);
    if (epollFd_ >= 0) ::close(epollFd_);
    throw std::runtime_error("commux: cannot set up the peer watch (epoll/eventfd)");
  }
  thread_ = std::thread([this] { run(); });
}

PeerWatch::~PeerWatch() {
  stopping_.store(true);
  wake();
  thread_.join();
  for (const auto& entry : byFd_) ::close(entry.first);
  ::close(eventFd_);
  ::close(epollFd_);
}

void PeerWatch::wake() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(eventFd_, &one, sizeof(one));
}

bool PeerWatch::watch(const std::string& key, const ProcessId& id) {
  if (id.pid <= 0 || id.pidSpace.empty() || id.pidSpace != ProcessId::localPidSpace()) return false;
  const auto gone = [&] {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      watched_.insert(key);
    }
    report(key, "its process (pid " + std::to_string(id.pid) + ") no longer exists");
    return true;
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (watched_.count(key) != 0) return true;
  }
  const int fd = pidfdOpen(id.pid);
  if (fd < 0) {
    if (errno != ESRCH) return false;  // no pidfd here (old kernel, seccomp): not watched
    return gone();
  }
  // The pidfd pins whatever process has this pid now: if ours died before we opened it and
  // the pid went to a newcomer, the start times differ.
  if (id.startTicks != 0 && ProcessId::startTicksOf(id.pid) != id.startTicks) {
    ::close(fd);
    return gone();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!watched_.insert(key).second) {
    ::close(fd);
    return true;
  }
  byFd_.emplace(fd, Watched{key, id.pid});
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  ::epoll_ctl(epollFd_, EPOLL_CTL_ADD, fd, &ev);
  return true;
}

void PeerWatch::report(const std::string& key, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failed_.insert(key).second) return;
    queued_.emplace_back(key, why);
  }
  wake();
}

bool PeerWatch::failed(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_.count(key) != 0;
}

void PeerWatch::run() {
  pthread_setname_np(pthread_self(), "commux-watch");
  epoll_event events[16];
  while (!stopping_.load()) {
    const int n = ::epoll_wait(epollFd_, events, 16, -1);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == eventFd_) {
        std::uint64_t count = 0;
        [[maybe_unused]] const auto r = ::read(eventFd_, &count, sizeof(count));
        continue;
      }
      Watched who;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = byFd_.find(fd);
        if (it == byFd_.end()) continue;
        who = it->second;
        byFd_.erase(it);
      }
      ::epoll_ctl(epollFd_, EPOLL_CTL_DEL, fd, nullptr);
      ::close(fd);
      report(who.key, "its process (pid " + std::to_string(who.pid) + ") exited");
    }
    std::vector<std::pair<std::string, std::string>> batch;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      batch.swap(queued_);
    }
    for (const auto& entry : batch) notify_(entry.first, entry.second);
  }
}

}  // namespace commux::engine
