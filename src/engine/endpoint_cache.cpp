#include "engine/endpoint_cache.hpp"

namespace commux::engine {

EndpointCache::EndpointCache(ucx::Worker& worker, ErrorHandlerFor errorHandlerFor)
    : worker_(worker), errorHandlerFor_(std::move(errorHandlerFor)) {}

ucp_ep_h EndpointCache::get(const std::string& address) {
  auto it = endpoints_.find(address);
  if (it == endpoints_.end()) {
    auto endpoint = std::make_unique<ucx::Endpoint>(worker_, address, errorHandlerFor_(address));
    it = endpoints_.emplace(address, std::move(endpoint)).first;
    std::lock_guard<std::mutex> lock(connectedMutex_);
    connected_.insert(address);
  }
  return it->second->get();
}

bool EndpointCache::connected(const std::string& address) const {
  std::lock_guard<std::mutex> lock(connectedMutex_);
  return connected_.count(address) != 0;
}

ucp_ep_h EndpointCache::get(const Route& route) {
  // The hint names its cache: a route is only ever used with its group's engine, but a
  // hint from another cache must never be taken for one of ours.
  if (route.endpointOwner == this) return static_cast<ucp_ep_h>(route.endpoint);
  ucp_ep_h endpoint = get(route.address);
  route.endpoint = endpoint;
  route.endpointOwner = this;
  return endpoint;
}

void EndpointCache::clear() {
  endpoints_.clear();
  std::lock_guard<std::mutex> lock(connectedMutex_);
  connected_.clear();
}

}  // namespace commux::engine
