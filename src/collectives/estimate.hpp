#pragma once
// How long a collective takes, by the models, without running it: torch's time estimation
// (Backend::startTimeEstimate / endTimeEstimate). The schedules over UCX are costed by
// playing every rank's Schedule (schedule_cost.hpp); the shared-memory channel by its own
// model below; a collective in parts by the sum of its parts. docs/performance.md says how
// close the estimates come to measured times.
#include <cstddef>

#include "collectives/route.hpp"
#include "collectives/selection.hpp"

namespace commux::collectives {

/// The shared-memory channel (shm/algorithms.hpp): the members meet through the channel's
/// header once or twice per collective, and every rank's copies and folds run at once on
/// its own core, so the bytes each rank moves per byte of the buffer hardly change with the
/// group size. Fitted on this machine at 2 ranks (docs/performance.md, 2026-12-06).
struct SharedMemoryModel {
  double alpha = 4.5e-6;    // s per collective (the meeting, the call)
  double perRank = 0.5e-6;  // s per member (each one's flags read)
  // s per byte of the buffer the estimate names (EstimateRequest::count)
  double allreduce = 0.085e-9;
  double reduce = 0.07e-9;
  double broadcast = 0.055e-9;
  double allgather = 0.085e-9;
  double reduceScatter = 0.09e-9;
  double gather = 0.07e-9;
  double scatter = 0.055e-9;
  double alltoall = 0.11e-9;
};

struct EstimateRequest {
  Collective collective = Collective::Barrier;
  /// Where it runs (route()); `schedule`: the schedule forced for Path::Schedule, or null.
  Path path = Path::Schedule;
  const char* schedule = nullptr;
  int size = 1;
  int root = 0;
  /// Elements of the whole buffer: the tensor (allreduce, reduce, broadcast), the output
  /// (allgather, gather: size blocks), the input (reduce_scatter, scatter: size blocks),
  /// one rank's input (all_to_all); 0 for a barrier.
  std::size_t count = 0;
  std::size_t elementSize = 1;
  /// Path::Hierarchical: the group's hosts (its ranks spread evenly over them).
  int hosts = 1;
  /// The schedules' tensors are in host memory (Bruck's all-to-all needs it).
  bool cpu = true;
};

/// Seconds the collective takes, from the first rank's call to the last rank's completion,
/// with every rank calling at once. Throws InvalidArgument for a request no route makes.
double estimateSeconds(const EstimateRequest& request, const Thresholds& thresholds,
                       const SharedMemoryModel& shm = SharedMemoryModel{});

/// Seconds one tagged message of `bytes` takes from send to receive over UCX.
double estimateMessageSeconds(std::size_t bytes, const CostModel& model);

}  // namespace commux::collectives
