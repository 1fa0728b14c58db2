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
#include "group/group.hpp"

namespace commux {

void ProcessGroupUCX::checkStorageIdle(const char* op, const at::Tensor& tensor) {
  if (!tensor.has_storage()) return;
  const c10::Storage& storage = tensor.storage();
  group_->forEachInFlight([&](const group::Request& inFlight) {
    // Every request of this group is the adapter's: it launches them all.
    const auto& request = static_cast<const TensorRequest&>(inFlight);
    for (const auto* tensors : {&request.outputs(), &request.reads()}) {
      for (const auto& t : *tensors) {
        TORCH_CHECK_VALUE(!t.defined() || !t.has_storage() || !t.storage().is_alias_of(storage),
                          "commux: ", op,
                          ": the tensor's memory is in use by an operation "
                          "still in flight (",
                          request.description(), "); wait for it first");
      }
    }
  });
}

void ProcessGroupUCX::keepUntilDestroyed(at::Tensor tensor) {
  std::lock_guard<std::mutex> lock(trackMutex_);
  keptAlive_.push_back(std::move(tensor));
}

void ProcessGroupUCX::startCoalescing() {
  group_->startBatch();
  std::lock_guard<std::mutex> lock(trackMutex_);
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::endCoalescing() {
  group_->endBatch();
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  {
    std::lock_guard<std::mutex> lock(trackMutex_);
    works.swap(coalesced_);
  }
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
                                              group_->setsUpInBackground());
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupUCX::getBackendOptions() {
  return c10::make_intrusive<c10d::Backend::Options>(getBackendName(), timeout_);
}

void ProcessGroupUCX::abort() { group_->abort(); }

void ProcessGroupUCX::shutdown() { group_->shutdown(); }

}  // namespace commux
