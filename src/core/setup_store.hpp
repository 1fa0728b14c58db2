#pragma once
// The store as collective set-ups use it (the shared-memory channel, window registrations):
// a wait gives up as soon as a rank it depends on is known dead, or reads that another rank
// gave up and why, instead of waiting out the store's timeout (30 minutes by default) for a
// key a dead rank will never write.
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/kv_store.hpp"

namespace commux::core {

/// How a set-up hears of deaths while it waits for other ranks in the store: `watch` starts
/// watching ranks (it reads their addresses from the store, never waiting for one; a rank
/// that has not made the group yet is watched by a later call); `dead(late)` says why the
/// wait gives up (this rank stops, or a member is gone), or is empty while it goes on:
/// with `late` null, for any member; else only for those of `late`, the owners of the
/// keys not written yet (a member gone after its part, as one that left after the
/// group's first collective, ends nobody's wait; one an owner waits for makes that owner
/// give up, which the store then tells). `what` names the set-up in errors.
struct SetupDeaths {
  std::function<void(const std::vector<int>& ranks)> watch;
  std::function<std::string(const std::vector<int>* late)> dead;
  std::string what;
};

/// The set-up gave up: a rank it waited for died, or another rank gave up and said why.
struct SetupAbandoned : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class SetupStore {
 public:
  SetupStore(KeyValueStore& store, const SetupDeaths& deaths) : store_(store), deaths_(deaths) {}

  void put(const std::string& k, const std::string& value);
  /// `k`'s value once `owner` (the rank that writes it) has written it; raises
  /// SetupAbandoned when a rank died or the value says its writer gave up, and a Store
  /// error naming the owners still missing once the store's timeout passed.
  std::string take(const std::string& k, int owner) { return takeAll({k}, {owner})[0]; }
  std::vector<std::string> takeAll(const std::vector<std::string>& keys,
                                   const std::vector<int>& owners);
  /// Marks every key this rank wrote, and `more` that others wait for from it, as given up.
  void abandon(const std::string& why, const std::vector<std::string>& more);

 private:
  void waitFor(const std::vector<std::string>& keys, const std::vector<int>& owners);
  /// Why the wait for `keys` gives up now (SetupDeaths::dead for their late owners), or
  /// empty.
  std::string givingUp(const std::vector<std::string>& keys, const std::vector<int>& owners);
  /// After the store failed (called while handling its error): raises SetupAbandoned
  /// naming a death the group hears of within a moment, else returns.
  void giveDeathFirst();
  /// The owners of those of `keys` not in the store, ascending, each once.
  std::vector<int> lateOwners(const std::vector<std::string>& keys, const std::vector<int>& owners);
  [[noreturn]] void throwLate(const std::vector<std::string>& keys, const std::vector<int>& owners);

  KeyValueStore& store_;
  const SetupDeaths& deaths_;
  std::vector<std::string> written_;
};

}  // namespace commux::core
