// ProcessGroupUCX: collectives. Each call validates, stages the tensors into one flat
// contiguous buffer (in place when it can), picks a schedule and hands it to the engine.
#include <c10/util/Exception.h>

#include <algorithm>

#include "c10d/reduction.hpp"
#include "c10d/staging.hpp"
#include "c10d/tensor_schedule_op.hpp"
#include "c10d/tensor_job.hpp"
#include "c10d/validation.hpp"
#include "c10d/work_ucx.hpp"
#include "collectives/round_fit.hpp"
#include "collectives/route.hpp"
#include "collectives/selection.hpp"
#include "commux/options.hpp"
#include "commux/process_group_ucx.hpp"
#include "core/group_health.hpp"
#include "engine/schedule_op.hpp"
#include "engine/engine.hpp"
#include "group/collective_check.hpp"
#include "group/collectives.hpp"
#include "group/group.hpp"
#include "group/peer_table.hpp"
#include "shm/channel.hpp"
#include "shm/channel_op.hpp"

namespace commux {
namespace {

/// A flat buffer holding the local reduction of all `tensors`; never aliases them when
/// `privateCopy` is set.
at::Tensor localReduce(const std::vector<at::Tensor>& tensors, core::ReduceOp kind,
                       bool privateCopy) {
  at::Tensor work = flat(tensors[0]);
  if (privateCopy && tensors[0].is_contiguous()) work = work.clone();
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    reduceInto(work, flat(tensors[i]), kind);
  }
  return work;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::launchCollective(
    c10d::OpType type, std::uint32_t sequence, engine::Description description,
    std::vector<at::Tensor> outputs, collectives::Schedule schedule, at::Tensor work,
    std::optional<core::ReduceOp> reduce, std::function<void()> finalize,
    std::chrono::milliseconds timeout, at::Tensor sendBuffer, int onlyPeer, bool callChecked) {
  const NoAutograd noAutograd;  // the operation's entry checked the rest
  if (onlyPeer < 0 && !callChecked && checksCalls()) {
    checkSameCollective(type, work, reduce, description, timeout);
  }
  // Every member's record before the schedule's peers': all of them in one store request.
  if (onlyPeer < 0) group_->watchMembers();
  auto setup =
      group::scheduleSetup(*group_, std::move(schedule), reduce, sequence, description, size_);
  auto w = makeWork(type, std::move(outputs), std::move(description), timeout);
  w->setPeer(onlyPeer);
  w->addReads({work, sendBuffer});
  setup.finalize = std::move(finalize);
  auto op = std::make_shared<TensorScheduleOp>(std::move(setup), std::move(work),
                                                 std::move(sendBuffer), w->parts(), w->completer());
  launch(w, std::move(op), /*collective=*/onlyPeer < 0);
  return w;
}

bool ProcessGroupUCX::checksCalls() const {
  return size_ > 1 && Config::get().checkCollectives && !group_->batching();
}

void ProcessGroupUCX::checkSameCollective(c10d::OpType type, const at::Tensor& work,
                                          std::optional<core::ReduceOp> reduce,
                                          const engine::Description& description,
                                          std::chrono::milliseconds timeout,
                                          const std::vector<std::size_t>* sendCounts,
                                          const std::vector<std::size_t>* recvCounts) {
  // An all-to-all's buffers differ with uneven splits: its elements are left out (its
  // counts per rank are checked pair by pair instead).
  const bool alltoall = type == c10d::OpType::ALLTOALL || type == c10d::OpType::ALLTOALL_BASE;
  group::CallSignature mine;
  mine.operation = static_cast<int64_t>(type);
  mine.type = work.defined() ? static_cast<int64_t>(work.scalar_type()) : -1;
  mine.reduce = reduce ? static_cast<int64_t>(*reduce) : -1;
  mine.count = work.defined() && !alltoall ? work.numel() : -1;
  if (sendCounts != nullptr && recvCounts != nullptr) {
    mine.sendCounts = *sendCounts;
    mine.recvCounts = *recvCounts;
  }
  const auto limit = timeout.count() >= 0 ? timeout : timeout_;  // kUnsetTimeout: the group's
  group::checkSameCall(*group_, mine, description, limit, [](const group::CallSignature& g) {
    return c10d::opTypeToString(static_cast<c10d::OpType>(g.operation)) + " of " +
           (g.count >= 0 ? std::to_string(g.count) + " x " : std::string()) +
           (g.type >= 0 ? std::string(c10::toString(static_cast<c10::ScalarType>(g.type)))
                        : "nothing") +
           (g.reduce >= 0 ? ", reduction " + std::to_string(g.reduce) : "");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::launchShm(
    c10d::OpType type, engine::Description description, std::vector<at::Tensor> outputs,
    const std::shared_ptr<shm::Channel>& channel, TensorJob&& job, std::function<void()> finalize,
    std::chrono::milliseconds timeout) {
  const NoAutograd noAutograd;  // the operation's entry checked the rest
  auto w = makeWork(type, std::move(outputs), std::move(description), timeout);
  // Peers read these in place (CMA) until the lane has run the job.
  w->addReads({job.buffer, job.input, job.output});
  launch(w,
         std::make_shared<shm::ChannelOp>(channel, toCore(std::move(job)),
                                             withoutGrad(std::move(finalize)), w->parts(),
                                             w->completer()),
         /*collective=*/true);
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::launchShared(
    c10d::OpType type, const std::shared_ptr<shm::Channel>& channel, TensorJob&& job,
    const char* op, c10::ArrayRef<at::Tensor> described, std::string detail,
    std::vector<at::Tensor> outputs, std::function<void()> finalize,
    std::chrono::milliseconds timeout) {
  const std::uint32_t seq = nextSequence();
  if (channel) {
    return launchShm(type, describe(op, described, std::move(detail), "shared memory", seq),
                     std::move(outputs), channel, std::move(job), std::move(finalize), timeout);
  }
  auto description = describe(op, described, std::move(detail), "hierarchical", seq);
  if (checksCalls()) {
    // As on the schedule path (launchCollective), with the buffer and count it would check:
    // which path a call takes across hosts may depend on its size, and ranks whose calls
    // differ must all be told rather than wait for each other.
    const at::Tensor sized = job.kind == shm::Kind::Allgather       ? job.output
                             : job.kind == shm::Kind::ReduceScatter ? job.input
                             : job.kind == shm::Kind::Barrier       ? at::empty({0}, at::kByte)
                                                                    : job.buffer;
    checkSameCollective(type, sized,
                        shm::reduces(job.kind) ? std::optional<core::ReduceOp>(job.reduce)
                                               : std::nullopt,
                        description, timeout);
  }
  return launchHierarchical(type, std::move(job), std::move(description), std::move(outputs),
                            std::move(finalize), timeout, seq);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  const CollectiveEntry entry(*this);
  if (!tensors.empty() && tensors[0].defined() && tensors[0].layout() == at::kSparse) {
    return allreduce_sparse(tensors, opts);
  }
  checkTensors("allreduce", tensors, true);
  checkWritable("allreduce", tensors);
  const auto reduction = Reduction::of("allreduce", opts.reduceOp, tensors[0].scalar_type());
  std::shared_ptr<shm::Channel> channel;
  const auto route =
      routeFor(collectives::Collective::Allreduce, "allreduce", tensors[0].is_cpu(), 0, channel);
  if (estimating()) {
    return estimated(c10d::OpType::ALLREDUCE, collectives::Collective::Allreduce, route, tensors[0],
                     elementCount(tensors[0]), 0, tensors);
  }
  const bool shared = route.path != collectives::Path::Schedule;
  at::Tensor work = shared && tensors.size() == 1 ? dense(tensors[0])
                                                  : localReduce(tensors, reduction.kind(), false);
  reduction.prepare(work);
  const auto contributions = static_cast<int64_t>(size_) * static_cast<int64_t>(tensors.size());
  std::function<void()> finalize;
  if (reduction.finishes() || scatterBackNeeded(work, tensors)) {
    finalize = [work, tensors, reduction, contributions] {
      reduction.finish(work, contributions);
      scatterBack(work, tensors);
    };
  }
  if (shared) {
    TensorJob job;
    job.kind = shm::Kind::Allreduce;
    job.reduce = reduction.kind();
    job.buffer = work;
    return launchShared(c10d::OpType::ALLREDUCE, channel, std::move(job), "allreduce", tensors,
                        reduction.label(), tensors, std::move(finalize), opts.timeout);
  }
  auto plan = collectives::planAllreduce(rank_, size_, elementCount(work), work.element_size(),
                                         thresholds(work, route.schedule));
  const std::uint32_t seq = nextSequence();
  return launchCollective(
      c10d::OpType::ALLREDUCE, seq,
      describe("allreduce", tensors, reduction.label(), plan.algorithm, seq), tensors,
      std::move(plan.schedule), work, reduction.kind(), std::move(finalize), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
  const CollectiveEntry entry(*this);
  checkTensors("reduce", tensors, true);
  checkWritable("reduce", tensors);
  checkPeer("reduce", "root", static_cast<int>(opts.rootRank), size_);
  const auto reduction = Reduction::of("reduce", opts.reduceOp, tensors[0].scalar_type());
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = rank_ == root;
  // Only the root's tensors receive the result; the others keep their input, so
  // non-roots reduce in a private buffer.
  std::shared_ptr<shm::Channel> channel;
  const auto route = routeFor(collectives::Collective::Reduce, "reduce", tensors[0].is_cpu(),
                              tensors[0].nbytes(), channel);
  if (estimating()) {
    return estimated(c10d::OpType::REDUCE, collectives::Collective::Reduce, route, tensors[0],
                     elementCount(tensors[0]), root, tensors);
  }
  const bool parts = route.path == collectives::Path::Hierarchical;
  // Over shared memory a non-root's buffer is only read: it needs a private copy only when
  // its contribution is scaled first. In parts, a host's leader gathers into its buffer.
  at::Tensor work = (channel || (parts && isRoot)) && tensors.size() == 1 &&
                            (isRoot || !reduction.changesContribution())
                        ? dense(tensors[0])
                        : localReduce(tensors, reduction.kind(), !isRoot);
  reduction.prepare(work);
  const auto contributions = static_cast<int64_t>(size_) * static_cast<int64_t>(tensors.size());
  std::function<void()> finalize;
  if (isRoot && (reduction.finishes() || scatterBackNeeded(work, tensors))) {
    finalize = [work, tensors, reduction, contributions] {
      reduction.finish(work, contributions);
      scatterBack(work, tensors);
    };
  }
  const std::string detail = reduction.label() + " to rank " + std::to_string(root);
  if (route.path != collectives::Path::Schedule) {
    TensorJob job;
    job.kind = shm::Kind::Reduce;
    job.root = root;
    job.reduce = reduction.kind();
    job.buffer = work;
    return launchShared(c10d::OpType::REDUCE, channel, std::move(job), "reduce", tensors, detail,
                        tensors, std::move(finalize), opts.timeout);
  }
  auto plan = collectives::planReduce(rank_, size_, root, elementCount(work), work.element_size(),
                                      thresholds(work, route.schedule));
  const std::uint32_t seq = nextSequence();
  return launchCollective(c10d::OpType::REDUCE, seq,
                          describe("reduce", tensors, detail, plan.algorithm, seq), tensors,
                          std::move(plan.schedule), work, reduction.kind(), std::move(finalize),
                          opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  const CollectiveEntry entry(*this);
  checkTensors("broadcast", tensors, true);
  checkWritable("broadcast", tensors);
  checkPeer("broadcast", "root", static_cast<int>(opts.rootRank), size_);
  TORCH_CHECK_VALUE(opts.rootTensor >= 0 && opts.rootTensor < static_cast<int64_t>(tensors.size()),
                    "commux: broadcast: rootTensor ", opts.rootTensor, " is outside the list of ",
                    tensors.size(), " tensors");
  const int root = static_cast<int>(opts.rootRank);
  std::shared_ptr<shm::Channel> channel;
  const auto route = routeFor(collectives::Collective::Broadcast, "broadcast", tensors[0].is_cpu(),
                              tensors[0].nbytes(), channel);
  if (estimating()) {
    return estimated(c10d::OpType::BROADCAST, collectives::Collective::Broadcast, route,
                     tensors[0], elementCount(tensors[0]), root, tensors);
  }
  // Shared memory takes any contiguous shape; the schedules want 1-D.
  const bool anyShape = route.path != collectives::Path::Schedule;
  const auto shaped = [&](const at::Tensor& t) { return anyShape ? dense(t) : flat(t); };
  at::Tensor work = rank_ == root ? shaped(tensors[opts.rootTensor])
                    : tensors.size() == 1 && tensors[0].is_contiguous()
                        ? (anyShape ? tensors[0] : tensors[0].view({-1}))
                        : at::empty({tensors[0].numel()}, tensors[0].options());
  const std::string detail = "from rank " + std::to_string(root);
  std::function<void()> finalize;
  if (scatterBackNeeded(work, tensors)) finalize = [work, tensors] { scatterBack(work, tensors); };
  if (anyShape) {
    TensorJob job;
    job.kind = shm::Kind::Broadcast;
    job.root = root;
    job.buffer = work;
    return launchShared(c10d::OpType::BROADCAST, channel, std::move(job), "broadcast", tensors,
                        detail, tensors, std::move(finalize), opts.timeout);
  }
  auto plan = collectives::planBroadcast(rank_, size_, root, elementCount(work),
                                         work.element_size(), thresholds(work, route.schedule));
  const std::uint32_t seq = nextSequence();
  return launchCollective(
      c10d::OpType::BROADCAST, seq,
      describe("broadcast", tensors, detail, plan.algorithm, seq),
      tensors, std::move(plan.schedule), work, std::nullopt,
      std::move(finalize), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::barrier(const c10d::BarrierOptions& opts) {
  const CollectiveEntry entry(*this);
  std::shared_ptr<shm::Channel> channel;
  const auto route = routeFor(collectives::Collective::Barrier, "barrier", true, 0, channel);
  if (estimating()) {
    return estimated(c10d::OpType::BARRIER, collectives::Collective::Barrier, route, at::Tensor(),
                     0, 0, {});
  }
  if (route.path != collectives::Path::Schedule) {
    return launchShared(c10d::OpType::BARRIER, channel, TensorJob{}, "barrier", {}, "", {}, nullptr,
                        opts.timeout);
  }
  auto plan = collectives::planBarrier(rank_, size_);
  const std::uint32_t seq = nextSequence();
  return launchCollective(c10d::OpType::BARRIER, seq,
                          describe("barrier", {}, "", plan.algorithm, seq), {},
                          std::move(plan.schedule), at::empty({0}, at::kByte), std::nullopt,
                          nullptr, opts.timeout);
}

}  // namespace commux
