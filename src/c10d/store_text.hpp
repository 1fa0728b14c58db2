#pragma once
// Text records in the group's store: what the shared-memory set-up and window
// registrations publish, one key per rank, read back all at once.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace commux {

inline void storePut(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
}

/// One round trip for many keys where the store supports it (TCPStore); waits for them.
inline std::vector<std::string> storeTakeAll(c10d::Store& store,
                                             const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  if (keys.empty()) return out;
  out.reserve(keys.size());
  for (auto& raw : store.multiGet(keys)) out.emplace_back(raw.begin(), raw.end());
  return out;
}

}  // namespace commux
