#include "collectives/estimate.hpp"

#include <algorithm>

#include "collectives/schedule.hpp"
#include "collectives/schedule_cost.hpp"
#include "core/error.hpp"

namespace commux::collectives {
namespace {

// Beyond this many steps and copies in all, rank schedules are sampled (schedule_cost.hpp):
// an estimate of a 1,024-rank ring stays within milliseconds.
constexpr std::size_t kFullSteps = 200'000;

double bytesOf(const EstimateRequest& r) {
  return static_cast<double>(r.count) * static_cast<double>(r.elementSize);
}

double perByte(Collective c, const SharedMemoryModel& m) {
  switch (c) {
    case Collective::Allreduce:
      return m.allreduce;
    case Collective::Reduce:
      return m.reduce;
    case Collective::Broadcast:
      return m.broadcast;
    case Collective::Allgather:
      return m.allgather;
    case Collective::ReduceScatter:
      return m.reduceScatter;
    case Collective::Gather:
      return m.gather;
    case Collective::Scatter:
      return m.scatter;
    case Collective::Alltoall:
      return m.alltoall;
    case Collective::Barrier:
      return 0;
  }
  return 0;
}

double sharedMemory(Collective c, int ranks, double bytes, const SharedMemoryModel& m) {
  if (ranks <= 1) return 0;
  return m.alpha + m.perRank * ranks + perByte(c, m) * bytes;
}

double schedule(const EstimateRequest& r, const Thresholds& given, const EstimateModel& em) {
  const int p = r.size;
  if (p <= 1) return 0;
  Thresholds t = given;
  t.forced = r.schedule;
  const std::size_t es = std::max<std::size_t>(1, r.elementSize);
  const std::size_t n = r.count;
  PlanMaker make;
  switch (r.collective) {
    case Collective::Allreduce:
      make = [&](int k) { return planAllreduce(k, p, n, es, t); };
      break;
    case Collective::Reduce:
      make = [&](int k) { return planReduce(k, p, r.root, n, es, t); };
      break;
    case Collective::Broadcast:
      make = [&](int k) { return planBroadcast(k, p, r.root, n, es, t); };
      break;
    case Collective::Barrier:
      make = [&](int k) { return planBarrier(k, p); };
      break;
    case Collective::Allgather: {
      const auto blocks = evenBlocks(n / static_cast<std::size_t>(p) * p, p);
      make = [&, blocks](int k) { return planAllgather(k, p, blocks, es, t); };
      break;
    }
    case Collective::ReduceScatter: {
      const auto blocks = evenBlocks(n / static_cast<std::size_t>(p) * p, p);
      make = [&, blocks](int k) { return planReduceScatter(k, p, blocks, es, t); };
      break;
    }
    case Collective::Gather:
      make = [&](int k) {
        return Plan{gatherBinomial(k, p, r.root, n / static_cast<std::size_t>(p)), "binomial"};
      };
      break;
    case Collective::Scatter:
      make = [&](int k) {
        return Plan{scatterBinomial(k, p, r.root, n / static_cast<std::size_t>(p)), "binomial"};
      };
      break;
    case Collective::Alltoall: {
      const auto blocks = evenBlocks(n / static_cast<std::size_t>(p) * p, p);
      make = [&, blocks](int k) { return planAlltoall(k, p, blocks, blocks, es, r.cpu, true, t); };
      break;
    }
  }
  return em.collectiveCall + predict(p, make, es, em.ucx, kFullSteps).seconds;
}

/// The parts of a collective run in parts (hierarchical_api): shared memory on each host,
/// a schedule between the hosts' leaders.
double inParts(const EstimateRequest& r, const Thresholds& t, const EstimateModel& em) {
  const SharedMemoryModel& m = em.shm;
  const int hosts = std::clamp(r.hosts, 1, std::max(1, r.size));
  const int local = (r.size + hosts - 1) / hosts;
  const double bytes = bytesOf(r);
  EstimateRequest leaders = r;
  leaders.path = Path::Schedule;
  leaders.schedule = nullptr;
  leaders.size = hosts;
  leaders.root = 0;
  const double between = hosts > 1 ? schedule(leaders, t, em) : 0;
  switch (r.collective) {
    case Collective::Allreduce:
      return sharedMemory(Collective::Reduce, local, bytes, m) + between +
             sharedMemory(Collective::Broadcast, local, bytes, m);
    case Collective::Reduce:
      return sharedMemory(Collective::Reduce, local, bytes, m) + between;
    case Collective::Broadcast:
      return between + sharedMemory(Collective::Broadcast, local, bytes, m);
    case Collective::Barrier:
      return 2 * sharedMemory(Collective::Barrier, local, 0, m) + between;
    case Collective::Allgather:
      return sharedMemory(Collective::Gather, local, bytes / hosts, m) + between +
             sharedMemory(Collective::Broadcast, local, bytes, m);
    case Collective::ReduceScatter:
      return sharedMemory(Collective::Reduce, local, bytes, m) + between +
             sharedMemory(Collective::Scatter, local, bytes / hosts, m);
    case Collective::Gather:
    case Collective::Scatter:
    case Collective::Alltoall:
      break;
  }
  COMMUX_CHECK(false, InvalidArgument, "commux: ", nameOf(r.collective),
               " never runs in parts (hierarchical)");
  return 0;
}

}  // namespace

double estimateSeconds(const EstimateRequest& r, const Thresholds& t, const EstimateModel& m) {
  COMMUX_CHECK(r.size >= 1, InvalidArgument, "commux: a time estimate needs a group of at least 1 rank, not ",
               r.size);
  COMMUX_CHECK(r.root >= 0 && r.root < r.size, InvalidArgument, "commux: a time estimate's root ",
               r.root, " is outside the group of ", r.size);
  switch (r.path) {
    case Path::SharedMemory:
      return sharedMemory(r.collective, r.size, bytesOf(r), m.shm);
    case Path::Hierarchical:
      return inParts(r, t, m);
    case Path::Schedule:
      return schedule(r, t, m);
  }
  return 0;
}

double estimateMessageSeconds(std::size_t bytes, const EstimateModel& m) {
  return m.messageCall + m.ucx.alpha + m.ucx.gamma + m.ucx.beta * static_cast<double>(bytes);
}

}  // namespace commux::collectives
