#pragma once
// The one place that picks an algorithm for a collective from its size and the group size.
#include <cstddef>
#include <string>
#include <vector>

#include "collectives/schedule.hpp"

namespace commux::collectives {

/// The alpha-beta cost model the choices for large groups come from (docs/design.md,
/// "Algorithms at scale"). A step costs alpha + gamma + beta * bytes moved (+ delta *
/// bytes folded for reductions). Defaults fitted on this machine (2 ranks, UCX over shared
/// memory); tools/cost_model.cpp prints what they predict.
struct CostModel {
  double alpha = 1.8e-6;    // s per message (one-way latency)
  double beta = 0.25e-9;    // s per byte moved (4 GB/s)
  double gamma = 1.3e-6;    // s per schedule step (posting, completion, step change)
  double delta = 0.15e-9;   // s per byte folded (a += b)
  double epsilon = 0.05e-9; // s per byte copied locally (Bruck's packing)
};

struct Thresholds {
  /// Allreduce switches from recursive doubling to the ring at this many bytes.
  std::size_t allreduceRingMinBytes = 256 * 1024;
  /// Broadcast and reduce switch from binomial trees to pipelined chains at this many bytes.
  std::size_t chainMinBytes = 512 * 1024;
  /// Chunk size of the pipelined chains.
  std::size_t pipelineChunkBytes = 512 * 1024;
  /// Groups smaller than this keep the measured choices above (rings for allgather and
  /// reduce-scatter, recursive doubling / ring for allreduce).
  int logAlgorithmsMinRanks = 9;
  /// From this many bytes per rank's block, allgather, reduce-scatter and allreduce stay on
  /// the (chunked) ring at any group size: its p-1 steps then cost under ~5% of its
  /// transfer time, its traffic goes to neighbours only and its scratch is one chunk.
  std::size_t ringMinBlockBytes = 256 * 1024;
  CostModel model{};
  /// The schedule COMMUX_ALGORITHM_<COLLECTIVE> forces (collectives/route.hpp), by its name
  /// in the collective's table; null: chosen by the rules above. A name the plan function
  /// cannot build for this group raises InvalidArgument.
  const char* forced = nullptr;
};

struct Plan {
  Schedule schedule;
  const char* algorithm;
};

/// The blocks of a buffer of `size` blocks that all hold `count` elements.
std::vector<Range> equalBlocks(std::size_t count, int size);

Plan planAllreduce(int rank, int size, std::size_t count, std::size_t elementSize,
                   const Thresholds& t);
Plan planBroadcast(int rank, int size, int root, std::size_t count, std::size_t elementSize,
                   const Thresholds& t);
Plan planReduce(int rank, int size, int root, std::size_t count, std::size_t elementSize,
                const Thresholds& t);
Plan planBarrier(int rank, int size);
/// Allgather over contiguous blocks (rank r contributes blocks[r]): ring, recursive
/// doubling (power-of-two groups) or dissemination (others).
Plan planAllgather(int rank, int size, const std::vector<Range>& blocks, std::size_t elementSize,
                   const Thresholds& t);
/// Reduce-scatter over contiguous blocks (rank r ends with blocks[r] reduced): chunked ring
/// or recursive halving.
Plan planReduceScatter(int rank, int size, const std::vector<Range>& blocks,
                       std::size_t elementSize, const Thresholds& t);

/// All-to-all: Bruck (from logAlgorithmsMinRanks ranks when the model prices it below
/// pairwise) or pairwise. sendBlocks are offsets on the send side, recvBlocks in the work
/// buffer; Bruck's pack areas go past both (workElements). Bruck needs `cpu` (the executor
/// copies with memcpy) and `uniform`: every rank's blocks of one size, the same on all
/// ranks. A rank cannot tell that from its own blocks (equal splits here, unequal ones
/// elsewhere), and ranks that chose differently would wait for each other's messages.
Plan planAlltoall(int rank, int size, const std::vector<Range>& sendBlocks,
                  const std::vector<Range>& recvBlocks, std::size_t elementSize, bool cpu,
                  bool uniform, const Thresholds& t);

/// Closed-form predictions of the model (seconds) for `bytes` in the whole buffer, used by
/// the selection. tools/cost_model.cpp computes the times from the schedules themselves
/// instead; the two agree (e.g. Rabenseifner, 1,024 ranks, 64 KiB: 104.6 us both).
namespace cost {
double allreduceRecursiveDoubling(const CostModel& m, int p, double bytes);
double allreduceRabenseifner(const CostModel& m, int p, double bytes);
double allreduceRing(const CostModel& m, int p, double bytes);
double reduceScatterRing(const CostModel& m, int p, double bytes);
double reduceScatterRecursiveHalving(const CostModel& m, int p, double bytes);
double broadcastBinomial(const CostModel& m, int p, double bytes);
double broadcastChain(const CostModel& m, int p, double bytes, double chunkBytes);
double broadcastScatterAllgather(const CostModel& m, int p, double bytes);
/// All-to-all with `blockBytes` per destination.
double alltoallPairwise(const CostModel& m, int p, double blockBytes);
double alltoallBruck(const CostModel& m, int p, double blockBytes);
}  // namespace cost

}  // namespace commux::collectives
