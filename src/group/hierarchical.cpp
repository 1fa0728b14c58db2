#include "group/hierarchical.hpp"

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/selection.hpp"
#include "core/error.hpp"
#include "engine/schedule_op.hpp"
#include "group/collectives.hpp"
#include "group/group.hpp"
#include "group/hierarchical_op.hpp"
#include "group/shm_setup.hpp"
#include "shm/channel.hpp"

namespace commux::group {
namespace {

/// `schedule` planned over indices into `members`, turned into group ranks.
collectives::Schedule onRanks(collectives::Schedule schedule, const std::vector<int>& members) {
  for (auto& step : schedule.steps) {
    for (auto& t : step.sends) t.peer = members[static_cast<std::size_t>(t.peer)];
    for (auto& t : step.recvs) t.peer = members[static_cast<std::size_t>(t.peer)];
  }
  return schedule;
}

/// What the schedules take for a buffer a part has none of (a barrier): empty but present.
core::Buffer presentOrEmpty(const core::Buffer& buffer) {
  static char none;
  return buffer.present() ? buffer : core::bufferOf(&none, 0, core::Dtype::UInt8);
}

/// Copies block `from[i]` of `source` to block `to[i]` for every i: rows of `block`
/// elements each (an empty index list means the identity).
void copyRows(const core::Buffer& target, const core::Buffer& source, std::size_t block,
              const std::vector<std::int64_t>& order, bool scatterToOrder) {
  const std::size_t rowBytes = block * source.elementSize;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto j = static_cast<std::size_t>(order[i]);
    const std::size_t to = scatterToOrder ? j : i, from = scatterToOrder ? i : j;
    if (rowBytes != 0) {
      std::memcpy(target.bytePointer() + to * rowBytes, source.bytePointer() + from * rowBytes,
                  rowBytes);
    }
  }
}

}  // namespace

std::shared_ptr<engine::Op> makeHierarchical(Group& group, shm::Job job,
                                             std::function<void()> finalize,
                                             const engine::Description& description,
                                             std::uint32_t sequence, engine::Op::Done done) {
  COMMUX_ASSERT(group.layout() != nullptr, "a collective in parts needs the host layout");
  const HostLayout& layout = *group.layout();
  const int rank = group.rank();
  const int size = group.size();
  const shm::Kind kind = job.kind;
  const int myHost = layout.hostOf[rank];
  const int hosts = layout.hostCount();
  const int hostRanks = static_cast<int>(layout.hosts[myHost].size());
  const bool rooted = shm::hasRoot(kind);  // reduce, broadcast: gather and scatter stay flat
  const bool blocks = kind == shm::Kind::Allgather || kind == shm::Kind::ReduceScatter;
  const int root = job.root;
  const int rootHost = rooted ? layout.hostOf[root] : 0;
  const core::Buffer& sized =
      blocks ? (kind == shm::Kind::Allgather ? job.input : job.output) : job.buffer;
  // Elements of the buffer, or of each rank's block (allgather, reduce_scatter).
  const std::size_t count = sized.present() ? sized.count : 0;
  const std::size_t elementSize = sized.present() ? sized.elementSize : 1;
  // The same choice on every rank: it depends on the layout, the size and rank 0's settings.
  const bool parallel =
      kind == shm::Kind::Allreduce && layout.uniform() &&
      (layout.hierarchy == Hierarchy::Parallel ||
       (layout.hierarchy == Hierarchy::Auto && count * elementSize >= layout.parallelMinBytes));

  // The ranks that cross, one per host, in host order.
  std::vector<int> members;
  for (int h = 0; h < hosts; ++h) {
    const auto& ranks = layout.hosts[static_cast<std::size_t>(h)];
    members.push_back(parallel                  ? ranks[layout.localIndexOf[rank]]
                      : rooted && h == rootHost ? root
                                                : ranks[0]);
  }
  const bool crosses = members[myHost] == rank;
  const std::optional<core::ReduceOp> reduce =
      shm::reduces(kind) ? std::optional<core::ReduceOp>(job.reduce) : std::nullopt;

  const bool rootHere = rooted && rootHost == myHost;
  const int localRoot = rootHere ? layout.localIndexOf[root] : 0;
  // Allgather and reduce_scatter cross on the blocks host by host (hostOrder): the group's
  // ranks need not be numbered host by host. When they are, it is the buffer itself.
  core::Buffer hostOrder;
  std::size_t hostOffset = 0;
  std::function<void()> before, after;
  if (blocks && crosses) {
    hostOffset = static_cast<std::size_t>(layout.hostStart[myHost]) * count;
    const std::size_t p = static_cast<std::size_t>(size);
    if (kind == shm::Kind::Allgather) {
      const core::Buffer output = job.output;
      hostOrder = layout.byHost ? output : core::hostBufferLike(output, p * count);
      if (!layout.byHost) {
        // Row i of the host order is rank hostOrder[i]'s block.
        after = [output, hostOrder, order = layout.hostOrder, count] {
          copyRows(output, hostOrder, count, order, /*scatterToOrder=*/true);
        };
      }
    } else {
      // The leader sums its host's inputs into a private copy (its input stays as it was).
      job.buffer = core::hostCopyOf(job.input);
      hostOrder = layout.byHost ? job.buffer : core::hostBufferLike(job.buffer, p * count);
      if (!layout.byHost) {
        before = [summed = job.buffer, hostOrder, order = layout.hostOrder, count] {
          copyRows(hostOrder, summed, count, order, /*scatterToOrder=*/false);
        };
      }
    }
  }

  collectives::Schedule schedule;
  if (crosses) {
    // The part between hosts, planned over host indices and turned into the crossing ranks.
    const std::size_t crossCount = parallel ? (count + static_cast<std::size_t>(hostRanks) - 1) /
                                                  static_cast<std::size_t>(hostRanks)
                                            : count;
    std::vector<collectives::Range> hostBlocks;
    for (int h = 0; blocks && h < hosts; ++h) {
      hostBlocks.push_back({static_cast<std::size_t>(layout.hostStart[h]) * count,
                            layout.hosts[static_cast<std::size_t>(h)].size() * count});
    }
    collectives::Plan plan{};
    switch (kind) {
      case shm::Kind::Allreduce:
        plan =
            collectives::planAllreduce(myHost, hosts, crossCount, elementSize, thresholds(false));
        break;
      case shm::Kind::Reduce:
        plan = collectives::planReduce(myHost, hosts, rootHost, crossCount, elementSize,
                                       thresholds(false));
        break;
      case shm::Kind::Broadcast:
        plan = collectives::planBroadcast(myHost, hosts, rootHost, crossCount, elementSize,
                                          thresholds(false));
        break;
      case shm::Kind::Allgather:
        plan =
            collectives::planAllgather(myHost, hosts, hostBlocks, elementSize, thresholds(false));
        break;
      case shm::Kind::ReduceScatter:
        plan = collectives::planReduceScatter(myHost, hosts, hostBlocks, elementSize,
                                              thresholds(false));
        break;
      case shm::Kind::Barrier:
        plan = collectives::planBarrier(myHost, hosts);
        break;
      default:
        COMMUX_ASSERT(false, shm::kindName(kind), " has no hierarchical form");
    }
    schedule = onRanks(std::move(plan.schedule), members);
  }

  auto channel = group.currentChannel();
  if (!channel) {
    // Alone on this host: only the part between hosts, which this rank always runs.
    COMMUX_ASSERT(crosses, "a rank alone on its host must cross");
    core::Buffer work = presentOrEmpty(job.buffer);
    std::function<void()> whenDone = std::move(finalize);
    if (blocks) {
      work = hostOrder;
      const core::Buffer mine = core::slice(work, hostOffset, count);
      if (kind == shm::Kind::Allgather) {
        if (job.input.bytes() != 0 && job.input.data != mine.data) {
          std::memmove(mine.data, job.input.data, job.input.bytes());
        }
        if (after) {
          whenDone = [after, whenDone] {
            after();
            if (whenDone) whenDone();
          };
        }
      } else {
        if (before) before();
        whenDone = [mine, output = job.output, whenDone] {
          if (output.bytes() != 0) std::memcpy(output.data, mine.data, output.bytes());
          if (whenDone) whenDone();
        };
      }
    }
    auto setup = scheduleSetup(group, std::move(schedule), reduce, sequence, description, size);
    setup.work = std::move(work);
    if (whenDone) setup.finalize = std::move(whenDone);
    return std::make_shared<engine::ScheduleOp>(std::move(setup), description, std::move(done));
  }

  // The parts on this host's channel, around the part between hosts (on `crossOn`).
  HierarchicalOp::Plan plan;
  plan.finalize = std::move(finalize);
  core::Buffer crossOn;
  const auto part = [&](shm::Kind partKind, int partRoot = 0) {
    shm::Job p;
    p.kind = partKind;
    p.root = partRoot;
    p.reduce = job.reduce;
    return p;
  };
  switch (kind) {
    case shm::Kind::Allreduce:
      if (parallel) {
        // Blocks of n elements, one per rank of the host; the last one padded.
        const std::size_t total = job.buffer.count;
        const std::size_t n =
            (total + static_cast<std::size_t>(hostRanks) - 1) / static_cast<std::size_t>(hostRanks);
        const core::Buffer flat = job.buffer;
        core::Buffer padded = flat;
        if (n * static_cast<std::size_t>(hostRanks) != total) {
          // Filled and copied back on the lane, in the channel's order (a collective
          // queued before this one may still write the input).
          padded =
              core::hostBufferLike(flat, n * static_cast<std::size_t>(hostRanks), /*zero=*/true);
          plan.prepare = [flat, padded] {
            if (flat.bytes() != 0) std::memcpy(padded.data, flat.data, flat.bytes());
          };
          plan.finalize = [flat, padded, whenDone = std::move(plan.finalize)] {
            if (flat.bytes() != 0) std::memcpy(flat.data, padded.data, flat.bytes());
            if (whenDone) whenDone();
          };
        }
        const core::Buffer block = core::hostBufferLike(flat, n);
        shm::Job scatterPart = part(shm::Kind::ReduceScatter);
        scatterPart.input = padded;
        scatterPart.output = block;
        plan.before.push_back(std::move(scatterPart));
        crossOn = block;
        shm::Job gatherPart = part(shm::Kind::Allgather);
        gatherPart.input = block;
        gatherPart.output = padded;
        plan.after.push_back(std::move(gatherPart));
      } else {
        shm::Job reducePart = part(shm::Kind::Reduce);
        reducePart.buffer = job.buffer;
        plan.before.push_back(reducePart);
        crossOn = job.buffer;
        shm::Job broadcastPart = part(shm::Kind::Broadcast);
        broadcastPart.buffer = job.buffer;
        plan.after.push_back(std::move(broadcastPart));
      }
      break;
    case shm::Kind::Reduce: {
      // The root's host gathers to the root; the others to their leader, which crosses.
      shm::Job reducePart = part(shm::Kind::Reduce, localRoot);
      reducePart.buffer = job.buffer;
      plan.before.push_back(std::move(reducePart));
      crossOn = job.buffer;
      break;
    }
    case shm::Kind::Broadcast: {
      // From the root on its host, first; from the leader on the others, after the crossing.
      shm::Job broadcastPart = part(shm::Kind::Broadcast, localRoot);
      broadcastPart.buffer = job.buffer;
      (rootHere ? plan.before : plan.after).push_back(std::move(broadcastPart));
      crossOn = job.buffer;
      break;
    }
    case shm::Kind::Allgather: {
      // Gather into the leader's blocks of this host, the leaders exchange their hosts'
      // blocks (and put them in rank order), broadcast the whole.
      shm::Job gatherPart = part(shm::Kind::Gather);
      gatherPart.input = job.input;
      if (crosses) {
        gatherPart.output =
            core::slice(hostOrder, hostOffset, count * static_cast<std::size_t>(hostRanks));
      }
      plan.before.push_back(std::move(gatherPart));
      crossOn = hostOrder;
      shm::Job broadcastPart = part(shm::Kind::Broadcast);
      broadcastPart.buffer = job.output;
      plan.after.push_back(std::move(broadcastPart));
      break;
    }
    case shm::Kind::ReduceScatter: {
      // Sum this host's inputs on the leader, the leaders reduce-scatter by host, scatter
      // the host's blocks.
      shm::Job reducePart = part(shm::Kind::Reduce);
      reducePart.buffer = crosses ? job.buffer : job.input;
      plan.before.push_back(std::move(reducePart));
      crossOn = hostOrder;
      shm::Job scatterPart = part(shm::Kind::Scatter);
      if (crosses) {
        scatterPart.input =
            core::slice(hostOrder, hostOffset, count * static_cast<std::size_t>(hostRanks));
      }
      scatterPart.output = job.output;
      plan.after.push_back(std::move(scatterPart));
      break;
    }
    case shm::Kind::Barrier:
      plan.before.push_back(part(shm::Kind::Barrier));
      plan.after.push_back(part(shm::Kind::Barrier));
      break;
    default:
      COMMUX_ASSERT(false, shm::kindName(kind), " has no hierarchical form");
  }
  if (crosses) {
    HierarchicalOp::Cross cross;
    // A refusal (scheduleSetup) surfaces where the part would start, so that this host's
    // channel is abandoned and its other ranks stop waiting for this one.
    try {
      cross.setup = scheduleSetup(group, std::move(schedule), reduce, sequence, description, hosts);
      cross.setup.work = presentOrEmpty(crossOn);
      if (after) cross.setup.finalize = std::move(after);
    } catch (...) {
      cross.refused = std::current_exception();
    }
    cross.before = std::move(before);
    plan.cross = std::move(cross);
  }
  return HierarchicalOp::make(channel, std::move(plan), description, std::move(done));
}

}  // namespace commux::group
