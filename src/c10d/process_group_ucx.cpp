// ProcessGroupUCX: construction and point-to-point operations.
#include "commux/process_group_ucx.hpp"

#include <c10/util/Exception.h>

#include <unistd.h>

#include <algorithm>

#include <ATen/record_function.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "c10d/backend_hooks.hpp"
#include "c10d/c10d_store.hpp"
#include "config/process_engine.hpp"
#include "c10d/staging.hpp"
#include "c10d/streams.hpp"
#include "c10d/tensor_p2p_op.hpp"
#include "c10d/validation.hpp"
#include "c10d/work_ucx.hpp"
#include "commux/options.hpp"
#include "cuda/cuda_support.hpp"
#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "group/collectives.hpp"
#include "group/group.hpp"
#include "group/peer_table.hpp"
#include "wire/tag.hpp"

namespace commux {
namespace {

std::size_t totalBytes(const std::vector<at::Tensor>& tensors) {
  std::size_t bytes = 0;
  for (const auto& t : tensors) bytes += static_cast<std::size_t>(t.numel()) * t.element_size();
  return bytes;
}

// Several tensors to one peer travel as one IOV message when COMMUX_COALESCE is on.
bool packs(const std::vector<at::Tensor>& tensors) {
  return tensors.size() > 1 && Config::get().coalesce;
}

// The profiler's name of an operation (a literal: the span keeps the pointer).
const char* profilingTitle(c10d::OpType type) {
  using T = c10d::OpType;
  switch (type) {
    case T::BROADCAST: return "commux:broadcast";
    case T::ALLREDUCE: return "commux:all_reduce";
    case T::ALLREDUCE_COALESCED: return "commux:all_reduce_coalesced";
    case T::REDUCE: return "commux:reduce";
    case T::ALLGATHER: return "commux:all_gather";
    case T::_ALLGATHER_BASE: return "commux:all_gather_into_tensor";
    case T::ALLGATHER_COALESCED: return "commux:all_gather_coalesced";
    case T::GATHER: return "commux:gather";
    case T::SCATTER: return "commux:scatter";
    case T::REDUCE_SCATTER: return "commux:reduce_scatter";
    case T::_REDUCE_SCATTER_BASE: return "commux:reduce_scatter_tensor";
    case T::ALLTOALL_BASE: return "commux:all_to_all_single";
    case T::ALLTOALL: return "commux:all_to_all";
    case T::SEND: return "commux:send";
    case T::RECV: return "commux:recv";
    case T::RECVANYSOURCE: return "commux:recv_any_source";
    case T::BARRIER: return "commux:barrier";
    default: return "commux:operation";
  }
}

}  // namespace

ProcessGroupUCX::ProcessGroupUCX(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                 int size, std::chrono::milliseconds timeout,
                                 bool setUpInBackground, bool unconfigured)
    : c10d::Backend(rank, size),
      store_(store),
      timeout_(timeout),
      hooks_(std::make_shared<BackendHooks>()) {
  if (unconfigured) {
    // A stand-in of one member under keys of its own: `rank` may be another member's
    // until reconfigure() says who is who.
    group_ = std::make_unique<group::Group>(
        std::make_shared<C10dStore>(c10::make_intrusive<c10d::PrefixStore>(
            "commux/unconfigured/" + instanceId_ + "/", store)),
        0, 1, processEngine(static_cast<std::size_t>(size)), setUpInBackground);
    group_->holdUnconfigured();
    return;
  }
  group_ = std::make_unique<group::Group>(std::make_shared<C10dStore>(store), rank, size,
                                          processEngine(static_cast<std::size_t>(size)),
                                          setUpInBackground);
}

#ifdef COMMUX_TORCH_HAS_IS_INITIALIZED
bool ProcessGroupUCX::isInitialized() {
  return group_->state() != group::Group::State::Unconfigured;
}
#endif

ProcessGroupUCX::~ProcessGroupUCX() {
  // Without the GIL (torch's own groups are destroyed so too): the group's teardown waits
  // for its death watch's callback and its relay's notice, which may be freeing the last
  // reference to a tensor that Python made, and that takes the GIL. (A forked child's Group
  // frees nothing of its parent's.)
  engine::Engine::runBlocking(
      [](void* group) { static_cast<std::unique_ptr<group::Group>*>(group)->reset(); }, &group_);
}

uint64_t ProcessGroupUCX::getSequenceNumberForGroup() { return group_->sequence(); }

std::uint32_t ProcessGroupUCX::nextSequence() { return group_->nextSequence(); }

std::vector<int> ProcessGroupUCX::knownRanks() const { return group_->knownRanks(); }

std::vector<std::vector<int>> ProcessGroupUCX::hosts() const { return group_->hosts(); }

std::map<std::string, std::int64_t> ProcessGroupUCX::sharedMemoryShape() const {
  return group_->sharedMemoryShape();
}

ProcessGroupUCX::Health ProcessGroupUCX::health() const {
  const group::Group::Status status = group_->status();
  return Health{status.healthy, status.deadRanks, status.reason};
}

void ProcessGroupUCX::joinSetUp() { group_->joinSetUp(); }

void ProcessGroupUCX::checkSameProcess() const { group_->checkSameProcess(); }

void ProcessGroupUCX::checkUsable() const { group_->checkUsable(); }

void ProcessGroupUCX::checkEntry() const {
  group_->checkSameProcess();
  if (group_->state() == group::Group::State::Unconfigured) group_->checkUsable();
}

c10::intrusive_ptr<WorkUCX> ProcessGroupUCX::makeWork(c10d::OpType type,
                                                      std::vector<at::Tensor> outputs,
                                                      engine::Description description,
                                                      std::chrono::milliseconds timeout) {
  group_->checkUsable();
  BackendHooks::Stamp stamp = hooks_->stamp();
  // A span per operation while the profiler records (as gloo's), and nothing otherwise.
  const char* title = at::hasCallbacks() ? profilingTitle(type) : nullptr;
  std::optional<std::vector<at::Tensor>> shapes;
  if (title != nullptr) shapes = outputs;
  auto request = std::make_shared<TensorRequest>(
      type, std::move(outputs), (timeout.count() >= 0 ? timeout : timeout_) + stamp.extra,
      std::move(description), group_->sharedEngine());
  if (stamp.onDone) request->addOnFinished(std::move(stamp.onDone));
  return c10::make_intrusive<WorkUCX>(rank_, type, std::move(request), title, shapes, stamp.key);
}

void ProcessGroupUCX::launch(const c10::intrusive_ptr<WorkUCX>& work,
                             std::shared_ptr<engine::Op> op, bool collective) {
  TensorRequest& request = work->request();
  // CUDA tensors: the operation starts once the caller's current stream has produced its
  // inputs, and whatever it does for the caller afterwards goes on that stream.
  std::optional<c10::Device> device;
  if (const auto& index = op->cudaDevice()) {
    device = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(*index));
  } else {
    device = request.cudaDevice();
  }
  if (op->callerSynchronised()) device.reset();
  std::optional<core::Stream> stream;
  if (device) {
    const c10::Stream current = c10::impl::getDeviceGuardImpl(device->type())->getStream(*device);
    stream = toCore(current);
    op->setUserStream(*stream);
    request.setStream(current);
  }
  if (collective) {
    group::launchCollective(*group_, work->sharedRequest(), std::move(op), stream);
  } else {
    group_->launch(work->sharedRequest(), std::move(op), stream);
  }
  // After the launch, which raises for an operation that cannot run (it was never part of
  // the window then).
  if (group_->batching()) {
    std::lock_guard<std::mutex> lock(trackMutex_);
    coalesced_.push_back(work);
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::send(std::vector<at::Tensor>& tensors,
                                                     int dstRank, int tag) {
  const OpEntry entry(*this);
  checkTensors("send", tensors, false);
  checkTag("send", tag);
  checkPeer("send", "destination", dstRank, size_);
  if (estimating()) return estimatedMessage(c10d::OpType::SEND, totalBytes(tensors), tensors);
  auto route = group_->peers().get(dstRank, "a send to it");
  auto work = makeWork(
      c10d::OpType::SEND, tensors,
      engine::Description::p2p("send", "to", dstRank, tag, totalBytes(tensors), tensors.size()),
      c10d::kUnsetTimeout);
  work->setPeer(dstRank);
  const bool pack = packs(tensors);
  launch(work, std::make_shared<TensorP2POp>(
                   engine::P2POp::Kind::Send, tensors, route,
                   wire::p2pTag(route->context, static_cast<std::uint32_t>(rank_),
                                static_cast<std::uint32_t>(tag), pack),
                   wire::kExactMask, pack, work->parts(), work->completer()));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::recv(std::vector<at::Tensor>& tensors,
                                                     int srcRank, int tag) {
  const OpEntry entry(*this);
  checkTensors("recv", tensors, false);
  checkWritable("recv", tensors);
  checkTag("recv", tag);
  checkPeer("recv", "source", srcRank, size_);
  if (estimating()) return estimatedMessage(c10d::OpType::RECV, totalBytes(tensors), tensors);
  group_->peers().get(srcRank, "a receive from it");  // watched from now on
  auto work = makeWork(
      c10d::OpType::RECV, tensors,
      engine::Description::p2p("recv", "from", srcRank, tag, totalBytes(tensors), tensors.size()),
      c10d::kUnsetTimeout);
  work->setPeer(srcRank);
  launch(work, std::make_shared<TensorP2POp>(
                   engine::P2POp::Kind::Recv, tensors, nullptr,
                   wire::p2pTag(group_->context(), static_cast<std::uint32_t>(srcRank),
                                static_cast<std::uint32_t>(tag)),
                   wire::kExactMask, packs(tensors), work->parts(), work->completer()));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::recvAnysource(std::vector<at::Tensor>& tensors,
                                                              int tag) {
  const OpEntry entry(*this);
  checkTensors("recv", tensors, false);
  checkWritable("recv", tensors);
  checkTag("recv", tag);
  // With several tensors, later messages would have to come from whichever rank matched
  // first, which a single masked UCX receive per tensor cannot promise.
  TORCH_CHECK_VALUE(tensors.size() == 1,
                    "commux: a receive from any source takes exactly one tensor, got ",
                    tensors.size());
  if (estimating()) {
    return estimatedMessage(c10d::OpType::RECVANYSOURCE, totalBytes(tensors), tensors);
  }
  group_->peers().resolveAll();  // any member's death fails it
  auto work = makeWork(
      c10d::OpType::RECVANYSOURCE, tensors,
      engine::Description::p2p("recv", "from", -1, tag, totalBytes(tensors), tensors.size()),
      c10d::kUnsetTimeout);
  launch(work, std::make_shared<TensorP2POp>(
                   engine::P2POp::Kind::Recv, tensors, nullptr,
                   wire::p2pTag(group_->context(), 0, static_cast<std::uint32_t>(tag)), wire::kAnySourceMask,
                   false, work->parts(), work->completer()));
  return work;
}

}  // namespace commux
