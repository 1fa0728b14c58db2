// The adapter's way to the group's one route (group::Group::route) and the forced schedules
// of the calls planned inside the adapter (coalesced calls, sparse allreduce).
#include "collectives/route.hpp"
#include "commux/options.hpp"
#include "commux/process_group_ucx.hpp"
#include "group/group.hpp"
#include "shm/channel.hpp"
#include "c10d/staging.hpp"

namespace commux {

collectives::Route ProcessGroupUCX::routeFor(collectives::Collective collective, const char* what,
                                             bool cpu, std::size_t bytes,
                                             std::shared_ptr<shm::Channel>& channel) {
  return group_->route(collective, what, cpu, bytes, channel);
}

collectives::Route scheduleRouteOf(collectives::Collective collective) {
  return collectives::scheduleRoute(collective,
                                    Config::get().algorithms[static_cast<std::size_t>(collective)]);
}

const char* forcedSchedule(collectives::Collective collective) {
  return scheduleRouteOf(collective).schedule;
}

}  // namespace commux
