#pragma once
// Whether the ranks of a host outnumber the CPUs they may run on, which decides how their
// shared-memory channel is shaped and how its waits spin (group/shm_setup.cpp).
#include <string>
#include <vector>

namespace commux::shm {

/// The CPUs this process may run on (its affinity mask), as text for the store.
std::string cpuList();

/// More ranks than CPUs they may run on together, from each rank's cpuList(). One rank's
/// own mask says nothing alone: a launcher that binds each rank to a core of its own
/// (mpirun, srun --cpu-bind) leaves every rank one CPU, and that host is the least crowded
/// of all. Unreadable entries count as no CPUs.
bool crowdedBy(const std::vector<std::string>& cpuLists);

}  // namespace commux::shm
