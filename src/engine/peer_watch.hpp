#pragma once
// Watches peer processes for death, so that a crashed rank becomes an error on every
// survivor within milliseconds instead of a wait until the group timeout.
//
// A peer in this process's PID namespace on this kernel is watched through a pidfd: the
// kernel makes it readable the moment the process exits (SIGKILL and OOM kills included),
// and watching costs nothing on the data path. Failures found elsewhere (UCX's peer error
// handling for endpoints to other hosts) are reported here too, so that every failure
// reaches the process groups one way, on this watch thread.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/process_id.hpp"

namespace commux::engine {

class PeerWatch {
 public:
  /// `onFailure(key, why)` runs on the watch thread, once per failed key.
  using Notify = std::function<void(const std::string& key, const std::string& why)>;

  explicit PeerWatch(Notify onFailure);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  /// Any thread: watch the process `id` under `key` (a worker address). False when the
  /// process cannot be watched from here (another host or PID namespace, no pidfd): then
  /// the caller must rely on another detector. A key already known is not watched twice.
  bool watch(const std::string& key, const ProcessId& id);
  /// Any thread, including UCX callbacks: `key` failed for reason `why`. Never blocks on
  /// the watch thread's listeners.
  void report(const std::string& key, const std::string& why);
  /// True once `key` was reported failed.
  bool failed(const std::string& key) const;
  /// True on the watch's own thread (where the failure callback runs).
  bool onThread() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void run();
  void wake();

  Notify notify_;
  int epollFd_ = -1;
  int eventFd_ = -1;
  mutable std::mutex mutex_;
  struct Watched {
    std::string key;
    std::int32_t pid = 0;
  };
  std::map<int, Watched> byFd_;                              // by pidfd
  std::set<std::string> watched_;                            // keys with a pidfd (or found dead)
  std::set<std::string> failed_;                             // keys reported (notified or queued)
  std::vector<std::pair<std::string, std::string>> queued_;  // reports to deliver
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace commux::engine
