// Binomial-tree reduce for small messages: the mirror image of the binomial broadcast.
// A rank receives from all its children at once, folds them in a fixed order (smallest
// subtree first, so the result is deterministic run to run), then sends to its parent.
#include "collectives/schedule.hpp"

namespace commux::collectives {

Schedule reduceBinomial(int rank, int size, int root, std::size_t count) {
  Schedule s;
  if (size <= 1) return s;
  const int vr = (rank - root + size) % size;
  auto real = [&](int v) { return (v + root) % size; };

  Step children;
  children.recvMode = RecvMode::Reduce;
  int parentMask = 0;
  for (int m = 1; m < size; m <<= 1) {
    if (vr & m) {
      parentMask = m;
      break;
    }
    if (vr + m < size) {
      children.recvs.push_back(
          Transfer{real(vr + m), static_cast<std::uint32_t>(floorLog2(m)), 0, count});
    }
  }
  s.add(std::move(children));
  if (parentMask != 0) {
    s.add(Step{{Transfer{real(vr - parentMask), static_cast<std::uint32_t>(floorLog2(parentMask)),
                         0, count}},
               {},
               RecvMode::Copy});
  }
  return s;
}

}  // namespace commux::collectives
