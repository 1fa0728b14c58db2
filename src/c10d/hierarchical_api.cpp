// ProcessGroupUCX: collectives of a group that spans hosts (allreduce, reduce, broadcast,
// allgather, reduce_scatter, barrier on CPU tensors), planned as a HierarchicalOp's parts.
// Each host's ranks meet in shared memory; between hosts, one rank per host (its leader, or
// the root on the root's host) runs the UCX schedule among those ranks, or, for a parallel
// allreduce, every rank runs it with its counterparts on the other hosts for its block. A
// rank alone on its host only has the part between hosts.
#include <c10/util/Exception.h>

#include "c10d/hierarchical_op.hpp"
#include "c10d/staging.hpp"
#include "c10d/work_ucx.hpp"
#include "collectives/selection.hpp"
#include "commux/options.hpp"
#include "commux/process_group_ucx.hpp"
#include "core/group_health.hpp"
#include "group/collectives.hpp"
#include "group/group.hpp"
#include "group/peer_table.hpp"
#include "group/shm_setup.hpp"
#include "shm/channel.hpp"

namespace commux {
namespace {

/// A buffer the UCX schedules take: flat (an empty one for a barrier).
at::Tensor flatOrEmpty(const at::Tensor& buffer) {
  return buffer.defined() ? buffer.view({-1}) : at::empty({0}, at::kByte);
}

/// `schedule` planned over indices into `members`, turned into group ranks.
collectives::Schedule onRanks(collectives::Schedule schedule, const std::vector<int>& members) {
  for (auto& step : schedule.steps) {
    for (auto& t : step.sends) t.peer = members[static_cast<std::size_t>(t.peer)];
    for (auto& t : step.recvs) t.peer = members[static_cast<std::size_t>(t.peer)];
  }
  return schedule;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::launchHierarchical(
    c10d::OpType type, TensorJob&& job, engine::Description description,
    std::vector<at::Tensor> outputs, std::function<void()> finalize,
    std::chrono::milliseconds timeout, std::uint32_t sequence) {
  const HostLayout& layout = *group_->layout();
  const shm::Kind kind = job.kind;
  // What the parts read (a window registration must not move it meanwhile).
  const at::Tensor buffer = job.buffer, input = job.input, output = job.output;
  const int myHost = layout.hostOf[rank_];
  const int hosts = layout.hostCount();
  const int hostRanks = static_cast<int>(layout.hosts[myHost].size());
  const bool rooted = shm::hasRoot(kind);  // reduce, broadcast: gather and scatter stay flat
  const bool blocks = kind == shm::Kind::Allgather || kind == shm::Kind::ReduceScatter;
  const int root = job.root;
  const int rootHost = rooted ? layout.hostOf[root] : 0;
  const at::Tensor& sized = blocks ? (kind == shm::Kind::Allgather ? job.input : job.output)
                                   : job.buffer;
  // Elements of the buffer, or of each rank's block (allgather, reduce_scatter).
  const std::size_t count = sized.defined() ? static_cast<std::size_t>(sized.numel()) : 0;
  const std::size_t elementSize = sized.defined() ? sized.element_size() : 1;
  // The same choice on every rank: it depends on the layout, the size and rank 0's settings.
  const bool parallel =
      kind == shm::Kind::Allreduce && layout.uniform() &&
      (layout.hierarchy == Hierarchy::Parallel ||
       (layout.hierarchy == Hierarchy::Auto && count * elementSize >= layout.parallelMinBytes));

  // The ranks that cross, one per host, in host order.
  std::vector<int> members;
  for (int h = 0; h < hosts; ++h) {
    const auto& ranks = layout.hosts[h];
    members.push_back(parallel ? ranks[layout.localIndexOf[rank_]]
                      : rooted && h == rootHost ? root
                                                : ranks[0]);
  }
  const bool crosses = members[myHost] == rank_;
  const std::optional<core::ReduceOp> reduce =
      shm::reduces(kind) ? std::optional<core::ReduceOp>(job.reduce) : std::nullopt;

  const bool rootHere = rooted && rootHost == myHost;
  const int localRoot = rootHere ? layout.localIndexOf[root] : 0;
  // Allgather and reduce_scatter cross on the blocks host by host (hostOrder): the group's
  // ranks need not be numbered host by host. When they are, it is the buffer itself.
  at::Tensor hostOrder;
  std::int64_t hostOffset = 0;
  std::function<void()> before, after;
  if (blocks && crosses) {
    hostOffset = layout.hostStart[myHost] * static_cast<std::int64_t>(count);
    // The ranks host by host, as rows of a (ranks x block) view are reordered.
    const at::Tensor order = layout.byHost ? at::Tensor() : at::tensor(layout.hostOrder, at::kLong);
    const auto p = static_cast<std::int64_t>(size_), n = static_cast<std::int64_t>(count);
    if (kind == shm::Kind::Allgather) {
      at::Tensor output = job.output;
      hostOrder = order.defined() ? at::empty({p * n}, output.options()) : output.view({-1});
      if (order.defined()) {
        after = [output, hostOrder, order, p, n] {
          output.view({p, n}).index_copy_(0, order, hostOrder.view({p, n}));
        };
      }
    } else {
      // The leader sums its host's inputs into a private copy (its input stays as it was).
      job.buffer = job.input.reshape({-1}).clone();
      hostOrder = order.defined() ? at::empty({p * n}, job.buffer.options()) : job.buffer;
      if (order.defined()) {
        before = [summed = job.buffer, hostOrder, order, p, n] {
          at::Tensor rows = hostOrder.view({p, n});
          at::index_select_out(rows, summed.view({p, n}), 0, order);
        };
      }
    }
  }

  collectives::Schedule schedule;
  if (crosses) {
    // The part between hosts, planned over host indices and turned into the crossing ranks.
    const std::size_t crossCount =
        parallel ? (count + hostRanks - 1) / static_cast<std::size_t>(hostRanks) : count;
    std::vector<collectives::Range> hostBlocks;
    for (int h = 0; blocks && h < hosts; ++h) {
      hostBlocks.push_back({static_cast<std::size_t>(layout.hostStart[h]) * count,
                            layout.hosts[h].size() * count});
    }
    collectives::Plan plan{};
    switch (kind) {
      case shm::Kind::Allreduce:
        plan = collectives::planAllreduce(myHost, hosts, crossCount, elementSize, thresholds());
        break;
      case shm::Kind::Reduce:
        plan = collectives::planReduce(myHost, hosts, rootHost, crossCount, elementSize,
                                       thresholds());
        break;
      case shm::Kind::Broadcast:
        plan = collectives::planBroadcast(myHost, hosts, rootHost, crossCount, elementSize,
                                          thresholds());
        break;
      case shm::Kind::Allgather:
        plan = collectives::planAllgather(myHost, hosts, hostBlocks, elementSize, thresholds());
        break;
      case shm::Kind::ReduceScatter:
        plan = collectives::planReduceScatter(myHost, hosts, hostBlocks, elementSize,
                                              thresholds());
        break;
      case shm::Kind::Barrier: plan = collectives::planBarrier(myHost, hosts); break;
      default: TORCH_CHECK(false, "commux: ", shm::kindName(kind), " has no hierarchical form");
    }
    schedule = onRanks(std::move(plan.schedule), members);
  }

  auto channel = group_->currentChannel();
  if (!channel) {
    // Alone on this host: only the part between hosts, which this rank always runs.
    TORCH_CHECK(crosses, "commux: internal error: a rank alone on its host must cross");
    at::Tensor work = flatOrEmpty(job.buffer);
    std::function<void()> done = std::move(finalize);
    if (blocks) {
      work = hostOrder;
      const auto mine = work.narrow(0, hostOffset, static_cast<std::int64_t>(count));
      if (kind == shm::Kind::Allgather) {
        mine.copy_(job.input.reshape({-1}));
        if (after) done = [after, done] { after(); if (done) done(); };
      } else {
        if (before) before();
        done = [mine, output = job.output, done] {
          output.view({-1}).copy_(mine);
          if (done) done();
        };
      }
    }
    return launchCollective(type, sequence, std::move(description), std::move(outputs),
                            std::move(schedule), work, reduce, std::move(done), timeout);
  }

  // The parts on this host's channel, around the part between hosts (on `crossOn`).
  HierarchicalOp::Plan plan;
  plan.finalize = std::move(finalize);
  at::Tensor crossOn;
  const auto part = [&](shm::Kind partKind, int partRoot = 0) {
    TensorJob p;
    p.kind = partKind;
    p.root = partRoot;
    p.reduce = job.reduce;
    return p;
  };
  switch (kind) {
    case shm::Kind::Allreduce:
      if (parallel) {
        // Blocks of n elements, one per rank of the host; the last one padded.
        const int64_t total = job.buffer.numel();
        const int64_t n = (total + hostRanks - 1) / hostRanks;
        const at::Tensor flat = job.buffer.view({-1});
        at::Tensor padded = flat;
        if (n * hostRanks != total) {
          // Filled and copied back on the lane, in the channel's order (a collective
          // queued before this one may still write the input).
          padded = at::zeros({n * hostRanks}, flat.options());
          plan.prepare = [flat, padded, total] { padded.narrow(0, 0, total).copy_(flat); };
          plan.finalize = [flat, padded, total, done = std::move(plan.finalize)] {
            flat.copy_(padded.narrow(0, 0, total));
            if (done) done();
          };
        }
        const at::Tensor block = at::empty({n}, flat.options());
        TensorJob scatterPart = part(shm::Kind::ReduceScatter);
        scatterPart.input = padded;
        scatterPart.output = block;
        plan.before.push_back(std::move(scatterPart));
        crossOn = block;
        TensorJob gatherPart = part(shm::Kind::Allgather);
        gatherPart.input = block;
        gatherPart.output = padded;
        plan.after.push_back(std::move(gatherPart));
      } else {
        TensorJob reducePart = part(shm::Kind::Reduce);
        reducePart.buffer = job.buffer;
        plan.before.push_back(reducePart);
        crossOn = job.buffer;
        TensorJob broadcastPart = part(shm::Kind::Broadcast);
        broadcastPart.buffer = job.buffer;
        plan.after.push_back(std::move(broadcastPart));
      }
      break;
    case shm::Kind::Reduce: {
      // The root's host gathers to the root; the others to their leader, which crosses.
      TensorJob reducePart = part(shm::Kind::Reduce, localRoot);
      reducePart.buffer = job.buffer;
      plan.before.push_back(std::move(reducePart));
      crossOn = job.buffer;
      break;
    }
    case shm::Kind::Broadcast: {
      // From the root on its host, first; from the leader on the others, after the crossing.
      TensorJob broadcastPart = part(shm::Kind::Broadcast, localRoot);
      broadcastPart.buffer = job.buffer;
      (rootHere ? plan.before : plan.after).push_back(std::move(broadcastPart));
      crossOn = job.buffer;
      break;
    }
    case shm::Kind::Allgather: {
      // Gather into the leader's blocks of this host, the leaders exchange their hosts'
      // blocks (and put them in rank order), broadcast the whole.
      TensorJob gatherPart = part(shm::Kind::Gather);
      gatherPart.input = job.input;
      if (crosses) {
        gatherPart.output = hostOrder.narrow(0, hostOffset, static_cast<std::int64_t>(count) * hostRanks);
      }
      plan.before.push_back(std::move(gatherPart));
      crossOn = hostOrder;
      TensorJob broadcastPart = part(shm::Kind::Broadcast);
      broadcastPart.buffer = job.output;
      plan.after.push_back(std::move(broadcastPart));
      break;
    }
    case shm::Kind::ReduceScatter: {
      // Sum this host's inputs on the leader, the leaders reduce-scatter by host, scatter
      // the host's blocks.
      TensorJob reducePart = part(shm::Kind::Reduce);
      reducePart.buffer = crosses ? job.buffer : job.input;
      plan.before.push_back(std::move(reducePart));
      crossOn = hostOrder;
      TensorJob scatterPart = part(shm::Kind::Scatter);
      if (crosses) {
        scatterPart.input = hostOrder.narrow(0, hostOffset, static_cast<std::int64_t>(count) * hostRanks);
      }
      scatterPart.output = job.output;
      plan.after.push_back(std::move(scatterPart));
      break;
    }
    case shm::Kind::Barrier:
      plan.before.push_back(part(shm::Kind::Barrier));
      plan.after.push_back(part(shm::Kind::Barrier));
      break;
    default: TORCH_CHECK(false, "commux: ", shm::kindName(kind), " has no hierarchical form");
  }
  if (crosses) {
    HierarchicalOp::Cross cross;
    // A refusal (scheduleSetup) surfaces where the part would start, so that this host's
    // channel is abandoned and its other ranks stop waiting for this one.
    try {
      cross.setup =
          group::scheduleSetup(*group_, std::move(schedule), reduce, sequence, description, hosts);
      cross.work = flatOrEmpty(crossOn);
      cross.setup.finalize = std::move(after);
    } catch (...) {
      cross.refused = std::current_exception();
    }
    cross.before = std::move(before);
    plan.cross = std::move(cross);
  }
  const OpEntry entry(*this);
  auto w = makeWork(type, std::move(outputs), std::move(description), timeout);
  w->addReads({buffer, input, output});
  launch(w, HierarchicalOp::make(channel, std::move(plan), w->parts(), w->completer()),
         /*collective=*/true);
  return w;
}

}  // namespace commux
