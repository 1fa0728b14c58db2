#pragma once
// The store as collective set-ups use it (the shared-memory channel, window registrations):
// a wait gives up as soon as a rank it depends on is known dead, or reads that another rank
// gave up and why, instead of waiting out the store's timeout (30 minutes by default) for a
// key a dead rank will never write.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace commux {

/// How a set-up hears of deaths while it waits for other ranks in the store: `watch` starts
/// watching ranks (it may read their addresses from the store); `dead` says which watched
/// rank died and why, or is empty while they all live.
struct SetupDeaths {
  std::function<void(const std::vector<int>& ranks)> watch;
  std::function<std::string()> dead;
};

/// The set-up gave up: a rank it waited for died, or another rank gave up and said why.
struct SetupAbandoned : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class SetupStore {
 public:
  SetupStore(c10d::Store& store, const SetupDeaths& deaths) : store_(store), deaths_(deaths) {}

  void put(const std::string& k, const std::string& value);
  /// `k`'s value once `owner` (the rank that writes it) has written it; raises
  /// SetupAbandoned when a rank died or the value says its writer gave up.
  std::string take(const std::string& k, int owner) { return takeAll({k}, {owner})[0]; }
  std::vector<std::string> takeAll(const std::vector<std::string>& keys,
                                   const std::vector<int>& owners);
  /// Marks every key this rank wrote, and `more` that others wait for from it, as given up.
  void abandon(const std::string& why, const std::vector<std::string>& more);

 private:
  void waitFor(const std::vector<std::string>& keys, const std::vector<int>& owners);

  c10d::Store& store_;
  const SetupDeaths& deaths_;
  std::vector<std::string> written_;
};

}  // namespace commux
