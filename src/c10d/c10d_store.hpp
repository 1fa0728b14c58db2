#pragma once
// torch's c10d::Store as the core's KeyValueStore: calls forwarded as they are, torch's store
// errors read as the core's kinds, and where the store is (under any PrefixStore) for errors.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/kv_store.hpp"

namespace commux {

class C10dStore final : public core::KeyValueStore {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override;
  std::vector<std::vector<std::uint8_t>> multiGet(const std::vector<std::string>& keys) override;
  bool check(const std::vector<std::string>& keys) override;
  std::chrono::milliseconds timeout() const override { return store_->getTimeout(); }
  /// c10d::Store::clone, from torch 2.6 on; null before.
  std::shared_ptr<core::KeyValueStore> clone() override;
  /// "a TCPStore at host:port" when it is one, else MASTER_ADDR:MASTER_PORT when set.
  std::string location() const override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace commux
