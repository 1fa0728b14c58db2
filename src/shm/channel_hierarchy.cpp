// A collective of a group that spans hosts, as this host's channel runs it: shared-memory
// parts among this host's ranks around the part between hosts (HostParts::cross), the way
// MPI's HAN and UCC's hierarchical teams split them. The rank that crosses is the channel's
// first (the host's leader) except where HostParts says otherwise.
#include <ATen/ATen.h>

#include "shm/channel.hpp"
#include "shm/collective_op.hpp"

namespace commux::shm {

void Channel::runPart(CollectiveOp& op, Job job) {
  job.hierarchy.reset();
  op.setJob(std::move(job));
  run(op);
}

void Channel::runHierarchical(CollectiveOp& op) {
  try {
    runParts(op);
  } catch (...) {
    // Whatever failed, this host's other ranks may be waiting in a later part: they must not
    // wait for this rank any longer (a no-op when the channel broke already).
    abandon();
    throw;
  }
}

void Channel::runParts(CollectiveOp& op) {
  const Job whole = op.job();
  const HostParts& h = *whole.hierarchy;
  const bool crosses = static_cast<bool>(h.cross);
  Job part;
  part.reduce = whole.reduce;
  switch (whole.kind) {
    case Kind::Allreduce:
      if (h.parallel) {
        // Blocks of n elements, one per rank of the host; the last one padded.
        const int64_t count = whole.buffer.numel();
        const int64_t ranks = shape_.size;
        const int64_t n = (count + ranks - 1) / ranks;
        const at::Tensor flat = whole.buffer.view({-1});
        at::Tensor padded = flat;
        if (n * ranks != count) {
          padded = at::zeros({n * ranks}, flat.options());
          padded.narrow(0, 0, count).copy_(flat);
        }
        at::Tensor block = at::empty({n}, flat.options());
        part.kind = Kind::ReduceScatter;
        part.input = padded;
        part.output = block;
        runPart(op, part);
        runCross(h, block, op);
        part = Job{};
        part.kind = Kind::Allgather;
        part.input = block;
        part.output = padded;
        runPart(op, part);
        if (!padded.is_same(flat)) flat.copy_(padded.narrow(0, 0, count));
      } else {
        part.kind = Kind::Reduce;
        part.root = 0;
        part.buffer = whole.buffer;
        runPart(op, part);
        if (crosses) runCross(h, whole.buffer, op);
        part.kind = Kind::Broadcast;
        runPart(op, part);
      }
      break;
    case Kind::Reduce:
      // The root's host gathers to the root; the others to their leader, which crosses.
      part.kind = Kind::Reduce;
      part.root = h.localRoot;
      part.buffer = whole.buffer;
      runPart(op, part);
      if (crosses) runCross(h, whole.buffer, op);
      break;
    case Kind::Broadcast:
      part.kind = Kind::Broadcast;
      part.root = h.localRoot;
      part.buffer = whole.buffer;
      if (h.rootHere) {
        runPart(op, part);
        if (crosses) runCross(h, whole.buffer, op);
      } else {
        if (crosses) runCross(h, whole.buffer, op);
        runPart(op, part);
      }
      break;
    case Kind::Allgather: {
      // Gather into the leader's blocks of this host, the leaders exchange their hosts'
      // blocks (and put them in rank order), broadcast the whole.
      const int64_t n = whole.input.numel();
      part.kind = Kind::Gather;
      part.input = whole.input;
      if (crosses) part.output = h.hostOrder.narrow(0, h.hostOffset, n * shape_.size);
      runPart(op, part);
      if (crosses) runCross(h, h.hostOrder, op);
      part = Job{};
      part.kind = Kind::Broadcast;
      part.buffer = whole.output;
      runPart(op, part);
      break;
    }
    case Kind::ReduceScatter: {
      // Sum this host's inputs on the leader, the leaders reduce-scatter by host, scatter
      // the host's blocks.
      const int64_t n = whole.output.numel();
      part.kind = Kind::Reduce;
      part.buffer = crosses ? whole.buffer : whole.input;
      runPart(op, part);
      if (crosses) runCross(h, h.hostOrder, op);
      part = Job{};
      part.kind = Kind::Scatter;
      if (crosses) part.input = h.hostOrder.narrow(0, h.hostOffset, n * shape_.size);
      part.output = whole.output;
      runPart(op, part);
      break;
    }
    case Kind::Barrier:
      part.kind = Kind::Barrier;
      runPart(op, part);
      if (crosses) runCross(h, at::Tensor(), op);
      runPart(op, part);
      break;
    default:
      TORCH_CHECK(false, "commux: ", kindName(whole.kind), " has no hierarchical form");
  }
  op.setJob(whole);
}

}  // namespace commux::shm
