// Dissemination barrier: ceil(log2 p) rounds of empty messages, any p. After round k every
// rank has (transitively) heard from 2^(k+1) ranks, so nobody leaves before all arrived.
#include "collectives/schedule.hpp"

namespace commux::collectives {

Schedule barrierDissemination(int rank, int size) {
  Schedule s;
  std::uint32_t round = 0;
  for (int dist = 1; dist < size; dist <<= 1, ++round) {
    s.add(Step{{Transfer{(rank + dist) % size, round, 0, 0}},
               {Transfer{(rank - dist + size) % size, round, 0, 0}},
               RecvMode::Copy});
  }
  return s;
}

}  // namespace commux::collectives
