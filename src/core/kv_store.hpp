#pragma once
// The key-value store ranks meet through: where each publishes its address and the
// set-ups exchange what they agree on. A front end wraps its own (torch's c10d::Store in the
// adapter); the core only needs these calls. Values are bytes.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace commux::core {

/// Failures are core errors (core/error.hpp): Network when the store cannot be reached,
/// Store when a wait ran out of the store's timeout.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  virtual void set(const std::string& key, const std::vector<std::uint8_t>& value) = 0;
  /// Waits up to timeout() for every key, then returns their values in order: one round
  /// trip for all of them where the store can (TCPStore), not one per key.
  virtual std::vector<std::vector<std::uint8_t>> multiGet(const std::vector<std::string>& keys) = 0;
  /// Whether every key is there now; never waits.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  /// Another connection to the same store, for a thread of its own (a TCPStore client serves
  /// one request at a time, and a wait holds it); null where the store cannot make one.
  virtual std::shared_ptr<KeyValueStore> clone() { return nullptr; }
  /// Where the store is, for errors ("a TCPStore at host:port"); empty when unknown.
  virtual std::string location() const { return ""; }
};

/// A connection of `store`'s own (clone) where it can make one, else `store` itself.
inline std::shared_ptr<KeyValueStore> ownConnection(const std::shared_ptr<KeyValueStore>& store) {
  try {
    if (auto own = store->clone()) return own;
  } catch (const std::exception&) {
    // A store that cannot make another connection now (its host is gone): share this one.
  }
  return store;
}

/// Text values: what the set-ups publish.
inline void putText(KeyValueStore& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
}

inline std::vector<std::string> takeAllText(KeyValueStore& store,
                                            const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  if (keys.empty()) return out;
  out.reserve(keys.size());
  for (auto& raw : store.multiGet(keys)) out.emplace_back(raw.begin(), raw.end());
  return out;
}

}  // namespace commux::core
