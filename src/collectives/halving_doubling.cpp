// Logarithmic algorithms for large groups: recursive halving (reduce-scatter), recursive
// doubling (allgather), Rabenseifner's allreduce (the two back to back), a dissemination
// allgather for any group size, and the scatter + allgather broadcast built from it. Each
// phase takes ceil(log2 p) steps (plus two for groups that are not a power of two) instead
// of the ring's p-1, and moves the same (p-1)/p of the buffer when p is a power of two.
//
// Non-powers of two: the first 2*rem ranks (rem = p - pof2) pair up, even into odd, before
// the power-of-two part runs among pof2 "new ranks", and the odd rank hands the result
// back after (the pre/post steps of Rabenseifner, as in allreduceRecursiveDoubling). New
// rank v is real rank 2v+1 for v < rem and v+rem otherwise.
//
// Every transfer is one contiguous range of the work buffer, and every block lands at its
// final offset (no rotation): the block lists must be contiguous (block i+1 starts where
// block i ends), as the c10d layer's equal blocks are.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "collectives/schedule.hpp"

namespace commux::collectives {
namespace {

int realRank(int newRank, int rem) { return newRank < rem ? 2 * newRank + 1 : newRank + rem; }

void requireContiguous(const std::vector<Range>& blocks, int size, const char* what) {
  if (static_cast<int>(blocks.size()) != size) {
    throw std::invalid_argument(std::string("commux: ") + what + ": " +
                                std::to_string(blocks.size()) + " blocks for " +
                                std::to_string(size) + " ranks");
  }
  for (std::size_t i = 1; i < blocks.size(); ++i) {
    if (blocks[i].offset != blocks[i - 1].offset + blocks[i - 1].count) {
      throw std::invalid_argument(std::string("commux: ") + what +
                                  ": blocks must be contiguous (block " + std::to_string(i) +
                                  " does not start where block " + std::to_string(i - 1) +
                                  " ends)");
    }
  }
}

std::size_t endOf(const std::vector<Range>& blocks) {
  return blocks.empty() ? 0 : blocks.back().offset + blocks.back().count;
}

Range span(const std::vector<std::size_t>& bound, int lo, int hi) {
  return Range{bound[static_cast<std::size_t>(lo)],
               bound[static_cast<std::size_t>(hi)] - bound[static_cast<std::size_t>(lo)]};
}

Transfer to(int peer, std::uint32_t round, Range r) { return Transfer{peer, round, r.offset, r.count}; }

/// Recursive halving among pof2 new ranks: new rank v ends with the reduction, over the
/// new ranks, of [bound[v], bound[v+1]). Rounds firstRound .. firstRound + log2(pof2) - 1.
void halving(Schedule& s, int newRank, int pof2, int rem, const std::vector<std::size_t>& bound,
             std::uint32_t firstRound) {
  int lo = 0;
  int hi = pof2;
  std::uint32_t round = firstRound;
  for (int mask = pof2 / 2; mask > 0; mask /= 2, ++round) {
    const int mid = lo + mask;
    const int partner = realRank(newRank ^ mask, rem);
    const bool lower = newRank < mid;
    const Range keep = lower ? span(bound, lo, mid) : span(bound, mid, hi);
    const Range give = lower ? span(bound, mid, hi) : span(bound, lo, mid);
    s.add(Step{{to(partner, round, give)}, {to(partner, round, keep)}, RecvMode::Reduce});
    if (lower) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
}

/// Recursive doubling among pof2 new ranks: new rank v starts with [bound[v], bound[v+1])
/// and ends with [bound[0], bound[pof2]). Rounds firstRound .. firstRound + log2(pof2) - 1.
void doubling(Schedule& s, int newRank, int pof2, int rem, const std::vector<std::size_t>& bound,
              std::uint32_t firstRound) {
  std::uint32_t round = firstRound;
  for (int mask = 1; mask < pof2; mask *= 2, ++round) {
    const int mine = newRank / mask * mask;
    const int theirs = mine ^ mask;
    const int partner = realRank(newRank ^ mask, rem);
    s.add(Step{{to(partner, round, span(bound, mine, mine + mask))},
               {to(partner, round, span(bound, theirs, theirs + mask))},
               RecvMode::Copy});
  }
}

/// Dissemination allgather among `size` ranks numbered v (real rank real(v)): v holds the
/// cyclic range [v, v + have) of the `size` ranges [bound[i], bound[i+1]); in each step it
/// sends the first min(have, size - have) to v - have and receives as many from v + have,
/// so `have` doubles (Bruck's allgather with absolute offsets instead of the final
/// rotation). A cyclic range that wraps past the last range is two transfers, rounds 2k and
/// 2k+1 after firstRound.
template <typename Real>
void disseminate(Schedule& s, int v, int size, const std::vector<std::size_t>& bound, Real real,
                 std::uint32_t firstRound) {
  auto pieces = [&](int peer, std::uint32_t round, int first, int count, std::vector<Transfer>& out) {
    const int stop = first + count;
    out.push_back(to(peer, round, span(bound, first, std::min(stop, size))));
    if (stop > size) out.push_back(to(peer, round + 1, span(bound, 0, stop - size)));
  };
  int have = 1;
  for (std::uint32_t k = 0; have < size; ++k) {
    const int n = std::min(have, size - have);
    Step step{{}, {}, RecvMode::Copy};
    const std::uint32_t round = firstRound + 2 * k;
    pieces(real((v - have + size) % size), round, v, n, step.sends);
    pieces(real((v + have) % size), round, (v + have) % size, n, step.recvs);
    s.add(std::move(step));
    have += n;
  }
}

}  // namespace

bool isPowerOfTwo(int size) { return size > 0 && (size & (size - 1)) == 0; }

Schedule allgatherRecursiveDoubling(int rank, int size, const std::vector<Range>& blocks,
                                    std::uint32_t firstRound) {
  if (!isPowerOfTwo(size)) {
    throw std::invalid_argument("commux: allgatherRecursiveDoubling needs a power-of-two group, not " +
                                std::to_string(size) + " ranks (use allgatherDissemination)");
  }
  requireContiguous(blocks, size, "allgatherRecursiveDoubling");
  Schedule s;
  std::vector<std::size_t> bound;
  for (const Range& b : blocks) bound.push_back(b.offset);
  bound.push_back(endOf(blocks));
  doubling(s, rank, size, 0, bound, firstRound);
  return s;
}

Schedule allgatherDissemination(int rank, int size, const std::vector<Range>& blocks,
                                std::uint32_t firstRound) {
  requireContiguous(blocks, size, "allgatherDissemination");
  Schedule s;
  std::vector<std::size_t> bound;
  for (const Range& b : blocks) bound.push_back(b.offset);
  bound.push_back(endOf(blocks));
  disseminate(s, rank, size, bound, [](int v) { return v; }, firstRound);
  return s;
}

Schedule broadcastScatterAllgather(int rank, int size, int root, std::size_t count) {
  Schedule s;
  if (size <= 1 || count == 0) return s;
  // Segment v of the buffer (p near-equal segments, in ranks relative to the root) is
  // relative rank v's share. A binomial scatter hands every subtree its segments as one
  // message, then the dissemination allgather spreads them, in relative ranks.
  const int vr = (rank - root + size) % size;
  auto real = [&](int v) { return (v + root) % size; };
  std::vector<std::size_t> bound;
  for (int v = 0; v < size; ++v) bound.push_back(blockRange(count, size, v).offset);
  bound.push_back(count);
  auto subtree = [&](int peer, int v, int mask) {
    const int extent = std::min(mask, size - v);
    return to(peer, static_cast<std::uint32_t>(floorLog2(static_cast<std::uint64_t>(mask))),
              span(bound, v, v + extent));
  };
  int parentMask = 0;
  std::vector<std::pair<int, int>> children;  // (child vr, mask)
  for (int m = 1; m < size; m <<= 1) {
    if (vr & m) {
      parentMask = m;
      break;
    }
    if (vr + m < size) children.emplace_back(vr + m, m);
  }
  if (parentMask != 0) {
    s.add(Step{{}, {subtree(real(vr - parentMask), vr, parentMask)}, RecvMode::Copy});
  }
  Step toChildren;
  for (auto it = children.rbegin(); it != children.rend(); ++it) {
    toChildren.sends.push_back(subtree(real(it->first), it->first, it->second));
  }
  s.add(std::move(toChildren));
  const auto scatterRounds = static_cast<std::uint32_t>(floorLog2(static_cast<std::uint64_t>(size - 1)) + 1);
  disseminate(s, vr, size, bound, real, scatterRounds);
  return s;
}

Schedule reduceScatterRecursiveHalving(int rank, int size, const std::vector<Range>& blocks,
                                       std::uint32_t firstRound) {
  requireContiguous(blocks, size, "reduceScatterRecursiveHalving");
  Schedule s;
  if (size <= 1) return s;
  const int pof2 = 1 << floorLog2(static_cast<std::uint64_t>(size));
  const int rem = size - pof2;
  const std::uint32_t lastRound = firstRound + static_cast<std::uint32_t>(floorLog2(pof2)) + 1;
  const Range all{blocks[0].offset, endOf(blocks) - blocks[0].offset};
  // New rank v covers real blocks 2v, 2v+1 (v < rem) or v+rem: its range starts at the
  // block of real rank (v < rem ? 2v : v+rem).
  std::vector<std::size_t> bound;
  for (int v = 0; v < pof2; ++v) bound.push_back(blocks[static_cast<std::size_t>(v < rem ? 2 * v : v + rem)].offset);
  bound.push_back(endOf(blocks));

  int newRank;
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      s.add(Step{{to(rank + 1, firstRound, all)}, {}, RecvMode::Copy});
      s.add(Step{{}, {to(rank + 1, lastRound, blocks[static_cast<std::size_t>(rank)])}, RecvMode::Copy});
      return s;
    }
    s.add(Step{{}, {to(rank - 1, firstRound, all)}, RecvMode::Reduce});
    newRank = rank / 2;
  } else {
    newRank = rank - rem;
  }
  halving(s, newRank, pof2, rem, bound, firstRound + 1);
  if (rank < 2 * rem) {
    s.add(Step{{to(rank - 1, lastRound, blocks[static_cast<std::size_t>(rank - 1)])}, {}, RecvMode::Copy});
  }
  return s;
}

Schedule allreduceRabenseifner(int rank, int size, std::size_t count) {
  Schedule s;
  if (size <= 1 || count == 0) return s;
  const int pof2 = 1 << floorLog2(static_cast<std::uint64_t>(size));
  const int rem = size - pof2;
  const auto steps = static_cast<std::uint32_t>(floorLog2(pof2));
  const std::uint32_t lastRound = 2 * steps + 1;
  const Range all{0, count};

  int newRank;
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      s.add(Step{{to(rank + 1, 0, all)}, {}, RecvMode::Copy});
      s.add(Step{{}, {to(rank + 1, lastRound, all)}, RecvMode::Copy});
      return s;
    }
    s.add(Step{{}, {to(rank - 1, 0, all)}, RecvMode::Reduce});
    newRank = rank / 2;
  } else {
    newRank = rank - rem;
  }
  // pof2 near-equal segments; new rank v reduces segment v, then everyone gathers them.
  // Each segment is folded by one rank only, so every rank ends bitwise equal.
  std::vector<std::size_t> bound;
  for (int v = 0; v < pof2; ++v) bound.push_back(blockRange(count, pof2, v).offset);
  bound.push_back(count);
  halving(s, newRank, pof2, rem, bound, 1);
  doubling(s, newRank, pof2, rem, bound, 1 + steps);
  if (rank < 2 * rem) s.add(Step{{to(rank - 1, lastRound, all)}, {}, RecvMode::Copy});
  return s;
}

std::uint32_t maxRound(const Schedule& s) {
  std::uint32_t m = 0;
  for (const auto& step : s.steps) {
    for (const auto& t : step.sends) m = std::max(m, t.round);
    for (const auto& t : step.recvs) m = std::max(m, t.round);
  }
  return m;
}

}  // namespace commux::collectives
