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
/// group size. Fitted on this machine at 2 ranks, 1 and 16 MiB (benchmarks/time_estimate.py,
/// 2026-12-06; an earlier stretch of the same machine ran the copies up to 1.8x faster).
struct SharedMemoryModel {
  double alpha = 4.5e-6;    // s per collective (the meeting, the call)
  double perRank = 0.5e-6;  // s per member (each one's flags read)
  // s per byte of the buffer the estimate names (EstimateRequest::count)
  double allreduce = 0.17e-9;
  double reduce = 0.13e-9;
  double broadcast = 0.09e-9;
  double allgather = 0.125e-9;
  double reduceScatter = 0.13e-9;
  double gather = 0.1e-9;
  double scatter = 0.09e-9;
  double alltoall = 0.14e-9;
};

/// What the estimates charge. The selection's CostModel (Thresholds::model) only has to
/// rank algorithms against each other; an estimate needs absolute times, so its own copy
/// of the model is fitted to measured ones (benchmarks/time_estimate.py, this machine, 2
/// ranks, 2026-12-06: UCX messages of 1-16 MiB move at 0.09-0.10 ns/B, and a collective's
/// call costs ~3.5 us beyond its messages, a message's ~1.1 us).
struct EstimateModel {
  CostModel ucx{1.8e-6, 0.1e-9, 1.3e-6, 0.065e-9, 0.05e-9};
  double collectiveCall = 3.5e-6;  // s per collective over UCX beyond its schedule
  double messageCall = 1.1e-6;     // s per tagged message beyond alpha + gamma + beta * bytes
  SharedMemoryModel shm{};
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
/// with every rank calling at once: the schedule `thresholds` choose, played under
/// `model`. Throws InvalidArgument for a request no route makes.
double estimateSeconds(const EstimateRequest& request, const Thresholds& thresholds,
                       const EstimateModel& model = EstimateModel{});

/// Seconds one tagged message of `bytes` takes from send to receive over UCX.
double estimateMessageSeconds(std::size_t bytes, const EstimateModel& model = EstimateModel{});

}  // namespace commux::collectives
