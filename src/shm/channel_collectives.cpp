// The channel's collectives, each a sequence of steps over the slots (see channel.hpp).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <system_error>

#include "collectives/schedule.hpp"
#include "engine/reduce_kernels.hpp"
#include "shm/channel.hpp"
#include "shm/channel_layout.hpp"
#include "shm/cma.hpp"
#include "shm/collective_op.hpp"

namespace commux::shm {
namespace {

at::Tensor view(char* data, std::size_t count, const at::Tensor& like) {
  return at::from_blob(data, {static_cast<int64_t>(count)}, like.options());
}

char* bytes(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

/// acc = acc (op) in over `count` elements shaped like `like`: a plain loop when that is
/// cheaper than tensor views (small counts), else ATen.
void foldInto(char* acc, char* in, std::size_t count, const at::Tensor& like,
              engine::ReduceKind kind) {
  if (engine::reduceRaw(acc, in, count, like.scalar_type(), kind)) return;
  engine::reduceInto(view(acc, count, like), view(in, count, like), kind);
}

/// An all_to_all slot's header (first step): the rank's send counts, then its receive counts.
const std::uint64_t* alltoallCounts(const char* slot) {
  return reinterpret_cast<const std::uint64_t*>(slot);
}

/// Size of an all_to_all slot's header: the rank's send and then receive counts.
std::size_t alltoallHeader(int size) {
  return layout::roundUp(2 * static_cast<std::size_t>(size) * sizeof(std::uint64_t), layout::kLine);
}

}  // namespace

void Channel::run(CollectiveOp& op) {
  if (broken()) {
    C10_THROW_ERROR(DistBackendError, "commux: " + op.description() + ": " + brokenReason());
  }
  const Job& job = op.job();
  if (job.hierarchy) {
    runHierarchical(op);
    return;
  }
  switch (job.kind) {
    case Kind::Allreduce:
    case Kind::Reduce: {
      const std::size_t n = static_cast<std::size_t>(job.buffer.nbytes());
      if (n <= shape_.smallBytes) {
        allreduceSmall(op);
      } else {
        allreduceChunked(op);
      }
      return;
    }
    case Kind::Broadcast: broadcast(op); return;
    case Kind::Allgather:
    case Kind::Gather: allgather(op); return;
    case Kind::Scatter: scatter(op); return;
    case Kind::ReduceScatter: reduceScatter(op); return;
    case Kind::Alltoall: alltoall(op); return;
    case Kind::Barrier: {
      const std::uint32_t s = beginStep(op);
      meet(s, op, true);
      mark(&Control::departed, s);
      return;
    }
  }
}

std::uint32_t Channel::beginStep(CollectiveOp& op) {
  const std::uint32_t s = ++step_;
  waitAll(&Control::departed, s - 2, op);
  return s;
}

void Channel::meet(std::uint32_t s, CollectiveOp& op, bool first) {
  arrive(s, op);
  waitAll(&Control::arrived, s, op);
  if (first) checkAgreement(s, op);
}

void Channel::publish(std::uint32_t s, const void* buffer) {
  controls_[rank_].address[s & 1u] = reinterpret_cast<std::uintptr_t>(buffer);
}

void Channel::readFrom(std::uint32_t s, int rank, std::size_t offset, void* to, std::size_t bytes,
                       CollectiveOp& op) {
  if (bytes == 0) return;
  const Control& owner = controls_[rank];
  const char* from = reinterpret_cast<const char*>(owner.address[s & 1u]) + offset;
  if (rank == rank_) {
    std::memmove(to, from, bytes);
    return;
  }
  if (cmaRead(owner.pid, from, to, bytes)) return;
  const std::string why = std::generic_category().message(errno);
  // Leave the step so nobody waits for this rank, and stop the group's collectives: this
  // rank's result is missing, the others' are not.
  mark(&Control::departed, s);
  abandon();
  C10_THROW_ERROR(DistBackendError, "commux: " + op.description() + ": reading " +
                                        std::to_string(bytes) + " bytes from rank " +
                                        std::to_string(groupRank(rank)) + " (process_vm_readv) failed: " +
                                        why + "; set COMMUX_SHM_CMA_BYTES=0 to copy through "
                                        "the shared segment instead");
}

void Channel::allreduceSmall(CollectiveOp& op) {
  const Job& job = op.job();
  const at::Tensor& work = job.buffer;
  const std::size_t count = static_cast<std::size_t>(work.numel());
  const bool keeps = job.kind == Kind::Allreduce || rank_ == job.root;
  const std::uint32_t s = beginStep(op);
  if (count != 0) std::memcpy(slot(s, rank_), work.data_ptr(), work.nbytes());
  meet(s, op, true);
  if (count != 0 && keeps) {
    // Every rank folds in rank order: the results agree bit for bit.
    std::memcpy(work.data_ptr(), slot(s, 0), work.nbytes());
    for (int q = 1; q < shape_.size; ++q) foldInto(bytes(work), slot(s, q), count, work, job.reduce);
  }
  mark(&Control::departed, s);
}

void Channel::allreduceChunked(CollectiveOp& op) {
  const Job& job = op.job();
  const at::Tensor& work = job.buffer;
  const std::size_t count = static_cast<std::size_t>(work.numel());
  const std::size_t elementSize = work.element_size();
  const std::size_t chunk = shape_.slotBytes / elementSize;
  const bool keeps = job.kind == Kind::Allreduce || rank_ == job.root;
  char* const base = bytes(work);
  for (std::size_t offset = 0; offset < count; offset += chunk) {
    const std::size_t len = std::min(chunk, count - offset);
    const std::uint32_t s = beginStep(op);
    std::memcpy(slot(s, rank_), base + offset * elementSize, len * elementSize);
    meet(s, op, offset == 0);
    const auto block = collectives::blockRange(len, shape_.size, rank_);
    if (block.count != 0) {
      const std::size_t at = block.offset * elementSize;
      for (int q = 1; q < shape_.size; ++q) {
        foldInto(slot(s, 0) + at, slot(s, q) + at, block.count, work, job.reduce);
      }
    }
    mark(&Control::reduced, s);
    waitAll(&Control::reduced, s, op);
    if (keeps) std::memcpy(base + offset * elementSize, slot(s, 0), len * elementSize);
    mark(&Control::departed, s);
  }
}

void Channel::broadcast(CollectiveOp& op) {
  const Job& job = op.job();
  const std::size_t total = job.buffer.nbytes();
  // The root fills every slot of the parity: one step moves size x slot bytes.
  const std::size_t area = shape_.slotBytes * static_cast<std::size_t>(shape_.size);
  const bool root = rank_ == job.root;
  char* const base = total ? bytes(job.buffer) : nullptr;
  if (cmaFor(total)) {
    const std::uint32_t s = beginStep(op);
    if (root) publish(s, base);
    meet(s, op, true);
    if (!root) readFrom(s, job.root, 0, base, total, op);
    mark(&Control::departed, s);
    // The root's buffer is the caller's again once every reader is done with it.
    if (root) waitAll(&Control::departed, s, op);
    return;
  }
  std::size_t offset = 0;
  do {
    const std::size_t len = std::min(area, total - offset);
    const std::uint32_t s = beginStep(op);
    if (root && len) std::memcpy(slot(s, 0), base + offset, len);
    meet(s, op, offset == 0);
    if (!root && len) std::memcpy(base + offset, slot(s, 0), len);
    mark(&Control::departed, s);
    offset += len;
  } while (offset < total);
}

void Channel::allgather(CollectiveOp& op) {
  const Job& job = op.job();
  const std::size_t block = job.input.nbytes();
  const bool reads = job.kind == Kind::Allgather || rank_ == job.root;
  const char* const in = block ? bytes(job.input) : nullptr;
  char* const out = reads && block ? bytes(job.output) : nullptr;
  if (cmaFor(block)) {
    const std::uint32_t s = beginStep(op);
    publish(s, in);
    meet(s, op, true);
    if (out) {
      for (int q = 0; q < shape_.size; ++q) {
        char* to = out + static_cast<std::size_t>(q) * block;
        // In place (the input is this rank's block of the output): nothing to copy.
        if (q != rank_ || to != in) readFrom(s, q, 0, to, block, op);
      }
    }
    mark(&Control::departed, s);
    waitAll(&Control::departed, s, op);  // every reader is done with this rank's input
    return;
  }
  std::size_t offset = 0;
  do {
    const std::size_t len = std::min(shape_.slotBytes, block - offset);
    const std::uint32_t s = beginStep(op);
    if (len) std::memcpy(slot(s, rank_), in + offset, len);
    meet(s, op, offset == 0);
    if (out) {
      for (int q = 0; q < shape_.size; ++q) {
        std::memcpy(out + static_cast<std::size_t>(q) * block + offset, slot(s, q), len);
      }
    }
    mark(&Control::departed, s);
    offset += len;
  } while (offset < block);
}

void Channel::scatter(CollectiveOp& op) {
  const Job& job = op.job();
  const std::size_t block = job.output.nbytes();
  const bool root = rank_ == job.root;
  const char* const in = root && block ? bytes(job.input) : nullptr;
  char* const out = block ? bytes(job.output) : nullptr;
  if (cmaFor(block)) {
    const std::uint32_t s = beginStep(op);
    if (root) publish(s, in);
    meet(s, op, true);
    readFrom(s, job.root, static_cast<std::size_t>(rank_) * block, out, block, op);
    mark(&Control::departed, s);
    if (root) waitAll(&Control::departed, s, op);
    return;
  }
  std::size_t offset = 0;
  do {
    const std::size_t len = std::min(shape_.slotBytes, block - offset);
    const std::uint32_t s = beginStep(op);
    if (in) {
      for (int q = 0; q < shape_.size; ++q) {
        std::memcpy(slot(s, q), in + static_cast<std::size_t>(q) * block + offset, len);
      }
    }
    meet(s, op, offset == 0);
    if (len) std::memcpy(out + offset, slot(s, rank_), len);
    mark(&Control::departed, s);
    offset += len;
  } while (offset < block);
}

void Channel::reduceScatter(CollectiveOp& op) {
  const Job& job = op.job();
  const std::size_t n = static_cast<std::size_t>(job.output.numel());
  const std::size_t es = job.output.element_size();
  // Each slot holds one piece per destination; a step moves `piece` elements of each.
  const std::size_t piece = shape_.slotBytes / static_cast<std::size_t>(shape_.size) / es;
  TORCH_CHECK(piece > 0, "commux: ", op.description(), ": ", shape_.size,
              " ranks do not fit the shared-memory slots (COMMUX_SHM_SLOT_BYTES ",
              shape_.slotBytes, ")");
  const char* const in = n ? bytes(job.input) : nullptr;
  char* const out = n ? bytes(job.output) : nullptr;
  std::size_t offset = 0;
  do {
    const std::size_t len = std::min(piece, n - offset);
    const std::size_t lenBytes = len * es;
    const std::uint32_t s = beginStep(op);
    for (int q = 0; q < shape_.size && len; ++q) {
      std::memcpy(slot(s, rank_) + q * lenBytes, in + (q * n + offset) * es, lenBytes);
    }
    meet(s, op, offset == 0);
    if (len) {
      // Folded in rank order, whoever folds.
      std::memcpy(out + offset * es, slot(s, 0) + rank_ * lenBytes, lenBytes);
      for (int p = 1; p < shape_.size; ++p) {
        foldInto(out + offset * es, slot(s, p) + rank_ * lenBytes, len, job.output, job.reduce);
      }
    }
    mark(&Control::departed, s);
    offset += len;
  } while (offset < n);
}

void Channel::checkAlltoallCounts(std::uint32_t s, CollectiveOp& op) {
  const auto counts = [&](int rank) { return alltoallCounts(slot(s, rank)); };
  const std::size_t p = static_cast<std::size_t>(shape_.size);
  std::string problems;
  int shown = 0;
  for (int from = 0; from < shape_.size; ++from) {
    for (int to = 0; to < shape_.size; ++to) {
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
  mark(&Control::departed, s);
  C10_THROW_ERROR(ValueError, "commux: " + op.description() +
                                  ": the ranks' split sizes do not match (" + problems +
                                  "); what a rank sends to another must be what that one expects "
                                  "from it");
}

void Channel::alltoall(CollectiveOp& op) {
  const Job& job = op.job();
  const std::size_t p = static_cast<std::size_t>(shape_.size);
  const std::size_t es = c10::elementSize(job.dtype());
  const std::size_t header = alltoallHeader(shape_.size);
  const std::size_t piece =
      shape_.slotBytes > header ? (shape_.slotBytes - header) / p / es : 0;
  TORCH_CHECK(piece > 0, "commux: ", op.description(), ": ", shape_.size,
              " ranks do not fit the shared-memory slots (COMMUX_SHM_SLOT_BYTES ",
              shape_.slotBytes, ")");
  std::vector<std::size_t> sendAt(p), recvAt(p);
  std::exclusive_scan(job.sendCounts.begin(), job.sendCounts.end(), sendAt.begin(), std::size_t{0});
  std::exclusive_scan(job.recvCounts.begin(), job.recvCounts.end(), recvAt.begin(), std::size_t{0});
  const char* const in = job.input.numel() ? bytes(job.input) : nullptr;
  char* const out = job.output.numel() ? bytes(job.output) : nullptr;
  std::size_t steps = 1;
  for (std::size_t i = 0; i < steps; ++i) {
    const std::uint32_t s = beginStep(op);
    char* const mine = slot(s, rank_);
    if (i == 0) {
      auto* counts = reinterpret_cast<std::uint64_t*>(mine);
      for (std::size_t q = 0; q < p; ++q) {
        counts[q] = job.sendCounts[q];
        counts[p + q] = job.recvCounts[q];
      }
      publish(s, in);
    }
    const std::size_t lo = i * piece;
    for (std::size_t q = 0; q < p; ++q) {
      if (lo >= job.sendCounts[q]) continue;
      const std::size_t len = std::min(piece, job.sendCounts[q] - lo);
      std::memcpy(mine + header + q * piece * es, in + (sendAt[q] + lo) * es, len * es);
    }
    meet(s, op, i == 0);
    if (i == 0) {
      checkAlltoallCounts(s, op);
      // Every rank derives the same number of steps from the same counts.
      std::uint64_t largest = 0;
      for (int r = 0; r < shape_.size; ++r) {
        const auto* counts = alltoallCounts(slot(s, r));
        largest = std::max(largest, *std::max_element(counts, counts + p));
      }
      steps = std::max<std::size_t>(1, (largest + piece - 1) / piece);
      if (steps > 1 && cmaFor(largest * es)) {
        // This step carried each piece's first part; the rest comes straight from the
        // senders' inputs, where each sender's piece for this rank starts after its pieces
        // for the ranks before.
        for (std::size_t from = 0; from < p; ++from) {
          const std::size_t n = job.recvCounts[from];
          if (n == 0) continue;
          const std::size_t first = std::min(piece, n);
          std::memcpy(out + recvAt[from] * es,
                      slot(s, static_cast<int>(from)) + header + rank_ * piece * es, first * es);
          if (n == first) continue;
          const auto* theirs = alltoallCounts(slot(s, static_cast<int>(from)));
          const std::size_t at = std::accumulate(theirs, theirs + rank_, std::uint64_t{0});
          readFrom(s, static_cast<int>(from), (at + first) * es, out + (recvAt[from] + first) * es,
                   (n - first) * es, op);
        }
        mark(&Control::departed, s);
        waitAll(&Control::departed, s, op);  // every reader is done with this rank's input
        return;
      }
    }
    for (std::size_t from = 0; from < p; ++from) {
      if (lo >= job.recvCounts[from]) continue;
      const std::size_t len = std::min(piece, job.recvCounts[from] - lo);
      std::memcpy(out + (recvAt[from] + lo) * es,
                  slot(s, static_cast<int>(from)) + header + rank_ * piece * es, len * es);
    }
    mark(&Control::departed, s);
  }
}

}  // namespace commux::shm
