#include "c10d/c10d_store.hpp"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <type_traits>
#include <utility>

#include "core/error.hpp"

namespace commux {
namespace {

template <typename S, typename = void>
struct CanClone : std::false_type {};
template <typename S>
struct CanClone<S, std::void_t<decltype(std::declval<S&>().clone())>> : std::true_type {};

// A template, so that the call is compiled only where c10d::Store has it (torch 2.6 on).
template <typename S>
c10::intrusive_ptr<c10d::Store> cloneOf(S& store) {
  if constexpr (CanClone<S>::value) {
    return store.clone();
  } else {
    return {};
  }
}

// torch's store errors as the core's kinds (the adapter's factory makes them torch's again,
// with the same text); anything else goes through as it is.
template <typename Call>
auto translated(Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const c10::DistNetworkError& e) {
    COMMUX_FAIL(Network, e.what_without_backtrace());
  } catch (const c10::DistStoreError& e) {
    COMMUX_FAIL(Store, e.what_without_backtrace());
  }
}

}  // namespace

void C10dStore::set(const std::string& key, const std::vector<std::uint8_t>& value) {
  translated([&] { store_->set(key, value); });
}

std::vector<std::vector<std::uint8_t>> C10dStore::multiGet(const std::vector<std::string>& keys) {
  return translated([&] { return store_->multiGet(keys); });
}

bool C10dStore::check(const std::vector<std::string>& keys) {
  return translated([&] { return store_->check(keys); });
}

std::shared_ptr<core::KeyValueStore> C10dStore::clone() {
  auto own = translated([&] { return cloneOf(*store_); });
  if (!own) return nullptr;
  return std::make_shared<C10dStore>(std::move(own));
}

std::string C10dStore::location() const {
  c10::intrusive_ptr<c10d::Store> base = store_;
  while (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(base.get())) {
    base = prefixed->getUnderlyingStore();
  }
  if (const auto* tcp = dynamic_cast<const c10d::TCPStore*>(base.get())) {
    return "a TCPStore at " + tcp->getHost() + ":" + std::to_string(tcp->getPort());
  }
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (addr == nullptr || *addr == '\0') return "";
  return std::string("MASTER_ADDR:MASTER_PORT = ") + addr + ":" +
         (port != nullptr && *port != '\0' ? port : "(unset)");
}

}  // namespace commux
