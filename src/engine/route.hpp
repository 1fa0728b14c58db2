#pragma once
#include <cstdint>
#include <string>

namespace commux::engine {

/// How to reach one peer of a group: its worker address and the context id it gave the
/// group (which goes into the tag of every message sent to it).
struct Route {
  std::string address;
  std::uint32_t context = 0;
  /// Which of the groups that had `context` at the peer (its ids come back once freed): a
  /// notice names it, so a late one for a destroyed group never reaches its successor.
  std::uint16_t incarnation = 0;
  // The endpoint to `address`, remembered by the EndpointCache that made it (written and
  // read under the worker lock only; endpoints live until the engine tears down).
  mutable void* endpoint = nullptr;
  mutable const void* endpointOwner = nullptr;
};

}  // namespace commux::engine
