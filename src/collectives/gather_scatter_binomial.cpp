// Binomial-tree gather and scatter: ceil(log2 p) rounds and no loop over all ranks at the
// root. In ranks relative to the root (vr), the subtree of vr spans vr .. vr + extent - 1,
// where extent is vr's lowest set bit (p for the root), so each subtree's blocks are
// contiguous in a buffer laid out in relative-rank order and travel as one message.
#include <algorithm>

#include "collectives/schedule.hpp"

namespace commux::collectives {
namespace {

struct Tree {
  int parentMask = 0;                              // 0 at the root
  std::vector<std::pair<int, int>> children;       // (child vr, mask)
};

Tree treeOf(int vr, int size) {
  Tree t;
  for (int m = 1; m < size; m <<= 1) {
    if (vr & m) {
      t.parentMask = m;
      break;
    }
    if (vr + m < size) t.children.emplace_back(vr + m, m);
  }
  return t;
}

/// Elements of the subtree rooted at relative rank `vr` whose lowest set bit is `mask`.
Transfer subtree(int peer, int vr, int mask, int size, std::size_t count) {
  const int extent = std::min(mask, size - vr);
  return Transfer{peer, static_cast<std::uint32_t>(floorLog2(static_cast<std::uint64_t>(mask))),
                  static_cast<std::size_t>(vr) * count, static_cast<std::size_t>(extent) * count};
}

}  // namespace

Schedule gatherBinomial(int rank, int size, int root, std::size_t count) {
  Schedule s;
  if (size <= 1) return s;
  const int vr = (rank - root + size) % size;
  auto real = [&](int v) { return (v + root) % size; };
  const Tree t = treeOf(vr, size);
  Step fromChildren;
  for (auto [child, mask] : t.children) {
    fromChildren.recvs.push_back(subtree(real(child), child, mask, size, count));
  }
  s.add(std::move(fromChildren));
  if (t.parentMask != 0) {
    s.add(Step{{subtree(real(vr - t.parentMask), vr, t.parentMask, size, count)}, {}, RecvMode::Copy});
  }
  return s;
}

Schedule scatterBinomial(int rank, int size, int root, std::size_t count) {
  Schedule s;
  if (size <= 1) return s;
  const int vr = (rank - root + size) % size;
  auto real = [&](int v) { return (v + root) % size; };
  const Tree t = treeOf(vr, size);
  if (t.parentMask != 0) {
    s.add(Step{{}, {subtree(real(vr - t.parentMask), vr, t.parentMask, size, count)}, RecvMode::Copy});
  }
  Step toChildren;
  // Largest subtree first: it has the longest way to go.
  for (auto it = t.children.rbegin(); it != t.children.rend(); ++it) {
    toChildren.sends.push_back(subtree(real(it->first), it->first, it->second, size, count));
  }
  s.add(std::move(toChildren));
  return s;
}

}  // namespace commux::collectives
