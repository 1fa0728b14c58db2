// ProcessGroupUCX: construction and point-to-point operations.
#include "commux/process_group_ucx.hpp"

#include <c10/util/Exception.h>

#include <algorithm>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "c10d/peer_table.hpp"
#include "cuda/cuda_support.hpp"
#include "c10d/shm_setup.hpp"
#include "shm/channel.hpp"
#include "commux/options.hpp"
#include "c10d/staging.hpp"
#include "c10d/validation.hpp"
#include "c10d/work_ucx.hpp"
#include "engine/engine.hpp"
#include "engine/p2p_op.hpp"
#include "wire/tag.hpp"

namespace commux {
namespace {

std::size_t totalBytes(const std::vector<at::Tensor>& tensors) {
  std::size_t bytes = 0;
  for (const auto& t : tensors) bytes += static_cast<std::size_t>(t.numel()) * t.element_size();
  return bytes;
}

std::string describeP2P(const char* what, const char* preposition, const std::string& peer,
                        int tag, const std::vector<at::Tensor>& tensors) {
  std::string s = std::string(what) + " " + preposition + " " + peer + " (tag " +
                  std::to_string(tag) + ", " + std::to_string(totalBytes(tensors)) + " bytes";
  if (tensors.size() > 1) s += " in " + std::to_string(tensors.size()) + " tensors";
  return s + ")";
}

// Several tensors to one peer travel as one IOV message when COMMUX_COALESCE is on.
bool packs(const std::vector<at::Tensor>& tensors) {
  return tensors.size() > 1 && Config::get().coalesce;
}

}  // namespace

ProcessGroupUCX::ProcessGroupUCX(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                 int size, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), timeout_(timeout) {
  TORCH_CHECK_VALUE(size >= 1 && static_cast<std::uint32_t>(size) <= wire::kMaxRanks,
                    "commux: group size ", size, " is outside [1, ", wire::kMaxRanks, "]");
  TORCH_CHECK_VALUE(rank >= 0 && rank < size, "commux: rank ", rank,
                    " is outside a group of size ", size);
  engine_ = engine::Engine::instance();
  store_ = store;
  context_ = engine_->acquireContext();
  peers_ = std::make_unique<PeerTable>(store, rank, size);
  try {
    peers_->publish(engine_->address(), context_);
  } catch (...) {
    engine_->releaseContext(context_);
    throw;
  }
}

ProcessGroupUCX::~ProcessGroupUCX() {
  shm_.reset();
  engine_->releaseContext(context_);
}

std::shared_ptr<shm::Channel> ProcessGroupUCX::shmChannel() {
  if (size_ < 2) return nullptr;
  std::lock_guard<std::mutex> lock(shmMutex_);
  if (!shmDecided_) {
    shm_ = connectShm(store_, rank_, size_, engine_);
    shmDecided_ = true;
  }
  if (shm_ && shm_->broken()) return nullptr;
  return shm_;
}

c10::intrusive_ptr<WorkUCX> ProcessGroupUCX::makeWork(c10d::OpType type,
                                                      std::vector<at::Tensor> outputs,
                                                      std::string description,
                                                      std::chrono::milliseconds timeout) {
  checkUsable();
  return c10::make_intrusive<WorkUCX>(rank_, type, std::move(outputs),
                                      timeout.count() >= 0 ? timeout : timeout_,
                                      std::move(description), engine_);
}

void ProcessGroupUCX::launch(const c10::intrusive_ptr<WorkUCX>& work,
                             std::shared_ptr<engine::Op> op) {
  work->attach(op);
  // CUDA tensors: the operation starts once the caller's current stream has produced its
  // inputs, and whatever it does for the caller afterwards goes on that stream.
  std::optional<c10::Device> device = op->cudaDevice();
  if (!device) device = work->cudaDevice();
  std::optional<c10::Stream> stream;
  if (device) {
    stream = c10::impl::getDeviceGuardImpl(device->type())->getStream(*device);
    op->setUserStream(*stream);
    work->setStream(*stream);
  }
  {
    std::lock_guard<std::mutex> lock(trackMutex_);
    bool defer = false;
    if (coalescing_.load(std::memory_order_relaxed)) {
      coalesced_.push_back(work);
      defer = Config::get().group;
    }
    if (inflight_.size() >= pruneAt_) {
      inflight_.erase(std::remove_if(inflight_.begin(), inflight_.end(),
                                     [](const auto& w) {
                                       auto strong = w.lock();
                                       return !strong || strong->isCompleted();
                                     }),
                      inflight_.end());
      pruneAt_ = std::max<std::size_t>(64, 2 * inflight_.size());
    }
    inflight_.emplace_back(work);
    // COMMUX_GROUP defers host operations only: a CUDA one waits for its stream instead.
    if (defer && !stream) {
      work->setDeferred(true);
      deferredWorks_.push_back(work);
      deferredOps_.push_back(std::move(op));
      return;
    }
  }
  if (stream) {
    cuda::whenStreamReaches(*stream, [engine = engine_, op = std::move(op)]() mutable {
      engine->submitQuietly(std::move(op));
    });
    return;
  }
  engine_->submit(std::move(op));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::send(std::vector<at::Tensor>& tensors,
                                                     int dstRank, int tag) {
  const NoAutograd noAutograd;
  checkTensors("send", tensors, false);
  checkTag("send", tag);
  checkPeer("send", "destination", dstRank, size_);
  auto route = peers_->get(dstRank);
  auto work = makeWork(c10d::OpType::SEND, tensors,
                       describeP2P("send", "to", "rank " + std::to_string(dstRank), tag, tensors),
                       c10d::kUnsetTimeout);
  const bool pack = packs(tensors);
  launch(work, std::make_shared<engine::P2POp>(
                   engine::P2POp::Kind::Send, tensors, *route,
                   wire::p2pTag(route->context, static_cast<std::uint32_t>(rank_),
                                static_cast<std::uint32_t>(tag), pack),
                   wire::kExactMask, pack, work->description(), work->completer()));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::recv(std::vector<at::Tensor>& tensors,
                                                     int srcRank, int tag) {
  const NoAutograd noAutograd;
  checkTensors("recv", tensors, false);
  checkTag("recv", tag);
  checkPeer("recv", "source", srcRank, size_);
  auto work = makeWork(c10d::OpType::RECV, tensors,
                       describeP2P("recv", "from", "rank " + std::to_string(srcRank), tag, tensors),
                       c10d::kUnsetTimeout);
  launch(work, std::make_shared<engine::P2POp>(
                   engine::P2POp::Kind::Recv, tensors, engine::Route{},
                   wire::p2pTag(context_, static_cast<std::uint32_t>(srcRank),
                                static_cast<std::uint32_t>(tag)),
                   wire::kExactMask, packs(tensors), work->description(), work->completer()));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::recvAnysource(std::vector<at::Tensor>& tensors,
                                                              int tag) {
  const NoAutograd noAutograd;
  checkTensors("recv", tensors, false);
  checkTag("recv", tag);
  // With several tensors, later messages would have to come from whichever rank matched
  // first, which a single masked UCX receive per tensor cannot promise.
  TORCH_CHECK_VALUE(tensors.size() == 1,
                    "commux: a receive from any source takes exactly one tensor, got ",
                    tensors.size());
  auto work = makeWork(c10d::OpType::RECVANYSOURCE, tensors,
                       describeP2P("recv", "from", "any rank", tag, tensors), c10d::kUnsetTimeout);
  launch(work, std::make_shared<engine::P2POp>(
                   engine::P2POp::Kind::Recv, tensors, engine::Route{},
                   wire::p2pTag(context_, 0, static_cast<std::uint32_t>(tag)),
                   wire::kAnySourceMask, false, work->description(), work->completer()));
  return work;
}

}  // namespace commux
