#include "collectives/selection.hpp"

#include <algorithm>

namespace commux::collectives {
namespace {

std::size_t chunkElements(const Thresholds& t, std::size_t elementSize) {
  return std::max<std::size_t>(1, t.pipelineChunkBytes / std::max<std::size_t>(elementSize, 1));
}

}  // namespace

Plan planAllreduce(int rank, int size, std::size_t count, std::size_t elementSize,
                   const Thresholds& t) {
  // The ring needs at least one element per rank to beat recursive doubling at all.
  if (count * elementSize >= t.allreduceRingMinBytes && count >= static_cast<std::size_t>(size)) {
    return {allreduceRing(rank, size, count, chunkElements(t, elementSize)), "ring"};
  }
  return {allreduceRecursiveDoubling(rank, size, count), "recursive_doubling"};
}

Plan planBroadcast(int rank, int size, int root, std::size_t count, std::size_t elementSize,
                   const Thresholds& t) {
  if (size > 2 && count * elementSize >= t.chainMinBytes) {
    return {broadcastChain(rank, size, root, count, chunkElements(t, elementSize)), "chain"};
  }
  return {broadcastBinomial(rank, size, root, count), "binomial"};
}

Plan planReduce(int rank, int size, int root, std::size_t count, std::size_t elementSize,
                const Thresholds& t) {
  if (size > 2 && count * elementSize >= t.chainMinBytes) {
    return {reduceChain(rank, size, root, count, chunkElements(t, elementSize)), "chain"};
  }
  return {reduceBinomial(rank, size, root, count), "binomial"};
}

Plan planBarrier(int rank, int size) { return {barrierDissemination(rank, size), "dissemination"}; }

}  // namespace commux::collectives
