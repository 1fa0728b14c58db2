#pragma once
// The UCX endpoints of one worker, one per peer process, made on first use and kept until
// the engine tears down (ranks of several groups share a process, and so its endpoint).
// Worker-lock holders only, but for connected().
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "engine/route.hpp"
#include "ucx/worker.hpp"

namespace commux::engine {

class EndpointCache {
 public:
  /// The error handler an endpoint to `address` gets (none: UCX's peer error handling off).
  using ErrorHandlerFor = std::function<ucx::Endpoint::OnError(const std::string& address)>;
  EndpointCache(ucx::Worker& worker, ErrorHandlerFor errorHandlerFor);

  ucp_ep_h get(const std::string& address);
  /// As get(route.address), remembered in the route: the hot path skips the lookup.
  ucp_ep_h get(const Route& route);
  std::size_t size() const noexcept { return endpoints_.size(); }
  /// Any thread: whether an endpoint to `address` was made (this process has talked to it),
  /// for a message that must not be the one that connects (a peer that may have exited).
  bool connected(const std::string& address) const;
  /// Destroys every endpoint (while the worker still exists).
  void clear();

 private:
  ucx::Worker& worker_;
  ErrorHandlerFor errorHandlerFor_;
  std::unordered_map<std::string, std::unique_ptr<ucx::Endpoint>> endpoints_;
  mutable std::mutex connectedMutex_;  // guards connected_: written once per peer process
  std::unordered_set<std::string> connected_;
};

}  // namespace commux::engine
