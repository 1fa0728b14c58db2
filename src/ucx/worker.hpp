#pragma once
#include <ucp/api/ucp.h>

#include <functional>
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
  /// Called from inside the worker's progress when UCX finds the peer unreachable.
  using OnError = std::function<void(ucs_status_t)>;
  /// With `onError`, the endpoint uses UCX's peer error handling (UCP_ERR_HANDLING_MODE_PEER,
  /// with keepalive), which limits UCX to transports that can detect a failed peer; without,
  /// UCX may pick any transport and never reports a dead peer.
  Endpoint(Worker& worker, const std::string& remoteAddress, OnError onError = nullptr);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  ucp_ep_h get() const noexcept { return handle_; }

 private:
  static void errorCallback(void* arg, ucp_ep_h ep, ucs_status_t status);

  Worker& worker_;
  OnError onError_;
  ucp_ep_h handle_ = nullptr;
};

}  // namespace commux::ucx
