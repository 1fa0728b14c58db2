#pragma once
// Who the other ranks of a group are. Each rank publishes its worker address, its local
// context id for the group and who its process is (for the death watch) under
// "commux/<incarnation>/peer/<rank>" in the group's store; the others read it the first
// time they talk to that rank, so connecting is lazy and a group of p ranks costs nothing
// for pairs that never communicate. Receives from any source resolve every rank (a member's
// death must fail them), and so do collectives, except in a group that spans hosts: there a
// rank reads its host's ranks and its schedules' peers, and hears of other deaths from its
// host's leader (DeathRelay). Missing records come in one store request (multiGet): a
// round trip per rank would make a group's first collective cost p round trips on each
// rank and p^2 requests on the store.
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/kv_store.hpp"
#include "engine/process_id.hpp"
#include "engine/route.hpp"

namespace commux {

/// The prefix of every store key commux writes. torchrun keeps one rendezvous store across
/// restarts of a job, so keys carry the restart count (TORCHELASTIC_RESTART_COUNT): a
/// restarted rank must never read the address of the previous attempt's process.
std::string storeKeyPrefix();
/// This job as its launcher names it (torchrun's run id, the MPI or batch system's job id),
/// or empty when it names none. Ranks of two jobs never join one group.
std::string jobIdentity();

class PeerTable {
 public:
  /// `onResolved(rank, route, process)` runs on the caller's thread the first time a rank's
  /// record is read (the group starts watching that process).
  using OnResolved =
      std::function<void(int rank, const engine::Route& route, const engine::ProcessId& process)>;

  PeerTable(std::shared_ptr<core::KeyValueStore> store, int rank, int size, OnResolved onResolved);

  void publish(const std::string& address, std::uint32_t context, std::uint16_t incarnation);
  // Every reading call below takes `operation`, what the record is read for (used in the
  // error when the store cannot be reached, e.g. once the rank that hosted it exited); when
  // empty, the error describes the call instead (get(rank): a send or receive with it).

  /// The route to `rank`; blocks on the store the first time (caller threads only).
  std::shared_ptr<const engine::Route> get(int rank, std::string_view operation = {});
  /// Routes for a set of ranks, indexed by rank (others left empty); the records not read
  /// yet come in one store request.
  std::vector<std::shared_ptr<const engine::Route>> get(const std::vector<int>& ranks,
                                                        std::string_view operation = {});
  /// As get(ranks), for those of `ranks` whose records are in the store already: it never
  /// waits for a rank that has not created the group yet (a later call watches it). Reads
  /// through `via`: the group's store, or another connection to it.
  void getPublished(const std::vector<int>& ranks, core::KeyValueStore& via);
  /// The ranks whose records are not in the store yet (they have not made the group);
  /// never waits.
  std::vector<int> unpublished() const;
  /// Reads every rank's record (once, in one store request): a collective's failure
  /// depends on every member.
  void resolveAll(std::string_view operation = {});
  /// Reads the records of `ranks` not read yet, in one store request, without watching
  /// them: a host leader must be able to reach every other leader (death notices) but
  /// watches only a few. A later get() watches them with no store request.
  void prefetch(const std::vector<int>& ranks, std::string_view operation = {});
  /// The route to `rank` if its record was read already, else null; never blocks.
  std::shared_ptr<const engine::Route> known(int rank) const;
  /// As known(), also for a rank only prefetched (not watched); never blocks.
  std::shared_ptr<const engine::Route> reachable(int rank) const;
  /// The process whose record `rank` published (pid as that process sees itself), once
  /// its record was read (known()); -1 before. Other records a rank publishes (windows)
  /// must name the same process.
  std::int64_t pidOf(int rank) const;
  /// pidOf(rank) when that process lives in this process's PID namespace on this kernel
  /// (its pid names the same process here: it may be read from, CMA), else -1.
  std::int64_t localPidOf(int rank) const;
  /// The ranks resolved so far, ascending.
  std::vector<int> knownRanks() const;
  /// Says that the store is gone: which store, who serves it, and the store's own `why`.
  std::string storeLost(const std::string& why) const;
  /// The ranks resolved so far whose process listens at `address`.
  std::vector<int> ranksAt(const std::string& address) const;

 private:
  std::string key(int rank) const;
  void checkRank(int rank) const;
  /// Reads the records of those of `ranks` not known yet, in one request.
  void resolve(const std::vector<int>& ranks, std::string_view operation);
  /// The records of `ranks`, in one request (throws naming the missing ones, or, when the
  /// store cannot be reached, the ranks, the operation and where the store is).
  std::vector<std::vector<uint8_t>> fetch(const std::vector<int>& ranks,
                                          std::string_view operation);
  struct Record {
    std::shared_ptr<const engine::Route> route;
    engine::ProcessId process;
  };
  Record parse(int rank, const std::vector<uint8_t>& record) const;
  /// Keeps `rank`'s route (the first one wins) and starts watching it (onResolved_).
  std::shared_ptr<const engine::Route> adopt(int rank, Record record);
  [[noreturn]] void throwMissing(const std::vector<int>& ranks, const std::string& why) const;
  /// A Network error: the store did not answer the read of `ranks`' records.
  [[noreturn]] void throwUnreachable(const std::vector<int>& ranks, std::string_view operation,
                                     const std::string& why) const;
  std::shared_ptr<core::KeyValueStore> store_;
  int rank_;
  OnResolved onResolved_;
  const std::string prefix_;
  const std::string job_;  // jobIdentity(), compared with every record read
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<const engine::Route>> routes_;
  // known_[r]: routes_[r] is set and watched, and never changes again, so it is read
  // without the lock (every send looks its route up). A prefetched rank has its route in
  // routes_ (so a failure at its address finds it: ranksAt) and its process here.
  std::unique_ptr<std::atomic<bool>[]> known_;
  std::map<int, engine::ProcessId> prefetched_;
  std::vector<std::int64_t> pids_;  // by rank, set before known_ (-1 until then)
  std::vector<char> samePidSpace_;  // by rank, with pids_: the record's PID space is ours
  bool allResolved_ = false;
};

}  // namespace commux
