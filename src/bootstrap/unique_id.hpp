#pragma once
// The C API's unique id: where a job's bootstrap store listens and the secret that lets its
// ranks in, in the 128 opaque bytes the application passes around. Decoding checks every
// field: an id of another version, or bytes that are not an id, are refused with a clear
// error instead of a connection to an address read from garbage.
#include <cstddef>
#include <memory>
#include <string>

#include "bootstrap/socket.hpp"
#include "bootstrap/store_server.hpp"

namespace commux::bootstrap {

inline constexpr std::size_t kUniqueIdBytes = 128;

struct UniqueId {
  Endpoint store;
  Secret secret{};
};

void encode(const UniqueId& id, char (&out)[kUniqueIdBytes]);
/// Raises InvalidArgument for bytes that are not an id of this version.
UniqueId decode(const char (&bytes)[kUniqueIdBytes]);

/// A fresh id whose store this process serves, from now until it exits, on
/// advertisedAddress(`address`) alone, which the id names.
UniqueId makeUniqueId(const std::string& address);
/// Serves a store at `at` (COMMUX_BOOTSTRAP's address and port, that address only) until
/// the process exits, unless this process already serves one on that port; false when
/// another process holds the port (another job's store, or this job's served elsewhere).
bool serveStore(const Endpoint& at, const Secret& secret);
/// Whether this process serves a store on `port` (made by makeUniqueId or serveStore).
bool servesPort(std::uint16_t port);
/// 16 random bytes from the system.
Secret randomSecret();

}  // namespace commux::bootstrap
