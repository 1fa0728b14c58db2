// Binomial-tree broadcast: ceil(log2 p) rounds, for small messages. Ranks are renumbered
// relative to the root (vr = rank - root mod p); vr receives from vr minus its lowest set
// bit, then sends to vr + m for each smaller power of two m, largest subtree first.
#include "collectives/schedule.hpp"

namespace commux::collectives {

Schedule broadcastBinomial(int rank, int size, int root, std::size_t count) {
  Schedule s;
  if (size <= 1) return s;
  const int vr = (rank - root + size) % size;
  auto real = [&](int v) { return (v + root) % size; };

  int mask = 1;
  while (mask < size) {
    if (vr & mask) {
      const auto round = static_cast<std::uint32_t>(floorLog2(mask));
      s.add(Step{{}, {Transfer{real(vr - mask), round, 0, count}}, RecvMode::Copy});
      break;
    }
    mask <<= 1;
  }
  Step sends;
  for (int m = mask >> 1; m > 0; m >>= 1) {
    if (vr + m < size) {
      sends.sends.push_back(
          Transfer{real(vr + m), static_cast<std::uint32_t>(floorLog2(m)), 0, count});
    }
  }
  s.add(std::move(sends));
  return s;
}

}  // namespace commux::collectives
