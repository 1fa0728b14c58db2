#pragma once
// An in-process KeyValueStore for core tests: waits as a real store does (up to its
// timeout, then a Store error), and can be made unreachable (a Network error).
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>

#include "core/error.hpp"
#include "core/kv_store.hpp"

namespace commux::test_support {

class MemoryStore : public core::KeyValueStore {
 public:
  explicit MemoryStore(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override {
    reachable();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
  }
  std::vector<std::vector<std::uint8_t>> multiGet(const std::vector<std::string>& keys) override {
    reachable();
    std::unique_lock<std::mutex> lock(mutex_);
    const bool there = changed_.wait_for(lock, timeout_, [&] {
      for (const auto& k : keys) {
        if (!values_.count(k)) return false;
      }
      return true;
    });
    if (!there) COMMUX_FAIL(Store, "wait timeout after ", timeout_.count(), " ms");
    std::vector<std::vector<std::uint8_t>> out;
    for (const auto& k : keys) out.push_back(values_.at(k));
    return out;
  }
  bool check(const std::vector<std::string>& keys) override {
    reachable();
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& k : keys) {
      if (!values_.count(k)) return false;
    }
    return true;
  }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  std::string location() const override { return "a memory store"; }

  void loseConnection() { lost_ = true; }

 private:
  void reachable() const {
    if (lost_) COMMUX_FAIL(Network, "Connection reset by peer");
  }

  const std::chrono::milliseconds timeout_;
  std::atomic<bool> lost_{false};
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<std::uint8_t>> values_;
};

}  // namespace commux::test_support
