#include "bootstrap/unique_id.hpp"

#include <arpa/inet.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "bootstrap/keyed_digest.hpp"
#include "core/error.hpp"

namespace commux::bootstrap {
namespace {

constexpr std::uint32_t kIdMagic = 0x44495843;  // "CXID"
constexpr std::uint16_t kIdVersion = 1;

// Layout: magic u32, version u16, family u16 (4 or 6), port u16 (network order), two bytes
// zero, address (16 bytes; IPv4 in the first 4), secret (16 bytes), zeros to the end.
constexpr std::size_t kAddressAt = 12;
constexpr std::size_t kSecretAt = kAddressAt + 16;
static_assert(kSecretAt + protocol::kSecretBytes <= kUniqueIdBytes);

// The stores this process serves: they must outlive every communicator that meets through
// them, and a process cannot tell when the last peer is done with its store.
std::mutex& serversMutex() {
  static std::mutex m;
  return m;
}
std::vector<std::unique_ptr<StoreServer>>& servers() {
  static auto* list = new std::vector<std::unique_ptr<StoreServer>>();  // never destroyed:
  // a thread of the server must not run while static destructors free what it uses.
  return *list;
}

}  // namespace

void encode(const UniqueId& id, char (&out)[kUniqueIdBytes]) {
  std::memset(out, 0, kUniqueIdBytes);
  std::memcpy(out, &kIdMagic, 4);
  std::memcpy(out + 4, &kIdVersion, 2);
  const std::uint16_t family = id.store.address.ss_family == AF_INET6 ? 6 : 4;
  std::memcpy(out + 6, &family, 2);
  const std::uint16_t port = htons(id.store.port());
  std::memcpy(out + 8, &port, 2);
  if (family == 4) {
    std::memcpy(out + kAddressAt,
                &reinterpret_cast<const sockaddr_in*>(&id.store.address)->sin_addr, 4);
  } else {
    std::memcpy(out + kAddressAt,
                &reinterpret_cast<const sockaddr_in6*>(&id.store.address)->sin6_addr, 16);
  }
  std::memcpy(out + kSecretAt, id.secret.data(), id.secret.size());
}

UniqueId decode(const char (&bytes)[kUniqueIdBytes]) {
  std::uint32_t magic = 0;
  std::uint16_t version = 0, family = 0, port = 0;
  std::memcpy(&magic, bytes, 4);
  std::memcpy(&version, bytes + 4, 2);
  std::memcpy(&family, bytes + 6, 2);
  std::memcpy(&port, bytes + 8, 2);
  port = ntohs(port);
  COMMUX_CHECK(magic == kIdMagic, InvalidArgument,
               "commux: the unique id is not one (made by commuxGetUniqueId, then copied whole "
               "to every rank?)");
  COMMUX_CHECK(version == kIdVersion, InvalidArgument, "commux: the unique id is of version ",
               version, "; this commux reads version ", kIdVersion);
  COMMUX_CHECK((family == 4 || family == 6) && port != 0, InvalidArgument,
               "commux: the unique id is damaged (address family ", family, ", port ", port, ")");
  UniqueId id;
  if (family == 4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&id.store.address);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    std::memcpy(&in->sin_addr, bytes + kAddressAt, 4);
    id.store.length = sizeof(sockaddr_in);
  } else {
    auto* in = reinterpret_cast<sockaddr_in6*>(&id.store.address);
    in->sin6_family = AF_INET6;
    in->sin6_port = htons(port);
    std::memcpy(&in->sin6_addr, bytes + kAddressAt, 16);
    id.store.length = sizeof(sockaddr_in6);
  }
  std::memcpy(id.secret.data(), bytes + kSecretAt, id.secret.size());
  return id;
}

Secret randomSecret() { return randomBytes16(); }

UniqueId makeUniqueId(const std::string& address) {
  UniqueId id;
  id.secret = randomSecret();
  id.store = advertisedAddress(address);
  // Only the address the id names: a store of a job on a private network is not served on
  // every other interface of the host.
  std::lock_guard<std::mutex> lock(serversMutex());
  auto server = std::make_unique<StoreServer>(id.store, id.secret);
  const std::uint16_t port = htons(server->port());
  if (id.store.address.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&id.store.address)->sin6_port = port;
  } else {
    reinterpret_cast<sockaddr_in*>(&id.store.address)->sin_port = port;
  }
  servers().push_back(std::move(server));
  return id;
}

bool servesPort(std::uint16_t port) {
  std::lock_guard<std::mutex> lock(serversMutex());
  for (const auto& s : servers()) {
    if (s->port() == port) return true;
  }
  return false;
}

bool serveStore(const Endpoint& at, const Secret& secret) {
  std::lock_guard<std::mutex> lock(serversMutex());
  const std::uint16_t port = at.port();
  for (const auto& s : servers()) {
    if (s->port() == port) return true;
  }
  bool inUse = false;
  Socket listener = listenAt(at, &inUse);
  if (inUse) return false;
  servers().push_back(std::make_unique<StoreServer>(std::move(listener), secret));
  return true;
}

}  // namespace commux::bootstrap
