// ProcessGroupUCX: collectives of a group that spans hosts (allreduce, reduce, broadcast,
// barrier on CPU tensors). Each host's ranks meet in shared memory; between hosts, one rank
// per host (its leader, or the root on the root's host) runs the UCX schedule among those
// ranks, or, for a parallel allreduce, every rank runs it with its counterparts on the
// other hosts for its block. A rank alone on its host only has the part between hosts.
#include <c10/util/Exception.h>

#include <condition_variable>
#include <mutex>

#include "c10d/peer_table.hpp"
#include "c10d/shm_setup.hpp"
#include "c10d/staging.hpp"
#include "c10d/work_ucx.hpp"
#include "collectives/selection.hpp"
#include "commux/options.hpp"
#include "commux/process_group_ucx.hpp"
#include "engine/collective_op.hpp"
#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "shm/channel.hpp"
#include "shm/collective_op.hpp"

namespace commux {
namespace {

/// `schedule` planned over indices into `members`, turned into group ranks.
collectives::Schedule onRanks(collectives::Schedule schedule, const std::vector<int>& members) {
  for (auto& step : schedule.steps) {
    for (auto& t : step.sends) t.peer = members[static_cast<std::size_t>(t.peer)];
    for (auto& t : step.recvs) t.peer = members[static_cast<std::size_t>(t.peer)];
  }
  return schedule;
}

/// Runs the part between hosts on the calling thread (a channel's lane, or a waiter that
/// runs the channel's work) and returns when it is over; gives up when `outer`, the
/// collective it is part of, finished first (timed out or aborted), and returns false
/// (cancelled) at `deadline`, the waiter's own: its wait then times out as usual.
bool crossHosts(engine::Engine& engine, engine::CollectiveOp::Setup setup,
                engine::Description description, const at::Tensor& buffer,
                const engine::Op& outer, std::chrono::steady_clock::time_point deadline) {
  setup.work = buffer.defined() ? buffer.view({-1}) : at::empty({0}, at::kByte);
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    std::atomic<bool> done{false};
    std::exception_ptr error;
  };
  auto state = std::make_shared<State>();
  auto op = std::make_shared<engine::CollectiveOp>(
      std::move(setup), std::move(description), [state](std::exception_ptr error, int) {
        {
          std::lock_guard<std::mutex> lock(state->mutex);
          state->error = std::move(error);
          state->done.store(true, std::memory_order_release);
        }
        state->cv.notify_all();
      });
  engine.submit(op);
  bool cancelled = false;
  bool late = false;
  while (!state->done.load(std::memory_order_acquire)) {
    late = late || std::chrono::steady_clock::now() >= deadline;
    if (!cancelled && (outer.finished() || late)) {
      engine.cancel(op, engine::commError("commux: " + outer.description() +
                                          ": abandoned between hosts (timed out or aborted)"));
      cancelled = true;
    }
    // Drive the worker while waiting where no other thread does; look at `outer` now and
    // then, since its end does not wake this thread.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    if (!engine.parkUntil(state->done, until)) {
      std::unique_lock<std::mutex> lock(state->mutex);
      state->cv.wait_until(lock, until,
                           [&] { return state->done.load(std::memory_order_acquire); });
    }
  }
  if (late && cancelled) return false;
  if (state->error) std::rethrow_exception(state->error);
  return true;
}

}  // namespace

std::vector<std::vector<int>> ProcessGroupUCX::hosts() const {
  std::lock_guard<std::mutex> lock(shmMutex_);
  return layout_ ? layout_->hosts : std::vector<std::vector<int>>{};
}

bool ProcessGroupUCX::hierarchical(bool cpu) const {
  return cpu && layout_ && Config::get().hierarchy != Hierarchy::Off;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::launchHierarchical(
    c10d::OpType type, shm::Kind kind, int root, at::Tensor buffer,
    std::optional<engine::ReduceKind> reduce, engine::Description description,
    std::vector<at::Tensor> outputs, std::function<void()> finalize,
    std::chrono::milliseconds timeout, std::uint32_t sequence) {
  const HostLayout& layout = *layout_;
  const int myHost = layout.hostOf[rank_];
  const int hostRanks = static_cast<int>(layout.hosts[myHost].size());
  const bool rooted = kind == shm::Kind::Reduce || kind == shm::Kind::Broadcast;
  const int rootHost = rooted ? layout.hostOf[root] : 0;
  const std::size_t count = buffer.defined() ? static_cast<std::size_t>(buffer.numel()) : 0;
  const std::size_t elementSize = buffer.defined() ? buffer.element_size() : 1;
  const Config& config = Config::get();
  // The same choice on every rank: it depends on the layout, the size and the settings.
  const bool parallel =
      kind == shm::Kind::Allreduce && layout.uniform() &&
      (config.hierarchy == Hierarchy::Parallel ||
       (config.hierarchy == Hierarchy::Auto && count * elementSize >= config.hierarchyParallelMinBytes));

  // The ranks that cross, one per host, in host order.
  std::vector<int> members;
  for (int h = 0; h < layout.hostCount(); ++h) {
    const auto& ranks = layout.hosts[h];
    members.push_back(parallel ? ranks[layout.localIndexOf[rank_]]
                      : rooted && h == rootHost ? root
                                                : ranks[0]);
  }
  const bool crosses = members[myHost] == rank_;
  const int hosts = layout.hostCount();
  const std::size_t crossCount =
      parallel ? (count + hostRanks - 1) / static_cast<std::size_t>(hostRanks) : count;

  engine::CollectiveOp::Setup setup;
  if (crosses) {
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
      case shm::Kind::Barrier: plan = collectives::planBarrier(myHost, hosts); break;
      default: TORCH_CHECK(false, "commux: ", shm::kindName(kind), " has no hierarchical form");
    }
    setup.schedule = onRanks(std::move(plan.schedule), members);
    setup.routes = peers_->get(setup.schedule.peers());
    setup.reduce = reduce;
    setup.myContext = context_;
    setup.myRank = rank_;
    setup.sequence = sequence & (Config::get().sequenceWrap - 1);
  }

  auto channel = std::atomic_load(&shm_);
  if (!channel) {
    // Alone on this host: only the part between hosts, which this rank always runs.
    TORCH_CHECK(crosses, "commux: internal error: a rank alone on its host must cross");
    return launchCollective(type, sequence, std::move(description), std::move(outputs),
                            std::move(setup.schedule),
                            buffer.defined() ? buffer.view({-1}) : at::empty({0}, at::kByte),
                            reduce, std::move(finalize), timeout);
  }
  auto hierarchy = std::make_shared<shm::HostParts>();
  hierarchy->parallel = parallel;
  hierarchy->rootHere = rooted && rootHost == myHost;
  hierarchy->localRoot = hierarchy->rootHere ? layout.localIndexOf[root] : 0;
  if (crosses) {
    hierarchy->cross = [engine = engine_, setup = std::move(setup), description](
                           const at::Tensor& part, const engine::Op& outer,
                           std::chrono::steady_clock::time_point deadline) {
      return crossHosts(*engine, setup, description, part, outer, deadline);
    };
  }
  shm::Job job;
  job.kind = kind;
  job.root = rooted ? root : 0;
  job.reduce = reduce.value_or(engine::ReduceKind::Sum);
  job.buffer = std::move(buffer);
  job.hierarchy = std::move(hierarchy);
  return launchShm(type, std::move(description), std::move(outputs), channel, std::move(job),
                   std::move(finalize), timeout);
}

}  // namespace commux
