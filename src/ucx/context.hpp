#pragma once
#include <ucp/api/ucp.h>

#include <string>
#include <vector>

namespace commux::ucx {

/// Owns a ucp_context_h with the tag-matching and wakeup features.
class Context {
 public:
  /// `loopbackOnly`: UCX's network transports use the loopback device alone (UCX's
  /// NET_DEVICES=lo), so nothing listens on an outside interface.
  explicit Context(bool loopbackOnly = false);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ucp_context_h get() const noexcept { return handle_; }
  /// Transport/device pairs UCX can use here, e.g. "posix/memory", "tcp/lo".
  std::vector<std::string> transports() const;

 private:
  ucp_context_h handle_ = nullptr;
};

}  // namespace commux::ucx
