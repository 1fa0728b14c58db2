#pragma once
// The one place that decides where a collective runs: through the host's shared-memory
// channel, in parts (shared memory within each host, a schedule between hosts), or as a
// schedule of messages over UCX, and which schedule. Every collective has a table of named
// algorithms; COMMUX_ALGORITHM_<COLLECTIVE>=<name> forces one (tests, benchmarks, a user who
// knows better), else the choice is automatic. A new algorithm is one file and one row of
// its collective's table (docs/design.md, "Adding an algorithm").
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace commux::collectives {

enum class Collective : std::uint8_t {
  Allreduce,
  Reduce,
  Broadcast,
  Allgather,
  ReduceScatter,
  Gather,
  Scatter,
  Alltoall,
  Barrier,
};
constexpr std::size_t kCollectives = 9;

/// "allreduce", "reduce_scatter", ...
const char* nameOf(Collective collective) noexcept;
/// "COMMUX_ALGORITHM_ALLREDUCE", ...
std::string algorithmSetting(Collective collective);

enum class Path : std::uint8_t { SharedMemory, Hierarchical, Schedule };

struct Algorithm {
  const char* name;
  Path path;
};

/// The algorithms of `collective`, as COMMUX_ALGORITHM_<COLLECTIVE> names them.
const std::vector<Algorithm>& algorithmsOf(Collective collective);
/// Null when `collective` has no algorithm of that name.
const Algorithm* findAlgorithm(Collective collective, std::string_view name);
/// "shm, hierarchical, ring, ..." for errors.
std::string algorithmNames(Collective collective);

/// What the route knows of a call and its group.
struct RouteRequest {
  Collective collective;
  /// A shared-memory channel over every rank of the group serves this call (CPU tensors,
  /// one host).
  bool channel = false;
  /// The group spans hosts of which some share memory, and the tensors are on the CPU:
  /// the call can run in parts.
  bool partsPossible = false;
  /// The automatic choice runs it in parts (by size and the hierarchy settings).
  bool partsChosen = false;
  /// COMMUX_ALGORITHM_<COLLECTIVE>: empty for the automatic choice.
  std::string_view forced;
};

struct Route {
  Path path;
  /// For Path::Schedule: the schedule forced (its plan function builds that one), or null
  /// when the plan function chooses.
  const char* schedule = nullptr;
};

/// The same on every rank that passes the same request. A forced algorithm that cannot run
/// here raises InvalidArgument naming the setting.
Route route(const RouteRequest& request);

/// The route of what always runs as a schedule over UCX: the coalesced calls, a sparse
/// allreduce's exchanges. A forced schedule applies; a forced `shm` or `hierarchical` says
/// where a whole call runs, so these keep the automatic schedule under it. (The part of a
/// hierarchical collective between hosts is automatic too: a forced schedule runs the whole
/// call flat, so none reaches it. The collective check's own allgather is automatic.) Raises InvalidArgument for a name that is
/// no algorithm of `collective`.
Route scheduleRoute(Collective collective, std::string_view forced);

}  // namespace commux::collectives
