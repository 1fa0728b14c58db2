#include "core/setup_store.hpp"

#include <algorithm>
#include <thread>

#include "core/error.hpp"

namespace commux::core {
namespace {

// What a rank that gives up writes into the keys others may wait for from it.
constexpr char kAbandoned[] =
    "\x01"
    "abandoned: ";

// A wait this late watches whoever still owes a key; not before, so that a set-up on time
// reads no record it does not need (a rank reads its host's and its leaders' only).
constexpr std::chrono::milliseconds kWatchAfter{1000};

bool storeUnreachable(const std::exception_ptr& error) {
  return readError(error).kind == ErrorKind::Network;
}

}  // namespace

void SetupStore::put(const std::string& k, const std::string& value) {
  putText(store_, k, value);
  written_.push_back(k);
}

std::vector<std::string> SetupStore::takeAll(const std::vector<std::string>& keys,
                                             const std::vector<int>& owners) {
  waitFor(keys, owners);
  std::vector<std::string> values;
  try {
    values = takeAllText(store_, keys);
  } catch (const std::exception&) {
    if (storeUnreachable(std::current_exception())) giveDeathFirst();
    throw;
  }
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
  for (const auto& k : keys) putText(store_, k, kAbandoned + why);
}

void SetupStore::waitFor(const std::vector<std::string>& keys, const std::vector<int>& owners) {
  // Polled (a key that is there costs one round trip): a TCPStore wait that times out logs a
  // warning each time, and a file store's throws a plain error.
  const auto start = std::chrono::steady_clock::now();
  auto nextWatch = start + kWatchAfter;
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    try {
      if (store_.check(keys)) return;
      if (const std::string why = givingUp(keys, owners); !why.empty()) throw SetupAbandoned(why);
      const auto now = std::chrono::steady_clock::now();
      if (now >= nextWatch) {
        // Again each period: a late rank can be watched only once it made the group.
        deaths_.watch(lateOwners(keys, owners));
        nextWatch = now + kWatchAfter;
        continue;
      }
      if (now - start > store_.timeout()) throwLate(keys, owners);
    } catch (const std::exception&) {
      if (storeUnreachable(std::current_exception())) giveDeathFirst();
      throw;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10'000));
  }
}

std::string SetupStore::givingUp(const std::vector<std::string>& keys,
                                 const std::vector<int>& owners) {
  // Cheap while everyone lives; the late owners cost a store request per key.
  if (deaths_.dead(nullptr).empty()) return "";
  const std::vector<int> late = lateOwners(keys, owners);
  return deaths_.dead(&late);
}

void SetupStore::giveDeathFirst() {
  // The store's host often goes because a rank died and it gave up (rank 0 exits): the
  // death is the reason to give, once the watch has had a moment to report it.
  const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < grace) {
    if (const std::string dead = deaths_.dead(nullptr); !dead.empty()) throw SetupAbandoned(dead);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::vector<int> SetupStore::lateOwners(const std::vector<std::string>& keys,
                                        const std::vector<int>& owners) {
  std::vector<int> late;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!store_.check({keys[i]})) late.push_back(owners[i]);
  }
  std::sort(late.begin(), late.end());
  late.erase(std::unique(late.begin(), late.end()), late.end());
  return late;
}

void SetupStore::throwLate(const std::vector<std::string>& keys, const std::vector<int>& owners) {
  // The store's own message lists every key (thousands at scale): name the ranks instead.
  constexpr std::size_t kNamed = 8;
  const std::vector<int> late = lateOwners(keys, owners);
  std::string named;
  for (std::size_t i = 0; i < late.size() && i < kNamed; ++i) {
    named += (i ? ", " : "") + std::to_string(late[i]);
  }
  if (late.size() > kNamed) named += ", ...";
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(store_.timeout()).count();
  COMMUX_FAIL(Store, "commux: " + deaths_.what + " waited in vain for rank(s) " + named +
                         " for the store's timeout (" + std::to_string(seconds) +
                         " s): did every rank create this group, and is each one still running?");
}

}  // namespace commux::core
