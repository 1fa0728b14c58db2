#include "c10d/setup_store.hpp"

#include <algorithm>
#include <thread>

#include "c10d/store_text.hpp"

namespace commux {
namespace {

// What a rank that gives up writes into the keys others may wait for from it.
constexpr char kAbandoned[] = "\x01" "abandoned: ";

// A wait this late watches whoever still owes a key; not before, so that a set-up on time
// reads no record it does not need (a rank reads its host's and its leaders' only).
constexpr std::chrono::milliseconds kWatchAfter{1000};

}  // namespace

void SetupStore::put(const std::string& k, const std::string& value) {
  storePut(store_, k, value);
  written_.push_back(k);
}

std::vector<std::string> SetupStore::takeAll(const std::vector<std::string>& keys,
                                             const std::vector<int>& owners) {
  waitFor(keys, owners);
  auto values = storeTakeAll(store_, keys);
  for (const auto& v : values) {
    if (v.compare(0, sizeof(kAbandoned) - 1, kAbandoned) == 0) {
      throw SetupAbandoned(v.substr(sizeof(kAbandoned) - 1));
    }
  }
  return values;
}

void SetupStore::abandon(const std::string& why, const std::vector<std::string>& more) {
  std::vector<std::string> keys = written_;
  keys.insert(keys.end(), more.begin(), more.end());
  for (const auto& k : keys) storePut(store_, k, kAbandoned + why);
}

void SetupStore::waitFor(const std::vector<std::string>& keys, const std::vector<int>& owners) {
  // Polled (a key that is there costs one round trip): a TCPStore wait that times out logs a
  // warning each time, and a file store's throws a plain error.
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(100);
  bool watching = false;
  for (;;) {
    if (const std::string dead = deaths_.dead(); !dead.empty()) throw SetupAbandoned(dead);
    if (store_.check(keys)) return;
    if (!watching && std::chrono::steady_clock::now() - start > kWatchAfter) {
      std::vector<int> late;
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (!store_.check({keys[i]})) late.push_back(owners[i]);
      }
      deaths_.watch(late);
      watching = true;
      continue;
    }
    if (std::chrono::steady_clock::now() - start > store_.getTimeout()) {
      store_.wait(keys, std::chrono::milliseconds(1));  // the store's own timeout error
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10'000));
  }
}

}  // namespace commux
