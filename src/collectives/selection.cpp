#include "collectives/selection.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "core/error.hpp"

namespace commux::collectives {
namespace {

std::size_t chunkElements(const Thresholds& t, std::size_t elementSize) {
  return std::max<std::size_t>(1, t.pipelineChunkBytes / std::max<std::size_t>(elementSize, 1));
}

std::size_t largestBlockBytes(const std::vector<Range>& blocks, std::size_t elementSize) {
  std::size_t largest = 0;
  for (const Range& b : blocks) largest = std::max(largest, b.count);
  return largest * elementSize;
}

std::size_t totalBytes(const std::vector<Range>& blocks, std::size_t elementSize) {
  std::size_t total = 0;
  for (const Range& b : blocks) total += b.count;
  return total * elementSize;
}

struct Fold {
  int pof2;
  int steps;    // log2(pof2)
  bool folded;  // p is not a power of two: pre and post steps
};

Fold foldOf(int p) {
  const int steps = floorLog2(static_cast<std::uint64_t>(p));
  return Fold{1 << steps, steps, (1 << steps) != p};
}

}  // namespace

namespace {

// One step moving `bytes` and folding `folded` bytes.
double step(const CostModel& m, double bytes, double folded) {
  return m.alpha + m.gamma + m.beta * bytes + m.delta * folded;
}

}  // namespace

namespace cost {

double allreduceRecursiveDoubling(const CostModel& m, int p, double n) {
  if (p <= 1) return 0;
  const Fold f = foldOf(p);
  const double fold = f.folded ? step(m, n, n) + step(m, n, 0) : 0;
  return fold + f.steps * step(m, n, n);
}

double allreduceRabenseifner(const CostModel& m, int p, double n) {
  if (p <= 1) return 0;
  const Fold f = foldOf(p);
  const double fold = f.folded ? step(m, n, n) + step(m, n, 0) : 0;
  const double share = (f.pof2 - 1.0) / f.pof2 * n;
  // Halving: log2(pof2) steps whose transfers sum to (pof2-1)/pof2 of the buffer; doubling
  // the same without folds.
  return fold + 2 * f.steps * (m.alpha + m.gamma) + share * (2 * m.beta + m.delta);
}

double allreduceRing(const CostModel& m, int p, double n) {
  if (p <= 1) return 0;
  return 2 * (p - 1) * (m.alpha + m.gamma) + (p - 1.0) / p * n * (2 * m.beta + m.delta);
}

double reduceScatterRing(const CostModel& m, int p, double n) {
  if (p <= 1) return 0;
  return (p - 1) * (m.alpha + m.gamma) + (p - 1.0) / p * n * (m.beta + m.delta);
}

double reduceScatterRecursiveHalving(const CostModel& m, int p, double n) {
  if (p <= 1) return 0;
  const Fold f = foldOf(p);
  const double fold = f.folded ? step(m, n, n) + step(m, n / p, 0) : 0;
  return fold + f.steps * (m.alpha + m.gamma) + (f.pof2 - 1.0) / f.pof2 * n * (m.beta + m.delta);
}

int ceilLog2(int p) { return p <= 1 ? 0 : floorLog2(static_cast<std::uint64_t>(p - 1)) + 1; }

double broadcastBinomial(const CostModel& m, int p, double n) {
  return ceilLog2(p) * step(m, n, 0);
}

double broadcastChain(const CostModel& m, int p, double n, double chunkBytes) {
  if (p <= 1) return 0;
  const double chunk = std::max(1.0, std::min(chunkBytes, n));
  const double chunks = std::max(1.0, std::ceil(n / chunk));
  return (p - 2 + chunks) * step(m, chunk, 0);
}

double broadcastScatterAllgather(const CostModel& m, int p, double n) {
  if (p <= 1) return 0;
  // Scatter: log2 p levels, the root's sends sum to (p-1)/p of the buffer; allgather:
  // ceil(log2 p) steps moving (p-1)/p of it.
  return 2 * ceilLog2(p) * (m.alpha + m.gamma) + 2 * (p - 1.0) / p * n * m.beta;
}

double alltoallPairwise(const CostModel& m, int p, double b) {
  if (p <= 1) return 0;
  return (p - 1) * step(m, b, 0);
}

double alltoallBruck(const CostModel& m, int p, double b) {
  double t = 0;
  // Each step moves the blocks whose index has bit k set (at most p/2), copies them into
  // the message and out of it at the other end.
  for (int k = 0; k < ceilLog2(p); ++k) {
    const double moved = static_cast<double>(alltoallBruckBlocks(p, k)) * b;
    t += step(m, moved, 0) + 2 * m.epsilon * moved;
  }
  return t;
}

}  // namespace cost

namespace {

bool forced(const Thresholds& t, std::string_view name) {
  return t.forced != nullptr && name == t.forced;
}

}  // namespace

std::vector<Range> equalBlocks(std::size_t count, int size) {
  std::vector<Range> blocks;
  for (int r = 0; r < size; ++r) blocks.push_back({static_cast<std::size_t>(r) * count, count});
  return blocks;
}

Plan planAllreduce(int rank, int size, std::size_t count, std::size_t elementSize,
                   const Thresholds& t) {
  if (forced(t, "ring"))
    return {allreduceRing(rank, size, count, chunkElements(t, elementSize)), "ring"};
  if (forced(t, "recursive_doubling")) {
    return {allreduceRecursiveDoubling(rank, size, count), "recursive_doubling"};
  }
  if (forced(t, "rabenseifner")) return {allreduceRabenseifner(rank, size, count), "rabenseifner"};
  const std::size_t bytes = count * elementSize;
  // The ring needs at least one element per rank to beat recursive doubling at all.
  const bool ringPossible = count >= static_cast<std::size_t>(size);
  if (size < t.logAlgorithmsMinRanks) {
    if (bytes >= t.allreduceRingMinBytes && ringPossible) {
      return {allreduceRing(rank, size, count, chunkElements(t, elementSize)), "ring"};
    }
    return {allreduceRecursiveDoubling(rank, size, count), "recursive_doubling"};
  }
  if (ringPossible && bytes / static_cast<std::size_t>(size) >= t.ringMinBlockBytes) {
    return {allreduceRing(rank, size, count, chunkElements(t, elementSize)), "ring"};
  }
  const auto n = static_cast<double>(bytes);
  const double rd = cost::allreduceRecursiveDoubling(t.model, size, n);
  const double rab = cost::allreduceRabenseifner(t.model, size, n);
  const double ring = ringPossible ? cost::allreduceRing(t.model, size, n) : rd + rab + 1;
  if (rd <= rab && rd <= ring) return {allreduceRecursiveDoubling(rank, size, count), "recursive_doubling"};
  if (rab <= ring) return {allreduceRabenseifner(rank, size, count), "rabenseifner"};
  return {allreduceRing(rank, size, count, chunkElements(t, elementSize)), "ring"};
}

Plan planAllgather(int rank, int size, const std::vector<Range>& blocks, std::size_t elementSize,
                   const Thresholds& t) {
  if (forced(t, "ring")) return {allgatherRing(rank, size, blocks), "ring"};
  if (forced(t, "recursive_doubling")) {
    COMMUX_CHECK(isPowerOfTwo(size), InvalidArgument,
                 "commux: COMMUX_ALGORITHM_ALLGATHER="
                 "recursive_doubling needs a power-of-two group, not ",
                 size, " ranks");
    return {allgatherRecursiveDoubling(rank, size, blocks), "recursive_doubling"};
  }
  if (forced(t, "dissemination"))
    return {allgatherDissemination(rank, size, blocks), "dissemination"};
  // Same bytes per rank either way; the logarithmic algorithms take ceil(log2 p) steps
  // instead of p-1.
  if (size < t.logAlgorithmsMinRanks || largestBlockBytes(blocks, elementSize) >= t.ringMinBlockBytes) {
    return {allgatherRing(rank, size, blocks), "ring"};
  }
  if (isPowerOfTwo(size)) return {allgatherRecursiveDoubling(rank, size, blocks), "recursive_doubling"};
  return {allgatherDissemination(rank, size, blocks), "dissemination"};
}

Plan planReduceScatter(int rank, int size, const std::vector<Range>& blocks,
                       std::size_t elementSize, const Thresholds& t) {
  auto ring = [&] {
    return Plan{reduceScatterRing(rank, size, blocks, 0, chunkElements(t, elementSize)), "ring"};
  };
  if (forced(t, "ring")) return ring();
  if (forced(t, "recursive_halving")) {
    return {reduceScatterRecursiveHalving(rank, size, blocks), "recursive_halving"};
  }
  if (size < t.logAlgorithmsMinRanks || largestBlockBytes(blocks, elementSize) >= t.ringMinBlockBytes) {
    return ring();
  }
  // Other than powers of two, halving first folds the whole buffer of 2 * (p - pof2)
  // ranks into their neighbours: worth it while that costs less than the ring's extra steps.
  const auto n = static_cast<double>(totalBytes(blocks, elementSize));
  if (cost::reduceScatterRecursiveHalving(t.model, size, n) <= cost::reduceScatterRing(t.model, size, n)) {
    return {reduceScatterRecursiveHalving(rank, size, blocks), "recursive_halving"};
  }
  return ring();
}

Plan planBroadcast(int rank, int size, int root, std::size_t count, std::size_t elementSize,
                   const Thresholds& t) {
  if (forced(t, "binomial")) return {broadcastBinomial(rank, size, root, count), "binomial"};
  if (forced(t, "chain")) {
    return {broadcastChain(rank, size, root, count, chunkElements(t, elementSize)), "chain"};
  }
  if (forced(t, "scatter_allgather")) {
    return {broadcastScatterAllgather(rank, size, root, count), "scatter_allgather"};
  }
  if (size >= t.logAlgorithmsMinRanks) {
    const auto n = static_cast<double>(count * elementSize);
    const double binomial = cost::broadcastBinomial(t.model, size, n);
    const double chain = cost::broadcastChain(t.model, size, n, static_cast<double>(t.pipelineChunkBytes));
    const double scatter = cost::broadcastScatterAllgather(t.model, size, n);
    if (binomial <= chain && binomial <= scatter) return {broadcastBinomial(rank, size, root, count), "binomial"};
    if (scatter <= chain) return {broadcastScatterAllgather(rank, size, root, count), "scatter_allgather"};
    return {broadcastChain(rank, size, root, count, chunkElements(t, elementSize)), "chain"};
  }
  if (size > 2 && count * elementSize >= t.chainMinBytes) {
    return {broadcastChain(rank, size, root, count, chunkElements(t, elementSize)), "chain"};
  }
  return {broadcastBinomial(rank, size, root, count), "binomial"};
}

Plan planReduce(int rank, int size, int root, std::size_t count, std::size_t elementSize,
                const Thresholds& t) {
  if (forced(t, "binomial")) return {reduceBinomial(rank, size, root, count), "binomial"};
  if (forced(t, "chain")) {
    return {reduceChain(rank, size, root, count, chunkElements(t, elementSize)), "chain"};
  }
  if (size > 2 && count * elementSize >= t.chainMinBytes) {
    return {reduceChain(rank, size, root, count, chunkElements(t, elementSize)), "chain"};
  }
  return {reduceBinomial(rank, size, root, count), "binomial"};
}

namespace {

// Blocks of one size, side by side.
bool equalAndContiguous(const std::vector<Range>& blocks) {
  for (std::size_t i = 1; i < blocks.size(); ++i) {
    if (blocks[i].count != blocks[0].count ||
        blocks[i].offset != blocks[i - 1].offset + blocks[i - 1].count) {
      return false;
    }
  }
  return !blocks.empty();
}

}  // namespace

Plan planAlltoall(int rank, int size, const std::vector<Range>& sendBlocks,
                  const std::vector<Range>& recvBlocks, std::size_t elementSize, bool cpu,
                  bool uniform, const Thresholds& t) {
  auto pairwise = [&] {
    return Plan{alltoallPairwise(rank, size, sendBlocks, recvBlocks), "pairwise"};
  };
  if (forced(t, "pairwise")) return pairwise();
  // Blocks of different sizes would have to be announced first (an exchange of counts).
  const bool bruckPossible = cpu && uniform && equalAndContiguous(sendBlocks) &&
                             equalAndContiguous(recvBlocks) &&
                             sendBlocks[0].count == recvBlocks[0].count;
  if (forced(t, "bruck")) {
    COMMUX_CHECK(bruckPossible, InvalidArgument,
                 "commux: COMMUX_ALGORITHM_ALL_TO_ALL=bruck needs CPU tensors split evenly: "
                 "all_to_all_single without split sizes (every rank must know every block's "
                 "size)");
  } else if (!bruckPossible || size < t.logAlgorithmsMinRanks) {
    return pairwise();
  }
  const std::size_t count = sendBlocks[0].count;
  const auto b = static_cast<double>(count * elementSize);
  if (!forced(t, "bruck") &&
      cost::alltoallBruck(t.model, size, b) >= cost::alltoallPairwise(t.model, size, b)) {
    return pairwise();
  }
  const std::size_t sendEnd = sendBlocks.back().offset + sendBlocks.back().count;
  const std::size_t recvEnd = recvBlocks.back().offset + recvBlocks.back().count;
  return {alltoallBruck(rank, size, count, sendBlocks[0].offset, recvBlocks[0].offset,
                        std::max(sendEnd, recvEnd)),
          "bruck"};
}

Plan planBarrier(int rank, int size) { return {barrierDissemination(rank, size), "dissemination"}; }

}  // namespace commux::collectives
