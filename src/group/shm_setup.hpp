#pragma once
// Deciding, together, which ranks of a group share memory: the hosts, and a shared-memory
// channel among the ranks of each host.
#include <cstddef>
#include <functional>
#include <string>
#include <memory>
#include <vector>

#include "commux/options.hpp"
#include "core/setup_store.hpp"

namespace commux {
namespace engine {
class Engine;
}
namespace shm {
class Channel;
}

/// Which ranks of the group share a host (a kernel and a /dev/shm), as every rank sees it.
struct HostLayout {
  /// The group's ranks by host, ascending in each; hosts ordered by their lowest rank, whose
  /// rank is the host's leader. When some rank has no shared memory (COMMUX_SHM=0, no
  /// /dev/shm), every rank is a host of its own.
  std::vector<std::vector<int>> hosts;
  /// For every group rank: its host and its index among that host's ranks.
  std::vector<int> hostOf;
  std::vector<int> localIndexOf;

  /// The group's ranks host by host (hosts in order, each ascending), and where each host's
  /// first rank sits in that order; `byHost` when it is 0, 1, ..., size-1.
  std::vector<std::int64_t> hostOrder;
  std::vector<std::int64_t> hostStart;
  bool byHost = true;
  /// COMMUX_HIERARCHY and its thresholds as rank 0 has them: they choose between flat and
  /// hierarchical paths, which every rank must take alike.
  Hierarchy hierarchy = Hierarchy::Auto;
  std::size_t parallelMinBytes = 0;
  std::size_t minBytes = 0;

  int hostCount() const noexcept { return static_cast<int>(hosts.size()); }
  /// True when every host holds as many ranks.
  bool uniform() const noexcept;
};

struct ShmSetup {
  HostLayout layout;
  /// This host's channel (its ranks, in the layout's order), or null: when this rank's
  /// host has one rank, or when some host with several could not set its channel up; in
  /// that case no rank of the group has one, so all take the same (UCX) paths.
  std::shared_ptr<shm::Channel> channel;
  /// The group spans hosts and every host with several ranks has its channel: allreduce,
  /// reduce, broadcast, allgather, reduce_scatter and barrier may run in parts
  /// (group/hierarchical.hpp).
  bool hierarchical = false;
};

/// Collective over the group (every rank calls it at the same point). It costs O(1) store
/// round trips per rank: rank 0 reads every rank's host key and publishes the layout (with
/// its hierarchy settings), each host's leader reads its own ranks' answers, and the others
/// read one key per stage.
/// Equal on ranks that share memory (one kernel, one /dev/shm, COMMUX_HOST alike); empty
/// when this rank has no shared memory (COMMUX_SHM=0, no /dev/shm).
std::string hostIdentity();

/// Raises DistBackendError, on every rank still waiting, when a rank it waits for died
/// (or another rank gave up): found within the failure detection's bound, not the store's
/// timeout.
ShmSetup connectShm(core::KeyValueStore& store, int rank, int size,
                    std::shared_ptr<engine::Engine> engine, const core::SetupDeaths& deaths);

}  // namespace commux
