// ProcessGroupUCX: the group's life beyond single operations: coalescing windows,
// splitting off subgroups, abort and shutdown.
#include <c10/util/Exception.h>

#include <unistd.h>

#include <algorithm>

#include "c10d/coalesced_work.hpp"
#include "c10d/staging.hpp"
#include "c10d/validation.hpp"
#include "c10d/work_ucx.hpp"
#include "commux/process_group_ucx.hpp"
#include "engine/engine.hpp"
#include "engine/fork_guard.hpp"

namespace commux {

bool ProcessGroupUCX::inheritedByFork() const noexcept {
  return forkGeneration_ != engine::forkGeneration();
}

void ProcessGroupUCX::checkSameProcess() const {
  if (!inheritedByFork()) return;
  C10_THROW_ERROR(DistBackendError,
                  "commux: this process group was created in process " +
                      std::to_string(creatorPid_) + ", and this process (" +
                      std::to_string(::getpid()) +
                      ") is a child forked from it afterwards. A forked child cannot use its "
                      "parent's process groups (their UCX worker, connections and shared "
                      "memory belong to the parent, as with NCCL): communicate from the parent, "
                      "or start the child with the 'spawn' or 'forkserver' method and create a "
                      "group there");
}

void ProcessGroupUCX::checkUsable() const {
  checkSameProcess();
  const State s = state_.load(std::memory_order_acquire);
  if (s == State::Running) return;
  C10_THROW_ERROR(DistBackendError,
                  std::string("commux: this process group was ") +
                      (s == State::Aborted ? "aborted" : "shut down") +
                      "; create a new one to communicate");
}

void ProcessGroupUCX::checkStorageIdle(const char* op, const at::Tensor& tensor) {
  if (!tensor.has_storage()) return;
  const c10::Storage& storage = tensor.storage();
  std::lock_guard<std::mutex> lock(trackMutex_);
  for (const auto& weak : inflight_) {
    const auto work = weak.lock();
    if (!work || work->isCompleted()) continue;
    for (const auto* tensors : {&work->tensors(), &work->reads()}) {
      for (const auto& t : *tensors) {
        TORCH_CHECK_VALUE(!t.defined() || !t.has_storage() || !t.storage().is_alias_of(storage),
                          "commux: ", op,
                          ": the tensor's memory is in use by an operation "
                          "still in flight (",
                          work->description(), "); wait for it first");
      }
    }
  }
}

void ProcessGroupUCX::keepUntilDestroyed(at::Tensor tensor) {
  std::lock_guard<std::mutex> lock(trackMutex_);
  keptAlive_.push_back(std::move(tensor));
}

void ProcessGroupUCX::startCoalescing() {
  checkSameProcess();
  std::lock_guard<std::mutex> lock(trackMutex_);
  TORCH_CHECK(!coalescing_.load(std::memory_order_relaxed),
              "commux: startCoalescing called twice without endCoalescing");
  coalesced_.clear();
  coalescing_.store(true, std::memory_order_relaxed);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::endCoalescing() {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<std::shared_ptr<engine::Op>> ops;
  std::vector<c10::intrusive_ptr<WorkUCX>> deferred;
  {
    std::lock_guard<std::mutex> lock(trackMutex_);
    TORCH_CHECK(coalescing_.load(std::memory_order_relaxed),
                "commux: endCoalescing called without startCoalescing");
    coalescing_.store(false, std::memory_order_relaxed);
    works.swap(coalesced_);
    ops.swap(deferredOps_);
    deferred.swap(deferredWorks_);
  }
  for (auto& work : deferred) work->setDeferred(false);
  // One submission for the whole window: one pass through the worker lock, and the
  // messages leave back to back.
  if (!ops.empty()) engine_->submit(std::move(ops));
  return c10::make_intrusive<CoalescedWork>(rank_, std::move(works));
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupUCX::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  checkUsable();
  for (int r : ranks) checkPeer("split", "member", r, size_);
  const auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  const auto timeout = opts && opts->timeout.count() > 0 ? opts->timeout : timeout_;
  // The subgroup publishes its own address entry under the store the caller namespaced
  // for it, and gets its own context id, so its traffic never meets the parent's.
  return c10::make_intrusive<ProcessGroupUCX>(store, static_cast<int>(it - ranks.begin()),
                                              static_cast<int>(ranks.size()), timeout,
                                              setUpInBackground_);
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupUCX::getBackendOptions() {
  return c10::make_intrusive<c10d::Backend::Options>(getBackendName(), timeout_);
}

void ProcessGroupUCX::abort() {
  if (inheritedByFork()) return;  // the parent's operations are the parent's to abort
  state_.store(State::Aborted, std::memory_order_release);
  setUpStop_.store(true, std::memory_order_release);
  std::vector<c10::weak_intrusive_ptr<WorkUCX>> inflight;
  {
    std::lock_guard<std::mutex> lock(trackMutex_);
    inflight.swap(inflight_);
  }
  for (const auto& weak : inflight) {
    if (auto work = weak.lock()) work->abort();
  }
}

void ProcessGroupUCX::shutdown() {
  State expected = State::Running;
  state_.compare_exchange_strong(expected, State::ShutDown, std::memory_order_acq_rel);
  setUpStop_.store(true, std::memory_order_release);
}

}  // namespace commux
