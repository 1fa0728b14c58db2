#pragma once
#include <cstdint>
#include <string>

namespace commux::engine {

/// How to reach one peer of a group: its worker address and the context id it gave the
/// group (which goes into the tag of every message sent to it).
struct Route {
  std::string address;
  std::uint32_t context = 0;
};

}  // namespace commux::engine
