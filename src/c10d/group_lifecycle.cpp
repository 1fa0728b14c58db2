// ProcessGroupUCX: the group's life beyond single operations: coalescing windows,
// splitting off subgroups, abort and shutdown.
#include <c10/util/Exception.h>

#include <algorithm>

#include "c10d/coalesced_work.hpp"
#include "c10d/staging.hpp"
#include "c10d/validation.hpp"
#include "c10d/work_ucx.hpp"
#include "commux/process_group_ucx.hpp"
#include "engine/engine.hpp"

namespace commux {

void ProcessGroupUCX::checkUsable() const {
  const State s = state_.load(std::memory_order_acquire);
  if (s == State::Running) return;
  C10_THROW_ERROR(DistBackendError,
                  std::string("commux: this process group was ") +
                      (s == State::Aborted ? "aborted" : "shut down") +
                      "; create a new one to communicate");
}

void ProcessGroupUCX::startCoalescing() {
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
                                              static_cast<int>(ranks.size()), timeout);
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupUCX::getBackendOptions() {
  return c10::make_intrusive<c10d::Backend::Options>(getBackendName(), timeout_);
}

void ProcessGroupUCX::abort() {
  state_.store(State::Aborted, std::memory_order_release);
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
}

}  // namespace commux
