// Ring algorithms: reduce-scatter, allgather, and allreduce = reduce-scatter + allgather.
// Each rank sends and receives (p-1)/p of the buffer per phase, the bandwidth optimum, for
// large messages. Any p; blocks may be uneven or empty.
#include "collectives/schedule.hpp"

namespace commux::collectives {
namespace {

const Range& blockOf(const std::vector<Range>& blocks, int index) {
  const int p = static_cast<int>(blocks.size());
  return blocks[static_cast<std::size_t>(((index % p) + p) % p)];
}

}  // namespace

std::vector<Range> evenBlocks(std::size_t count, int parts) {
  std::vector<Range> blocks;
  for (int i = 0; i < parts; ++i) blocks.push_back(blockRange(count, parts, i));
  return blocks;
}

Schedule reduceScatterRing(int rank, int size, const std::vector<Range>& blocks,
                           std::uint32_t firstRound) {
  Schedule s;
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;
  // After step k, block (rank - k - 2) holds k + 2 contributions; after p-1 steps rank r
  // holds the full reduction of its own block r.
  for (int k = 0; k < size - 1; ++k) {
    const Range& out = blockOf(blocks, rank - k - 1);
    const Range& in = blockOf(blocks, rank - k - 2);
    const auto round = firstRound + static_cast<std::uint32_t>(k);
    s.add(Step{{Transfer{right, round, out.offset, out.count}},
               {Transfer{left, round, in.offset, in.count}}, RecvMode::Reduce});
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

Schedule allreduceRing(int rank, int size, std::size_t count) {
  if (size <= 1 || count == 0) return {};
  const std::vector<Range> blocks = evenBlocks(count, size);
  Schedule s = reduceScatterRing(rank, size, blocks);
  Schedule gather = allgatherRing(rank, size, blocks, static_cast<std::uint32_t>(size - 1));
  for (auto& step : gather.steps) s.add(std::move(step));
  return s;
}

}  // namespace commux::collectives
