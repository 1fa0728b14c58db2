#pragma once
// What the alpha-beta model (selection.hpp, CostModel) says a collective's schedules take:
// every rank's Schedule played against the others' in time. Used by commux_cost_model and
// by the backend's time estimation.
//
// Time model, per rank and step (a step starts when the previous one ended):
//   - its sends leave one after the other: send i arrives at start + alpha + beta * (bytes
//     of sends 0..i);
//   - the step ends at max(start + beta * bytes sent, latest arrival of its receives,
//     start + alpha + beta * bytes received) + gamma, plus delta * bytes received when the
//     step folds (Reduce);
//   - a receive waits for its message: the sender's start of that step is a dependency, so
//     the finish time is the critical path through the message graph;
//   - a step's local copies (Bruck's packing) take epsilon * bytes copied before its sends
//     leave.
// Groups whose schedules hold more than `fullSteps` steps and copies in all (the rings and
// Bruck from about 1,024 ranks) are costed from a sample of ranks, each receive taken as
// arriving alpha + beta * bytes after the step starts (exact for the ring and Bruck, where
// all ranks move in lockstep).
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "collectives/schedule.hpp"
#include "collectives/selection.hpp"

namespace commux::collectives {

/// Rank r's plan of the collective being costed.
using PlanMaker = std::function<Plan(int rank)>;

struct Prediction {
  double seconds = 0;
  std::string algorithm;
  bool sampled = false;
  std::size_t steps = 0;  // the most steps of any rank (of the sampled ones when sampled)
};

/// Plays every rank's schedule; the finish time of the last rank. Throws InvalidArgument
/// when the schedules do not match (a rank waits for a message nobody sends).
double playAll(int p, const std::vector<Schedule>& schedules, std::size_t elementSize,
               const CostModel& m);

/// One rank alone, every message arriving alpha + beta * bytes after its step starts.
double playOne(const Schedule& schedule, std::size_t elementSize, const CostModel& m);

/// The finish time of a collective of `p` ranks whose plans `make` builds.
Prediction predict(int p, const PlanMaker& make, std::size_t elementSize, const CostModel& m,
                   std::size_t fullSteps = 1'000'000);

}  // namespace commux::collectives
