#pragma once
// A KeyValueStore over files in one folder, shared by forked ranks: the core's tests meet
// through it where no torch (and so no c10d store) exists. Each key is a file, written
// whole (a rename) so that readers see all of a value or nothing.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/kv_store.hpp"

namespace commux::testing {

class DirectoryStore : public core::KeyValueStore {
 public:
  DirectoryStore(std::string folder, std::chrono::milliseconds timeout)
      : folder_(std::move(folder)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override {
    const std::string path = pathOf(key);
    {
      std::ofstream out(path + ".tmp", std::ios::binary);
      out.write(reinterpret_cast<const char*>(value.data()),
                static_cast<std::streamsize>(value.size()));
    }
    std::rename((path + ".tmp").c_str(), path.c_str());
  }
  std::vector<std::vector<std::uint8_t>> multiGet(const std::vector<std::string>& keys) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (!check(keys)) {
      if (std::chrono::steady_clock::now() > deadline) {
        COMMUX_FAIL(Store, "wait timeout after ", timeout_.count(), " ms");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<std::vector<std::uint8_t>> values;
    for (const auto& key : keys) {
      std::ifstream in(pathOf(key), std::ios::binary);
      values.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return values;
  }
  bool check(const std::vector<std::string>& keys) override {
    for (const auto& key : keys) {
      if (!std::ifstream(pathOf(key))) return false;
    }
    return true;
  }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  std::shared_ptr<core::KeyValueStore> clone() override {
    return std::make_shared<DirectoryStore>(folder_, timeout_);
  }
  std::string location() const override { return "a directory store at " + folder_; }

 private:
  // Keys hold '/' and other characters a file name must not: hex spells any of them.
  std::string pathOf(const std::string& key) const {
    static const char* digits = "0123456789abcdef";
    std::string name;
    for (unsigned char c : key) {
      name += digits[c >> 4];
      name += digits[c & 15];
    }
    return folder_ + "/" + name;
  }

  const std::string folder_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace commux::testing
