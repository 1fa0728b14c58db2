// Pipelined chain broadcast for large messages: the buffer travels down the chain
// root -> root+1 -> ... in chunks, and each rank forwards chunk i-1 while receiving chunk i,
// so the time is about (chunks + p - 2) chunk transfers instead of log2(p) whole messages.
#include <algorithm>

#include "collectives/schedule.hpp"

namespace commux::collectives {

Schedule broadcastChain(int rank, int size, int root, std::size_t count, std::size_t chunk) {
  Schedule s;
  if (size <= 1) return s;
  chunk = std::max<std::size_t>(chunk, 1);
  const std::size_t chunks = chunkCount(count, chunk);
  const int vr = (rank - root + size) % size;
  const int prev = vr > 0 ? (rank - 1 + size) % size : -1;
  const int next = vr < size - 1 ? (rank + 1) % size : -1;
  auto piece = [&](std::size_t i, int peer) { return chunkTransfer(count, chunk, i, peer); };

  if (prev < 0 || next < 0) {
    // The root only sends and the tail only receives: post everything at once.
    Step all;
    for (std::size_t i = 0; i < chunks; ++i) {
      if (prev < 0) all.sends.push_back(piece(i, next));
      else all.recvs.push_back(piece(i, prev));
    }
    s.add(std::move(all));
    return s;
  }
  for (std::size_t i = 0; i <= chunks; ++i) {
    Step step;
    if (i < chunks) step.recvs.push_back(piece(i, prev));
    if (i > 0) step.sends.push_back(piece(i - 1, next));
    s.add(std::move(step));
  }
  return s;
}

}  // namespace commux::collectives
