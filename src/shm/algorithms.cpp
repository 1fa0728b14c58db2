// The channel's collectives, each a sequence of steps over the slots (see algorithms.hpp).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <system_error>
#include <utility>

#include "collectives/schedule.hpp"
#include "core/error.hpp"
#include "core/fold.hpp"
#include "engine/op.hpp"
#include "shm/algorithms.hpp"
#include "shm/steps_layout.hpp"

namespace commux::shm {
namespace {

/// acc = acc (op) in over `count` elements of `like`'s type.
void foldInto(char* acc, const char* in, std::size_t count, const core::Buffer& like,
              core::ReduceOp op) {
  core::fold(acc, acc, in, count, like, op);
}

/// An all_to_all slot's header (first step): the rank's send counts, then its receive counts.
const std::uint64_t* alltoallCounts(const char* slot) {
  return reinterpret_cast<const std::uint64_t*>(slot);
}

/// Size of an all_to_all slot's header: the rank's send and then receive counts.
std::size_t alltoallHeader(int size) {
  return layout::roundUp(2 * static_cast<std::size_t>(size) * sizeof(std::uint64_t), layout::kLine);
}

/// A slot that holds one piece per rank other than its owner: where rank `to`'s piece is
/// in rank `owner`'s slot, and how many pieces there are.
std::size_t otherIndex(int owner, int to) {
  return static_cast<std::size_t>(to < owner ? to : to - 1);
}
std::size_t othersOf(int size) { return static_cast<std::size_t>(std::max(size - 1, 1)); }

// The rank that `me` reads from k-th: each starts after itself, so the readers of one step
// are spread over the senders rather than all at the first. A read pins the sender's pages
// under its page-table locks, which readers in one order contended for (the 2026-12-07
// profile of a 4-rank all_to_all); rotated, that all_to_all (256 KiB) took 0.93x the time.
std::size_t rotated(std::size_t me, std::size_t k, std::size_t p) { return (me + k) % p; }

/// Arrives at step `s` of a collective whose root fills the slots and goes on, while the
/// others wait for the root alone (broadcast, scatter).
void arriveFromRoot(Steps& steps, const Turn& turn, std::uint32_t s, bool first,
                    std::uint32_t count) {
  if (steps.rank() == turn.job.root) {
    steps.lead(s, turn, first, count);
  } else {
    steps.follow(s, turn, turn.job.root, first, count);
  }
}

/// Steps of `total` bytes moved `per` bytes a step (an empty collective takes one).
std::uint32_t stepsFor(std::size_t total, std::size_t per) {
  return static_cast<std::uint32_t>(std::max<std::size_t>(1, (total + per - 1) / per));
}

void allreduceSmall(Steps& steps, const Turn& turn) {
  const Job& job = turn.job;
  const core::Buffer& work = job.buffer;
  const std::size_t count = work.count;
  const bool keeps = job.kind == Kind::Allreduce || steps.rank() == job.root;
  const std::uint32_t s = steps.beginStep(turn, work.bytes() <= steps.smallSlotBytes());
  if (count != 0) std::memcpy(steps.slot(s, steps.rank()), work.data, work.bytes());
  if (!keeps) {
    // A reduce's other ranks leave their data and go: only the root reads.
    steps.lead(s, turn, true, 1);
    steps.mark(Phase::Departed, s);
    return;
  }
  steps.meet(s, turn, true);
  if (count != 0 && keeps) {
    // Every rank folds in rank order: the results agree bit for bit.
    std::memcpy(work.data, steps.slot(s, 0), work.bytes());
    for (int q = 1; q < steps.shape().size; ++q)
      foldInto(work.bytePointer(), steps.slot(s, q), count, work, job.reduce);
  }
  steps.mark(Phase::Departed, s);
}

// The bytes of its slot a rank fills per step of a collective that copies through the slots.
std::size_t copyArea(const Steps& steps) {
  const ChannelShape& shape = steps.shape();
  return shape.copyStepBytes != 0 ? std::min(shape.copyStepBytes, shape.slotBytes)
                                  : shape.slotBytes;
}

// Each rank folds one block of every chunk (a reduce-scatter through the slots), then
// every rank that keeps the result copies the others' blocks (an allgather). A rank stages
// only the blocks the others fold, and folds its own in its buffer, not in a slot: a fold's
// plain stores into shared lines that another core read in the last step wait for that
// core to let go of them, which on this project's VM has stretches of seconds where it
// costs several times more (shm/slot_copy.hpp); the rank's result then goes into its slot
// through copyToSlot, which streams in those stretches. A block's fold starts from its
// folder's part, then takes the others in rank order: every rank gets the same bits (one
// rank folds each block), though from 3 ranks on not those of a fold in rank order.
void allreduceChunked(Steps& steps, const Turn& turn) {
  const Job& job = turn.job;
  const core::Buffer& work = job.buffer;
  const std::size_t count = work.count;
  const std::size_t elementSize = work.elementSize;
  const std::size_t chunk = steps.shape().slotBytes / elementSize;
  const int size = steps.shape().size;
  const int rank = steps.rank();
  // A reduce's other ranks leave their buffers as they were: they fold into their slots.
  const bool keeps = job.kind == Kind::Allreduce || rank == job.root;
  char* const base = work.bytePointer();
  for (std::size_t offset = 0; offset < count; offset += chunk) {
    const std::size_t len = std::min(chunk, count - offset);
    char* const data = base + offset * elementSize;
    // Where each rank's block lies, in bytes from the chunk's start, and how long it is.
    const auto block = [&](int q) {
      const auto range = collectives::blockRange(len, size, q);
      return std::make_pair(range.offset * elementSize, range.count * elementSize);
    };
    const std::uint32_t s = steps.beginStep(turn);
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      const auto [at, n] = block(q);
      steps.copyToSlot(steps.slot(s, rank) + at, data + at, n);
    }
    steps.meet(s, turn, offset == 0);
    const auto [at, mineBytes] = block(rank);
    if (mineBytes != 0) {
      const std::size_t n = mineBytes / elementSize;
      char* const own = data + at;
      char* const acc = keeps ? own : steps.slot(s, rank) + at;
      const char* sofar = own;
      for (int q = 0; q < size; ++q) {
        if (q == rank) continue;
        core::fold(acc, sofar, steps.slot(s, q) + at, n, work, job.reduce);
        sofar = acc;
      }
      if (keeps) steps.copyToSlot(steps.slot(s, rank) + at, data + at, mineBytes);
    }
    steps.mark(Phase::Reduced, s);
    steps.waitAll(Phase::Reduced, s, turn);
    if (keeps) {
      for (int q = 0; q < size; ++q) {
        if (q == rank) continue;
        const auto [from, n] = block(q);
        std::memcpy(data + from, steps.slot(s, q) + from, n);
      }
    }
    steps.mark(Phase::Departed, s);
  }
}

void broadcast(Steps& steps, const Turn& turn) {
  const Job& job = turn.job;
  const std::size_t total = job.buffer.bytes();
  const bool root = steps.rank() == job.root;
  char* const base = total ? job.buffer.bytePointer() : nullptr;
  if (steps.cmaFor(CmaUse::Broadcast, total)) {
    const std::uint32_t s = steps.beginStep(turn);
    if (root) steps.publish(s, base);
    arriveFromRoot(steps, turn, s, true, 1);
    if (!root) steps.readFrom(s, job.root, 0, base, total, turn);
    steps.mark(Phase::Departed, s);
    // The root's buffer is the caller's again once every reader is done with it.
    if (root) steps.waitAll(Phase::Departed, s, turn);
    return;
  }
  // The root fills every slot of the step: one step moves size x slot bytes.
  const auto size = static_cast<std::size_t>(steps.shape().size);
  const bool small = steps.smallSlotBytes() != 0 && total <= steps.smallSlotBytes() * size;
  const std::size_t area = (small ? steps.smallSlotBytes() : steps.shape().slotBytes) * size;
  const std::uint32_t count = stepsFor(total, area);
  std::size_t offset = 0;
  do {
    const std::size_t len = std::min(area, total - offset);
    const std::uint32_t s = steps.beginStep(turn, small);
    if (root && len) steps.copyToSlot(steps.slot(s, 0), base + offset, len);
    arriveFromRoot(steps, turn, s, offset == 0, count);
    if (!root && len) std::memcpy(base + offset, steps.slot(s, 0), len);
    steps.mark(Phase::Departed, s);
    offset += len;
  } while (offset < total);
}

void allgather(Steps& steps, const Turn& turn) {
  const Job& job = turn.job;
  const std::size_t block = job.input.bytes();
  const bool reads = job.kind == Kind::Allgather || steps.rank() == job.root;
  const char* const in = block ? job.input.bytePointer() : nullptr;
  char* const out = reads && block ? job.output.bytePointer() : nullptr;
  // A gather's other ranks leave their part and go on (with single copy, once the root
  // read it); an allgather's every rank reads every slot.
  const auto arrive = [&](std::uint32_t s, bool first, std::uint32_t count) {
    if (reads) {
      steps.meet(s, turn, first);
    } else {
      steps.lead(s, turn, first, count);
    }
  };
  if (steps.cmaFor(job.kind == Kind::Allgather ? CmaUse::Allgather : CmaUse::Rooted, block)) {
    const std::uint32_t s = steps.beginStep(turn);
    steps.publish(s, in);
    arrive(s, true, 1);
    if (out) {
      const int size = steps.shape().size;
      for (int k = 0; k < size; ++k) {  // this rank's own block first
        const int q = static_cast<int>(rotated(steps.rank(), k, size));
        char* to = out + static_cast<std::size_t>(q) * block;
        // In place (the input is this rank's block of the output): nothing to copy.
        if (q != steps.rank() || to != in) steps.readFrom(s, q, 0, to, block, turn);
      }
    }
    steps.mark(Phase::Departed, s);
    steps.waitAll(Phase::Departed, s, turn);  // every reader is done with this rank's input
    return;
  }
  const bool small = block <= steps.smallSlotBytes();
  const std::size_t area = copyArea(steps);
  const std::uint32_t count = stepsFor(block, area);
  // A gather's root reads its own block from its input: nobody reads its slot.
  const bool filled = job.kind == Kind::Allgather || steps.rank() != job.root;
  std::size_t offset = 0;
  do {
    const std::size_t len = std::min(area, block - offset);
    const std::uint32_t s = steps.beginStep(turn, small);
    if (len && filled) steps.copyToSlot(steps.slot(s, steps.rank()), in + offset, len);
    arrive(s, offset == 0, count);
    if (out) {
      for (int q = 0; q < steps.shape().size; ++q) {
        char* to = out + static_cast<std::size_t>(q) * block + offset;
        // This rank's own block comes from its input, still in its cache: its slot copy may
        // have been streamed past the cache (shm/slot_copy.hpp). In place: nothing to copy.
        const char* from = q == steps.rank() ? in + offset : steps.slot(s, q);
        if (len && to != from) std::memcpy(to, from, len);
      }
    }
    steps.mark(Phase::Departed, s);
    offset += len;
  } while (offset < block);
}

void scatter(Steps& steps, const Turn& turn) {
  const Job& job = turn.job;
  const std::size_t block = job.output.bytes();
  const bool root = steps.rank() == job.root;
  const char* const in = root && block ? job.input.bytePointer() : nullptr;
  char* const out = block ? job.output.bytePointer() : nullptr;
  if (steps.cmaFor(CmaUse::Rooted, block)) {
    const std::uint32_t s = steps.beginStep(turn);
    if (root) steps.publish(s, in);
    arriveFromRoot(steps, turn, s, true, 1);
    steps.readFrom(s, job.root, static_cast<std::size_t>(steps.rank()) * block, out, block, turn);
    steps.mark(Phase::Departed, s);
    if (root) steps.waitAll(Phase::Departed, s, turn);
    return;
  }
  const bool small = block <= steps.smallSlotBytes();
  const std::size_t area = copyArea(steps);
  const std::uint32_t count = stepsFor(block, area);
  std::size_t offset = 0;
  do {
    const std::size_t len = std::min(area, block - offset);
    const std::uint32_t s = steps.beginStep(turn, small);
    const char* mine = in ? in + static_cast<std::size_t>(steps.rank()) * block + offset : nullptr;
    if (in) {
      for (int q = 0; q < steps.shape().size; ++q) {
        // The root's own block goes straight from its input (below), not through a slot.
        if (q == steps.rank()) continue;
        steps.copyToSlot(steps.slot(s, q), in + static_cast<std::size_t>(q) * block + offset, len);
      }
    }
    arriveFromRoot(steps, turn, s, offset == 0, count);
    const char* from = mine ? mine : steps.slot(s, steps.rank());
    if (len && out + offset != from) std::memcpy(out + offset, from, len);
    steps.mark(Phase::Departed, s);
    offset += len;
  } while (offset < block);
}

void reduceScatter(Steps& steps, const Turn& turn) {
  const Job& job = turn.job;
  const int size = steps.shape().size;
  const int rank = steps.rank();
  const std::size_t n = job.output.count;
  const std::size_t es = job.output.elementSize;
  // Each slot holds one piece per other rank (a rank folds its own contribution straight
  // from its input); a step moves `piece` elements of each.
  const bool small = n != 0 && n * es * othersOf(size) <= steps.smallSlotBytes();
  const std::size_t piece =
      (small ? steps.smallSlotBytes() : copyArea(steps)) / othersOf(size) / es;
  COMMUX_CHECK(piece > 0, Runtime, "commux: ", turn.op.description(), ": ", size,
               " ranks do not fit the shared-memory slots (COMMUX_SHM_SLOT_BYTES ",
               steps.shape().slotBytes, ")");
  const char* const in = n ? job.input.bytePointer() : nullptr;
  char* const out = n ? job.output.bytePointer() : nullptr;
  // An output inside the input (FSDP passes its own shard of the input) is written before
  // this rank's contribution is read: keep that piece aside first.
  const bool aliased = n && out < in + job.input.bytes() && in < out + job.output.bytes();
  std::vector<char> own(aliased ? piece * es : 0);
  std::size_t offset = 0;
  do {
    const std::size_t len = std::min(piece, n - offset);
    const std::size_t lenBytes = len * es;
    const std::uint32_t s = steps.beginStep(turn, small);
    if (aliased) std::memcpy(own.data(), in + (rank * n + offset) * es, lenBytes);
    for (int q = 0; q < size && len; ++q) {
      if (q == rank) continue;
      steps.copyToSlot(steps.slot(s, rank) + otherIndex(rank, q) * lenBytes,
                       in + (q * n + offset) * es, lenBytes);
    }
    steps.meet(s, turn, offset == 0);
    if (len) {
      // Folded in rank order, whoever folds.
      const auto from = [&](int q) {
        if (q != rank) return steps.slot(s, q) + otherIndex(q, rank) * lenBytes;
        return aliased ? own.data() : const_cast<char*>(in) + (rank * n + offset) * es;
      };
      std::memcpy(out + offset * es, from(0), lenBytes);
      for (int q = 1; q < size; ++q) {
        foldInto(out + offset * es, from(q), len, job.output, job.reduce);
      }
    }
    steps.mark(Phase::Departed, s);
    offset += len;
  } while (offset < n);
}

void checkAlltoallCounts(Steps& steps, std::uint32_t s, const Turn& turn) {
  const auto counts = [&](int rank) { return alltoallCounts(steps.slot(s, rank)); };
  const std::size_t p = static_cast<std::size_t>(steps.shape().size);
  std::string problems;
  int shown = 0;
  for (int from = 0; from < steps.shape().size; ++from) {
    for (int to = 0; to < steps.shape().size; ++to) {
      const std::uint64_t sends = counts(from)[to];
      const std::uint64_t expects = counts(to)[p + static_cast<std::size_t>(from)];
      if (sends == expects) continue;
      if (shown++ < 4) {
        problems += (problems.empty() ? "" : "; ") + std::string("rank ") + std::to_string(from) +
                    " sends " + std::to_string(sends) + " elements to rank " + std::to_string(to) +
                    ", which expects " + std::to_string(expects);
      }
    }
  }
  if (problems.empty()) return;
  if (shown > 4) problems += "; and " + std::to_string(shown - 4) + " more";
  // Every rank reads the same counts and fails here alike.
  steps.mark(Phase::Departed, s);
  COMMUX_FAIL(InvalidArgument, "commux: " + turn.op.description() +
                                   ": the ranks' split sizes do not match (" + problems +
                                   "); what a rank sends to another must be what that one expects "
                                   "from it");
}

void alltoall(Steps& steps, const Turn& turn) {
  const Job& job = turn.job;
  const int rank = steps.rank();
  const std::size_t p = static_cast<std::size_t>(steps.shape().size);
  // A job with no buffer at all (never built so) still divides by a size.
  const std::size_t es = std::max<std::size_t>(1, job.typed().elementSize);
  const std::size_t header = alltoallHeader(steps.shape().size);
  // A slot holds one piece per other rank: the block a rank keeps for itself is copied
  // straight from its input to its output, never through the slots.
  const std::size_t others = othersOf(steps.shape().size);
  const std::size_t area = copyArea(steps);
  const std::size_t piece = area > header ? (area - header) / others / es : 0;
  COMMUX_CHECK(piece > 0, Runtime, "commux: ", turn.op.description(), ": ", steps.shape().size,
               " ranks do not fit the shared-memory slots (COMMUX_SHM_SLOT_BYTES ",
               steps.shape().slotBytes, ")");
  // Where rank `from`'s slot holds its piece for rank `to`.
  const auto pieceAt = [&](std::size_t from, std::size_t to) {
    return header + otherIndex(static_cast<int>(from), static_cast<int>(to)) * piece * es;
  };
  std::vector<std::size_t> sendAt(p), recvAt(p);
  std::exclusive_scan(job.sendCounts.begin(), job.sendCounts.end(), sendAt.begin(), std::size_t{0});
  std::exclusive_scan(job.recvCounts.begin(), job.recvCounts.end(), recvAt.begin(), std::size_t{0});
  const char* const in = job.input.count ? job.input.bytePointer() : nullptr;
  char* const out = job.output.count ? job.output.bytePointer() : nullptr;
  const std::size_t me = static_cast<std::size_t>(rank);
  // The caller checked that this rank sends itself what it expects from itself, before any
  // path was chosen; the input and the output never overlap here (c10d/alltoall_api.cpp
  // stages one that would).
  COMMUX_ASSERT(job.sendCounts[me] == job.recvCounts[me] &&
                recvAt[p - 1] + job.recvCounts[p - 1] <= job.output.count);
  if (job.sendCounts[me] != 0) {
    std::memcpy(out + recvAt[me] * es, in + sendAt[me] * es, job.sendCounts[me] * es);
  }
  // A piece of at least the single-copy size (CmaUse::Alltoall) is read by its receiver
  // straight from the sender's input (one copy); the others go through the slots. Sender
  // and receiver decide alike from the pair's count, the same on both (checked at the
  // first step, before anything is read).
  const auto direct = [&](std::uint64_t count) {
    return count != 0 && steps.cmaFor(CmaUse::Alltoall, count * es);
  };
  std::size_t stepCount = 1;
  bool anyDirect = false;
  std::uint32_t last = 0;
  for (std::size_t i = 0; i < stepCount; ++i) {
    const std::uint32_t s = steps.beginStep(turn);
    last = s;
    char* const mine = steps.slot(s, rank);
    if (i == 0) {
      auto* counts = reinterpret_cast<std::uint64_t*>(mine);
      for (std::size_t q = 0; q < p; ++q) {
        counts[q] = job.sendCounts[q];
        counts[p + q] = job.recvCounts[q];
      }
      steps.publish(s, in);
    }
    const std::size_t lo = i * piece;
    for (std::size_t q = 0; q < p; ++q) {
      if (q == me || direct(job.sendCounts[q]) || lo >= job.sendCounts[q]) continue;
      const std::size_t len = std::min(piece, job.sendCounts[q] - lo);
      steps.copyToSlot(mine + pieceAt(me, q), in + (sendAt[q] + lo) * es, len * es);
    }
    steps.meet(s, turn, i == 0);
    if (i == 0) {
      checkAlltoallCounts(steps, s, turn);
      // Every rank derives the same number of steps from the same counts: the largest
      // piece between two different ranks that goes through the slots.
      std::uint64_t largest = 0;
      for (std::size_t r = 0; r < p; ++r) {
        const auto* counts = alltoallCounts(steps.slot(s, static_cast<int>(r)));
        for (std::size_t q = 0; q < p; ++q) {
          if (q == r) continue;
          if (direct(counts[q])) {
            anyDirect = true;
          } else {
            largest = std::max(largest, counts[q]);
          }
        }
      }
      stepCount = std::max<std::size_t>(1, (largest + piece - 1) / piece);
      for (std::size_t k = 1; k < p; ++k) {
        const std::size_t from = rotated(me, k, p);
        const std::size_t n = job.recvCounts[from];
        if (!direct(n)) continue;
        // The sender's piece for this rank starts after its pieces for the ranks before.
        const auto* theirs = alltoallCounts(steps.slot(s, static_cast<int>(from)));
        const std::size_t at = std::accumulate(theirs, theirs + rank, std::uint64_t{0});
        steps.readFrom(s, static_cast<int>(from), at * es, out + recvAt[from] * es, n * es, turn);
      }
    }
    for (std::size_t from = 0; from < p; ++from) {
      if (from == me || direct(job.recvCounts[from]) || lo >= job.recvCounts[from]) continue;
      const std::size_t len = std::min(piece, job.recvCounts[from] - lo);
      std::memcpy(out + (recvAt[from] + lo) * es,
                  steps.slot(s, static_cast<int>(from)) + pieceAt(from, me), len * es);
    }
    steps.mark(Phase::Departed, s);
  }
  // Every reader read in the first step and left the last after it: once all have, this
  // rank's input is the caller's again.
  if (anyDirect) steps.waitAll(Phase::Departed, last, turn);
}

}  // namespace

void runCollective(Steps& steps, const Turn& turn) {
  if (steps.broken()) {
    COMMUX_FAIL(Backend, "commux: " + turn.op.description() + ": " + steps.brokenReason());
  }
  if (std::string left = steps.leftBeforeReason(turn); !left.empty()) {
    COMMUX_FAIL(Backend, "commux: " + turn.op.description() + ": " + left);
  }
  const Job& job = turn.job;
  if (job.kind != Kind::Hold) steps.beginCollective();
  switch (job.kind) {
    case Kind::Allreduce:
    case Kind::Reduce:
      if (job.buffer.bytes() <= steps.shape().smallBytes) {
        allreduceSmall(steps, turn);
      } else {
        allreduceChunked(steps, turn);
      }
      return;
    case Kind::Broadcast:
      broadcast(steps, turn);
      return;
    case Kind::Allgather:
    case Kind::Gather:
      allgather(steps, turn);
      return;
    case Kind::Scatter:
      scatter(steps, turn);
      return;
    case Kind::ReduceScatter:
      reduceScatter(steps, turn);
      return;
    case Kind::Alltoall:
      alltoall(steps, turn);
      return;
    case Kind::Barrier: {
      const std::uint32_t s = steps.beginStep(turn, true);
      steps.meet(s, turn, true);
      steps.mark(Phase::Departed, s);
      return;
    }
    case Kind::Hold:
      return;  // no steps (the channel only waits for its gate)
  }
}

}  // namespace commux::shm
