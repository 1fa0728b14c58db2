#pragma once
// Collectives of a group that spans hosts, planned in parts (Path::Hierarchical): allreduce,
// reduce, broadcast, allgather, reduce_scatter and barrier over host memory. Each host's
// ranks meet in shared memory; between hosts, one rank per host (its leader, or the root on
// the root's host) runs the UCX schedule among those ranks, or, for a parallel allreduce,
// every rank runs it with its counterparts on the other hosts for its block. A rank alone
// on its host only has the part between hosts. The front ends (the core's collectives, the
// c10d adapter) describe the whole call as one host's channel would run it, and launch
// what this makes as a collective (launchCollective).
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/description.hpp"
#include "engine/op.hpp"
#include "shm/job.hpp"

namespace commux::group {

class Group;

/// The operation that runs `job` (host buffers; the whole call) in parts on `group`, whose
/// layout() must be set: a HierarchicalOp, or the part between hosts alone for a rank
/// alone on its host. `finalize` runs after the last part (the front end's copies back);
/// `sequence` is the call's collective number, `done` its Request's completer.
std::shared_ptr<engine::Op> makeHierarchical(Group& group, shm::Job job,
                                             std::function<void()> finalize,
                                             const engine::Description& description,
                                             std::uint32_t sequence, engine::Op::Done done);

}  // namespace commux::group
