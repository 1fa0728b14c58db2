// Ring allreduce = ring reduce-scatter + ring allgather: each rank sends and receives
// 2(p-1)/p of the buffer in total, the bandwidth optimum, for large messages. Works for any
// p and any count (blocks may be uneven or empty).
#include "collectives/schedule.hpp"

namespace commux::collectives {

Schedule allreduceRing(int rank, int size, std::size_t count) {
  Schedule s;
  if (size <= 1 || count == 0) return s;
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;
  auto block = [&](int index) { return blockRange(count, size, ((index % size) + size) % size); };

  // Reduce-scatter: after step k, block (rank - k - 1) holds k + 2 contributions; after p-1
  // steps rank r owns the full reduction of block r + 1.
  for (int k = 0; k < size - 1; ++k) {
    const Range out = block(rank - k);
    const Range in = block(rank - k - 1);
    const auto round = static_cast<std::uint32_t>(k);
    s.add(Step{{Transfer{right, round, out.offset, out.count}},
               {Transfer{left, round, in.offset, in.count}}, RecvMode::Reduce});
  }
  // Allgather: pass the finished blocks around the ring.
  for (int k = 0; k < size - 1; ++k) {
    const Range out = block(rank + 1 - k);
    const Range in = block(rank - k);
    const auto round = static_cast<std::uint32_t>(size - 1 + k);
    s.add(Step{{Transfer{right, round, out.offset, out.count}},
               {Transfer{left, round, in.offset, in.count}}, RecvMode::Copy});
  }
  return s;
}

}  // namespace commux::collectives
