// Bruck's all-to-all (Bruck et al. 1997; MPICH's MPIR_Alltoall_bruck): ceil(log2 p)
// messages of up to ~p/2 blocks instead of pairwise's p-1 messages of one block, which pays
// for small blocks in large groups. Index blocks relative to the rank: block i of rank s is
// the one for rank s+i. In step k every rank forwards to r + 2^k all blocks whose index has
// bit k set, keeping their index, so a block moves i ranks in all and lands at s+i.
//
// Where MPICH rotates the input into a temporary array indexed by i and rotates it back at
// the end, a block that has been received lives here in its final slot: the output block
// from rank r-i, which nothing else touches before i's last hop lands there. Each message
// holds the runs of indices [a, a + 2^k) in descending order, so that the blocks of a run
// received in earlier steps come out of consecutive slots in one copy (two where the slots
// wrap past block 0) and go back into them the same way; only a run's first index a has no
// lower bit set, and its block still comes from the input. Every step first unpacks the
// previous step's message into the slots, then packs its own; a last step of copies alone
// unpacks the final message.
#include <algorithm>
#include <cstdint>

#include "collectives/schedule.hpp"

namespace commux::collectives {
namespace {

int modulo(std::int64_t x, int size) { return static_cast<int>(((x % size) + size) % size); }

void addCopy(std::vector<Copy>& copies, Copy c) {
  if (c.count > 0) copies.push_back(c);
}

}  // namespace

std::size_t alltoallBruckBlocks(int size, int step) {
  const std::int64_t bit = std::int64_t{1} << step;
  const std::int64_t p = size;
  // Whole periods of 2^(k+1) indices hold 2^k each; the partial one what passes 2^k.
  return static_cast<std::size_t>(p / (2 * bit) * bit +
                                  std::max<std::int64_t>(0, p % (2 * bit) - bit));
}

std::size_t alltoallBruckWorkspace(int size, std::size_t count) {
  std::size_t most = 0;
  for (int k = 0; (std::int64_t{1} << k) < size; ++k)
    most = std::max(most, alltoallBruckBlocks(size, k));
  return 2 * most * count;
}

Schedule alltoallBruck(int rank, int size, std::size_t count, std::size_t sendOffset,
                       std::size_t recvOffset, std::size_t workspaceOffset) {
  Schedule s;
  if (size <= 1) return s;
  const std::size_t area = alltoallBruckWorkspace(size, count) / 2;
  const std::size_t sendPack = workspaceOffset;
  const std::size_t recvPack = workspaceOffset + area;
  s.workElements = workspaceOffset + 2 * area;

  // Output slots first, first+1, ... (cyclically, n of them) against consecutive elements of
  // a pack area from `packed` on: into the pack area, or out of it.
  auto slots = [&](std::vector<Copy>& copies, int first, std::int64_t n, std::size_t packed,
                   bool intoPack) {
    while (n > 0) {
      const std::int64_t run = std::min<std::int64_t>(n, size - first);
      const std::size_t slot = recvOffset + static_cast<std::size_t>(first) * count;
      const std::size_t elements = static_cast<std::size_t>(run) * count;
      addCopy(copies, intoPack ? Copy{slot, packed, elements} : Copy{packed, slot, elements});
      packed += elements;
      n -= run;
      first = 0;
    }
  };

  std::vector<Copy> unpack;  // of the message the current step receives
  for (int k = 0; (std::int64_t{1} << k) < size; ++k) {
    const std::int64_t bit = std::int64_t{1} << k;
    Step step;
    step.sendSource = Source::Work;
    // Room for all (at 4,096 ranks a rank holds ~10,000 copies): a run packs its input
    // block and, from step 1 on, its earlier blocks; one run at most wraps past slot 0.
    const auto runs = static_cast<std::size_t>((size - 1) / (2 * bit) + 1);
    step.copies.reserve(unpack.size() + (k == 0 ? runs : 2 * runs + 1));
    step.copies.insert(step.copies.end(), unpack.begin(), unpack.end());
    unpack = std::vector<Copy>();
    unpack.reserve(runs + 1);
    std::size_t packed = 0;
    for (std::int64_t a = bit; a < size; a += 2 * bit) {
      const std::int64_t last = std::min<std::int64_t>(a + bit, size) - 1;
      // Indices last, last-1, ..., a live in slots (rank - last) mod p upwards.
      const int first = modulo(rank - last, size);
      slots(step.copies, first, last - a, sendPack + packed, true);
      addCopy(step.copies,
              Copy{sendOffset + static_cast<std::size_t>(modulo(rank + a, size)) * count,
                   sendPack + packed + static_cast<std::size_t>(last - a) * count, count,
                   Source::Send});
      slots(unpack, first, last - a + 1, recvPack + packed, false);
      packed += static_cast<std::size_t>(last - a + 1) * count;
    }
    const auto round = static_cast<std::uint32_t>(k);
    step.sends.push_back(Transfer{modulo(rank + bit, size), round, sendPack, packed});
    step.recvs.push_back(Transfer{modulo(rank - bit, size), round, recvPack, packed});
    s.add(std::move(step));
  }
  Step finalUnpack;
  finalUnpack.copies = std::move(unpack);
  s.add(std::move(finalUnpack));
  return s;
}

}  // namespace commux::collectives
