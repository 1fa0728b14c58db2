#include "shm/host_cpus.hpp"

#include <sched.h>

#include <algorithm>
#include <set>
#include <sstream>

namespace commux::shm {

std::string cpuList() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (::sched_getaffinity(0, sizeof(cpus), &cpus) != 0) return "";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &cpus)) out += std::to_string(c) + " ";
  }
  return out;
}

bool crowdedBy(const std::vector<std::string>& cpuLists) {
  std::set<int> cpus;
  for (const std::string& list : cpuLists) {
    std::istringstream in(list);
    for (int c = 0; in >> c;) cpus.insert(c);
  }
  return cpuLists.size() > std::max<std::size_t>(cpus.size(), 1);
}

}  // namespace commux::shm
