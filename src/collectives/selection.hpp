#pragma once
// The one place that picks an algorithm for a collective from its size and the group size.
#include <cstddef>
#include <string>

#include "collectives/schedule.hpp"

namespace commux::collectives {

struct Thresholds {
  /// Allreduce switches from recursive doubling to the ring at this many bytes.
  std::size_t allreduceRingMinBytes = 256 * 1024;
  /// Broadcast and reduce switch from binomial trees to pipelined chains at this many bytes.
  std::size_t chainMinBytes = 512 * 1024;
  /// Chunk size of the pipelined chains.
  std::size_t pipelineChunkBytes = 512 * 1024;
};

struct Plan {
  Schedule schedule;
  const char* algorithm;
};

Plan planAllreduce(int rank, int size, std::size_t count, std::size_t elementSize,
                   const Thresholds& t);
Plan planBroadcast(int rank, int size, int root, std::size_t count, std::size_t elementSize,
                   const Thresholds& t);
Plan planReduce(int rank, int size, int root, std::size_t count, std::size_t elementSize,
                const Thresholds& t);
Plan planBarrier(int rank, int size);

}  // namespace commux::collectives
