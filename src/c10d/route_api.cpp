// The route of every collective call (collectives/route.hpp) from what this group knows:
// its shared-memory channel, its hosts' layout and COMMUX_ALGORITHM_<COLLECTIVE>.
#include "group/shm_setup.hpp"
#include "collectives/route.hpp"
#include "commux/options.hpp"
#include "commux/process_group_ucx.hpp"
#include "shm/channel.hpp"
#include "c10d/staging.hpp"
#include "shm/job.hpp"

namespace commux {

namespace {

shm::Kind kindOf(collectives::Collective collective) {
  using C = collectives::Collective;
  switch (collective) {
    case C::Allreduce:
      return shm::Kind::Allreduce;
    case C::Reduce:
      return shm::Kind::Reduce;
    case C::Broadcast:
      return shm::Kind::Broadcast;
    case C::Allgather:
      return shm::Kind::Allgather;
    case C::ReduceScatter:
      return shm::Kind::ReduceScatter;
    case C::Gather:
      return shm::Kind::Gather;
    case C::Scatter:
      return shm::Kind::Scatter;
    case C::Alltoall:
      return shm::Kind::Alltoall;
    case C::Barrier:
      return shm::Kind::Barrier;
  }
  return shm::Kind::Barrier;
}

}  // namespace

collectives::Route ProcessGroupUCX::routeFor(collectives::Collective collective, const char* what,
                                             bool cpu, std::size_t bytes,
                                             std::shared_ptr<shm::Channel>& channel) {
  channel = shmFor(what, cpu);
  const shm::Kind kind = kindOf(collective);
  const bool inParts = kind != shm::Kind::Gather && kind != shm::Kind::Scatter &&
                       kind != shm::Kind::Alltoall;  // these stay flat across hosts
  collectives::RouteRequest request;
  request.collective = collective;
  request.channel = channel != nullptr;
  request.partsPossible = inParts && cpu && layout_ && layout_->hierarchy != Hierarchy::Off;
  request.partsChosen = request.partsPossible && hierarchical(kind, cpu, bytes);
  request.forced = Config::get().algorithms[static_cast<std::size_t>(collective)];
  const collectives::Route route = collectives::route(request);
  if (route.path != collectives::Path::SharedMemory) channel = nullptr;
  return route;
}

const char* forcedSchedule(collectives::Collective collective) {
  return collectives::scheduleRoute(collective,
                                    Config::get().algorithms[static_cast<std::size_t>(collective)])
      .schedule;
}

}  // namespace commux
