// Pipelined chain reduce for large messages: chunks flow from the tail of the chain toward
// the root, each rank folding its own contribution in before forwarding. Bandwidth cost is
// about one buffer per rank, unlike the binomial tree's log2(p) buffers at inner nodes.
#include <algorithm>

#include "collectives/schedule.hpp"

namespace commux::collectives {

Schedule reduceChain(int rank, int size, int root, std::size_t count, std::size_t chunk) {
  Schedule s;
  if (size <= 1) return s;
  chunk = std::max<std::size_t>(chunk, 1);
  const std::size_t chunks = chunkCount(count, chunk);
  const int vr = (rank - root + size) % size;
  // Data flows from vr+1 (upstream, farther from the root) to vr-1 (toward the root).
  const int upstream = vr < size - 1 ? (rank + 1) % size : -1;
  const int downstream = vr > 0 ? (rank - 1 + size) % size : -1;
  auto piece = [&](std::size_t i, int peer) { return chunkTransfer(count, chunk, i, peer); };

  if (upstream < 0 || downstream < 0) {
    Step all;
    all.recvMode = RecvMode::Reduce;
    for (std::size_t i = 0; i < chunks; ++i) {
      if (upstream < 0) all.sends.push_back(piece(i, downstream));
      else all.recvs.push_back(piece(i, upstream));
    }
    s.add(std::move(all));
    return s;
  }
  for (std::size_t i = 0; i <= chunks; ++i) {
    Step step;
    step.recvMode = RecvMode::Reduce;
    if (i < chunks) step.recvs.push_back(piece(i, upstream));
    if (i > 0) step.sends.push_back(piece(i - 1, downstream));
    s.add(std::move(step));
  }
  return s;
}

}  // namespace commux::collectives
