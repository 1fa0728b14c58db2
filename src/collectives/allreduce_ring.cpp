// Ring algorithms: reduce-scatter, allgather, and allreduce = reduce-scatter + allgather.
// Each rank sends and receives (p-1)/p of the buffer per phase, the bandwidth optimum, for
// large messages. Any p; blocks may be uneven or empty.
#include "collectives/schedule.hpp"

#include <algorithm>

namespace commux::collectives {
namespace {

const Range& blockOf(const std::vector<Range>& blocks, int index) {
  const int p = static_cast<int>(blocks.size());
  return blocks[static_cast<std::size_t>(((index % p) + p) % p)];
}

/// Chunk j of `block` (possibly empty past its end).
Range blockChunk(const Range& block, std::size_t chunk, std::size_t j) {
  const std::size_t begin = std::min(block.count, j * chunk);
  const std::size_t end = std::min(block.count, begin + chunk);
  return Range{block.offset + begin, end - begin};
}

}  // namespace

std::vector<Range> evenBlocks(std::size_t count, int parts) {
  std::vector<Range> blocks;
  for (int i = 0; i < parts; ++i) blocks.push_back(blockRange(count, parts, i));
  return blocks;
}

std::size_t ringChunks(const std::vector<Range>& blocks, std::size_t chunk) {
  if (chunk == 0) return 1;
  std::size_t largest = 0;
  for (const Range& b : blocks) largest = std::max(largest, b.count);
  return std::max<std::size_t>(1, (largest + chunk - 1) / chunk);
}

Schedule reduceScatterRing(int rank, int size, const std::vector<Range>& blocks,
                           std::uint32_t firstRound, std::size_t chunk) {
  Schedule s;
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;
  // Every rank derives the same chunk count from the same blocks, so the rounds of the
  // two ends of each transfer agree even where the blocks differ by an element.
  const std::size_t chunks = ringChunks(blocks, chunk);
  // After step k, block (rank - k - 2) holds k + 2 contributions; after p-1 steps rank r
  // holds the full reduction of its own block r. With chunking, each step is cut into
  // sub-steps: a received chunk is folded while it is still in cache, and the scratch
  // buffer is one chunk instead of one block (a fresh multi-MiB buffer is page-faulted in
  // on every call).
  for (int k = 0; k < size - 1; ++k) {
    const Range& out = blockOf(blocks, rank - k - 1);
    const Range& in = blockOf(blocks, rank - k - 2);
    for (std::size_t j = 0; j < chunks; ++j) {
      const auto round = firstRound + static_cast<std::uint32_t>(static_cast<std::size_t>(k) * chunks + j);
      Step step{{}, {}, RecvMode::Reduce};
      const Range o = chunks == 1 ? out : blockChunk(out, chunk, j);
      const Range i = chunks == 1 ? in : blockChunk(in, chunk, j);
      if (chunks == 1 || o.count > 0) step.sends.push_back(Transfer{right, round, o.offset, o.count});
      if (chunks == 1 || i.count > 0) step.recvs.push_back(Transfer{left, round, i.offset, i.count});
      if (!step.sends.empty() || !step.recvs.empty()) s.add(std::move(step));
    }
  }
  return s;
}

Schedule allgatherRing(int rank, int size, const std::vector<Range>& blocks,
                       std::uint32_t firstRound) {
  Schedule s;
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;
  // Step k passes on the block that arrived in step k-1 (our own in step 0).
  for (int k = 0; k < size - 1; ++k) {
    const Range& out = blockOf(blocks, rank - k);
    const Range& in = blockOf(blocks, rank - k - 1);
    const auto round = firstRound + static_cast<std::uint32_t>(k);
    s.add(Step{{Transfer{right, round, out.offset, out.count}},
               {Transfer{left, round, in.offset, in.count}}, RecvMode::Copy});
  }
  return s;
}

Schedule allreduceRing(int rank, int size, std::size_t count, std::size_t chunk) {
  if (size <= 1 || count == 0) return {};
  const std::vector<Range> blocks = evenBlocks(count, size);
  Schedule s = reduceScatterRing(rank, size, blocks, 0, chunk);
  const std::size_t rsRounds = static_cast<std::size_t>(size - 1) * ringChunks(blocks, chunk);
  Schedule gather = allgatherRing(rank, size, blocks, static_cast<std::uint32_t>(rsRounds));
  for (auto& step : gather.steps) s.add(std::move(step));
  return s;
}

}  // namespace commux::collectives
