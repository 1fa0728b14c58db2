#pragma once
#include <ucp/api/ucp.h>

#include <string>

#include "ucx/context.hpp"

namespace commux::ucx {

/// Owns a UCS_THREAD_MODE_SERIALIZED ucp_worker_h: threads may drive it in turn, never at
/// once (the engine's worker lock ensures that); only signal() is safe without the lock.
class Worker {
 public:
  explicit Worker(const Context& context);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  ucp_worker_h get() const noexcept { return handle_; }
  /// The packed worker address peers connect to.
  const std::string& address() const noexcept { return address_; }
  /// File descriptor that becomes readable when the worker has events; -1 if the
  /// transports in use cannot wake a sleeper.
  int eventFd() const noexcept { return eventFd_; }

  unsigned progress() { return ucp_worker_progress(handle_); }
  /// Arms the event fd. Returns false when events are already pending (progress again).
  bool arm();
  /// Wakes a thread sleeping on the event fd. Safe from any thread.
  void signal();

 private:
  ucp_worker_h handle_ = nullptr;
  std::string address_;
  int eventFd_ = -1;
};

/// Owns an endpoint to a remote worker. Destroy it on the worker's thread.
class Endpoint {
 public:
  Endpoint(Worker& worker, const std::string& remoteAddress);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  ucp_ep_h get() const noexcept { return handle_; }

 private:
  Worker& worker_;
  ucp_ep_h handle_ = nullptr;
};

}  // namespace commux::ucx
