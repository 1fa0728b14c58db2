// Recursive doubling: log2(p) exchanges of the whole buffer, for small messages where
// latency dominates. For p that is not a power of two the first 2*rem ranks fold in pairs
// (even into odd) before, and get the result back after (Rabenseifner's pre/post step).
// Every rank computes a (op) b in the same association, so all ranks end bitwise equal.
#include "collectives/schedule.hpp"

namespace commux::collectives {

Schedule allreduceRecursiveDoubling(int rank, int size, std::size_t count) {
  Schedule s;
  if (size <= 1 || count == 0) return s;
  const int pof2 = 1 << floorLog2(static_cast<std::uint64_t>(size));
  const int rem = size - pof2;
  const std::uint32_t lastRound = static_cast<std::uint32_t>(floorLog2(pof2)) + 1;

  int newRank;
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      // Folded out: hand our data to the odd neighbour, get the result back at the end.
      s.add(Step{{Transfer{rank + 1, 0, 0, count}}, {}, RecvMode::Copy});
      s.add(Step{{}, {Transfer{rank + 1, lastRound, 0, count}}, RecvMode::Copy});
      return s;
    }
    s.add(Step{{}, {Transfer{rank - 1, 0, 0, count}}, RecvMode::Reduce});
    newRank = rank / 2;
  } else {
    newRank = rank - rem;
  }

  for (int mask = 1; mask < pof2; mask <<= 1) {
    const int partnerNew = newRank ^ mask;
    const int partner = partnerNew < rem ? partnerNew * 2 + 1 : partnerNew + rem;
    const auto round = static_cast<std::uint32_t>(floorLog2(mask)) + 1;
    s.add(Step{{Transfer{partner, round, 0, count}}, {Transfer{partner, round, 0, count}},
               RecvMode::Reduce});
  }
  if (rank < 2 * rem) {
    s.add(Step{{Transfer{rank - 1, lastRound, 0, count}}, {}, RecvMode::Copy});
  }
  return s;
}

}  // namespace commux::collectives
