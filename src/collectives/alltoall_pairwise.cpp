// Pairwise-exchange all-to-all: p-1 steps, in step k each rank sends to r+k and receives
// from r-k, so every rank has exactly one message in each direction in flight and no rank
// is flooded. Blocks may differ in size (all_to_all_single with splits).
#include "collectives/schedule.hpp"

namespace commux::collectives {

Schedule alltoallPairwise(int rank, int size, const std::vector<Range>& sendBlocks,
                          const std::vector<Range>& recvBlocks) {
  Schedule s;
  for (int k = 1; k < size; ++k) {
    const int to = (rank + k) % size;
    const int from = (rank - k + size) % size;
    const auto round = static_cast<std::uint32_t>(k);
    s.add(Step{{Transfer{to, round, sendBlocks[to].offset, sendBlocks[to].count}},
               {Transfer{from, round, recvBlocks[from].offset, recvBlocks[from].count}},
               RecvMode::Copy});
  }
  return s;
}

}  // namespace commux::collectives
