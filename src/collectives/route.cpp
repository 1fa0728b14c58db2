#include "collectives/route.hpp"

#include <cctype>

#include "core/error.hpp"

namespace commux::collectives {
namespace {

using P = Path;

const std::vector<Algorithm>& table(Collective collective) {
  // Each collective's algorithms; the automatic choice is the channel, then parts, then
  // the schedule its plan function picks by size and group size (selection.hpp).
  static const std::vector<Algorithm> tables[kCollectives] = {
      /* allreduce */ {{"shm", P::SharedMemory},
                       {"hierarchical", P::Hierarchical},
                       {"recursive_doubling", P::Schedule},
                       {"ring", P::Schedule},
                       {"rabenseifner", P::Schedule}},
      /* reduce */
      {{"shm", P::SharedMemory},
       {"hierarchical", P::Hierarchical},
       {"binomial", P::Schedule},
       {"chain", P::Schedule}},
      /* broadcast */
      {{"shm", P::SharedMemory},
       {"hierarchical", P::Hierarchical},
       {"binomial", P::Schedule},
       {"chain", P::Schedule},
       {"scatter_allgather", P::Schedule}},
      /* allgather */
      {{"shm", P::SharedMemory},
       {"hierarchical", P::Hierarchical},
       {"ring", P::Schedule},
       {"recursive_doubling", P::Schedule},
       {"dissemination", P::Schedule}},
      /* reduce_scatter */
      {{"shm", P::SharedMemory},
       {"hierarchical", P::Hierarchical},
       {"ring", P::Schedule},
       {"recursive_halving", P::Schedule}},
      /* gather */ {{"shm", P::SharedMemory}, {"binomial", P::Schedule}},
      /* scatter */ {{"shm", P::SharedMemory}, {"binomial", P::Schedule}},
      /* all_to_all */
      {{"shm", P::SharedMemory}, {"pairwise", P::Schedule}, {"bruck", P::Schedule}},
      /* barrier */
      {{"shm", P::SharedMemory}, {"hierarchical", P::Hierarchical}, {"dissemination", P::Schedule}},
  };
  return tables[static_cast<std::size_t>(collective)];
}

}  // namespace

const char* nameOf(Collective collective) noexcept {
  switch (collective) {
    case Collective::Allreduce:
      return "allreduce";
    case Collective::Reduce:
      return "reduce";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::Allgather:
      return "allgather";
    case Collective::ReduceScatter:
      return "reduce_scatter";
    case Collective::Gather:
      return "gather";
    case Collective::Scatter:
      return "scatter";
    case Collective::Alltoall:
      return "all_to_all";
    case Collective::Barrier:
      return "barrier";
  }
  return "?";
}

std::string algorithmSetting(Collective collective) {
  std::string name = "COMMUX_ALGORITHM_";
  for (const char* c = nameOf(collective); *c; ++c) {
    name += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
  }
  return name;
}

const std::vector<Algorithm>& algorithmsOf(Collective collective) { return table(collective); }

const Algorithm* findAlgorithm(Collective collective, std::string_view name) {
  for (const Algorithm& a : table(collective)) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

std::string algorithmNames(Collective collective) {
  std::string names;
  for (const Algorithm& a : table(collective))
    names += (names.empty() ? "" : ", ") + std::string(a.name);
  return names;
}

Route scheduleRoute(Collective collective, std::string_view forced) {
  if (forced.empty()) return {Path::Schedule};
  const Algorithm* algorithm = findAlgorithm(collective, forced);
  COMMUX_CHECK(algorithm != nullptr, InvalidArgument, "commux: ", algorithmSetting(collective), "=",
               forced, " names no algorithm of ", nameOf(collective), " (",
               algorithmNames(collective), ")");
  if (algorithm->path != Path::Schedule) return {Path::Schedule};
  return {Path::Schedule, algorithm->name};
}

Route route(const RouteRequest& request) {
  if (request.forced.empty()) {
    if (request.channel) return {Path::SharedMemory};
    if (request.partsPossible && request.partsChosen) return {Path::Hierarchical};
    return {Path::Schedule};
  }
  const Algorithm* forced = findAlgorithm(request.collective, request.forced);
  const std::string setting = algorithmSetting(request.collective);
  COMMUX_CHECK(forced != nullptr, InvalidArgument, "commux: ", setting, "=", request.forced,
               " names no algorithm of ", nameOf(request.collective), " (",
               algorithmNames(request.collective), ")");
  switch (forced->path) {
    case Path::SharedMemory:
      COMMUX_CHECK(request.channel, InvalidArgument, "commux: ", setting,
                   "=shm, but no shared-memory channel serves this call (the group spans "
                   "hosts, COMMUX_SHM=0, or the tensors are not on the CPU)");
      return {Path::SharedMemory};
    case Path::Hierarchical:
      COMMUX_CHECK(request.partsPossible, InvalidArgument, "commux: ", setting,
                   "=hierarchical, but this call cannot run in parts (the group does not span "
                   "hosts that share memory, COMMUX_HIERARCHY=off, or the tensors are not "
                   "on the CPU)");
      return {Path::Hierarchical};
    case Path::Schedule:
      return {Path::Schedule, forced->name};
  }
  return {Path::Schedule};
}

}  // namespace commux::collectives
