// ProcessGroupUCX: the group's life beyond single operations: coalescing windows,
// splitting off subgroups, shrinking to the survivors of a failure, abort and shutdown.
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <string>

#include "c10d/backend_hooks.hpp"
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
    for (const c10::ArrayRef<at::Tensor> tensors :
         {c10::ArrayRef<at::Tensor>(request.outputs()), request.reads()}) {
      for (const auto& t : tensors) {
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

#ifdef COMMUX_TORCH_HAS_MERGE
c10::intrusive_ptr<c10d::Backend> ProcessGroupUCX::merge(
    const c10::intrusive_ptr<c10d::Store>& store,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts, const int& rank, const int& size) {
  checkUsable();
  TORCH_CHECK_VALUE(store, "commux: merge: no store given");
  TORCH_CHECK_VALUE(size >= 1, "commux: merge: the merged group's size must be at least 1, not ",
                    size);
  TORCH_CHECK_VALUE(rank >= 0 && rank < size, "commux: merge: this process came as number ",
                    rank, " to a merge into a group of ", size,
                    ": more processes merge over this store than the size they all passed");
  const auto timeout = opts && opts->timeout.count() > 0 ? opts->timeout : timeout_;
  // Not named by the group: each process merges a group of its own, whose names differ.
  // torch numbers the processes with a counter at the store's root, so a store serves one
  // merge (a second one's ranks start past its size, and are refused above).
  auto merged = c10::make_intrusive<c10d::PrefixStore>("commux/merge/", store);
  return c10::make_intrusive<ProcessGroupUCX>(merged, rank, size, timeout,
                                              group_->setsUpInBackground());
}
#endif

#ifdef COMMUX_TORCH_HAS_SHRINK
c10::intrusive_ptr<c10d::Backend> ProcessGroupUCX::shrink(
    const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
    const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) {
  constexpr int kShrinkAbort = 0x01;  // torch's SHRINK_ABORT
  TORCH_CHECK_VALUE((shrinkFlags & ~kShrinkAbort) == 0, "commux: shrink: flags ", shrinkFlags,
                    " are not SHRINK_DEFAULT (0) or SHRINK_ABORT (1)");
  std::vector<bool> excluded(static_cast<std::size_t>(size_), false);
  for (const int64_t r : ranksToExclude) {
    TORCH_CHECK_VALUE(r >= 0 && r < size_, "commux: shrink: rank ", r,
                      " is not a rank of this group of ", size_);
    TORCH_CHECK_VALUE(!excluded[static_cast<std::size_t>(r)], "commux: shrink: rank ", r,
                      " is excluded twice");
    excluded[static_cast<std::size_t>(r)] = true;
  }
  TORCH_CHECK_VALUE(!excluded[static_cast<std::size_t>(rank_)], "commux: shrink: this rank (",
                    rank_, ") is among the excluded; only the survivors call shrink");
  std::vector<int> survivors;
  for (int r = 0; r < size_; ++r) {
    if (!excluded[static_cast<std::size_t>(r)]) survivors.push_back(r);
  }
  // Its own operations in flight would wait for the excluded ranks; SHRINK_ABORT ends them.
  // The group itself stays as it is otherwise (torch destroys it after this call).
  if ((shrinkFlags & kShrinkAbort) != 0) abort();
  const auto timeout =
      optsOverride && optsOverride->timeout.count() > 0 ? optsOverride->timeout : timeout_;
  // The k-th shrink of this group on every survivor meets under the same prefix; the
  // excluded ranks never write there, and a later shrink of the shrunk group nests its own.
  const std::uint64_t k = shrinks_.fetch_add(1);
  std::string prefix = "commux/shrink/" + std::to_string(k) + "/";
  for (const int r : survivors) prefix += std::to_string(r) + ",";
  auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
  const auto me = std::find(survivors.begin(), survivors.end(), rank_);
  return c10::make_intrusive<ProcessGroupUCX>(store, static_cast<int>(me - survivors.begin()),
                                              static_cast<int>(survivors.size()), timeout,
                                              group_->setsUpInBackground());
}
#endif

void ProcessGroupUCX::connect(std::chrono::milliseconds timeout) {
  group_->connectAll(timeout.count() >= 0 ? timeout : timeout_);
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupUCX::getBackendOptions() {
  return c10::make_intrusive<c10d::Backend::Options>(getBackendName(), timeout_);
}

void ProcessGroupUCX::abort() {
  hooks_->runAbortHooks();
  group_->abort();
}

#ifdef C10D_BACKEND_HAS_HOOKS
void ProcessGroupUCX::registerAbortHook(int64_t hookId, c10d::AbortHook hook) {
  hooks_->registerAbortHook(hookId, std::move(hook));
}

void ProcessGroupUCX::unregisterAbortHook(int64_t hookId) { hooks_->unregisterAbortHook(hookId); }
#endif

#ifdef COMMUX_TORCH_HAS_COMPLETION_HOOKS
void ProcessGroupUCX::registerCompletionHook(int64_t hookId, c10d::CompletionHook hook) {
  hooks_->registerCompletionHook(hookId, [hook = std::move(hook)](std::uint64_t key) {
    c10d::CompletionHookArgs args;
    args.completionKey = key;
    hook(args);
  });
}

void ProcessGroupUCX::unregisterCompletionHook(int64_t hookId) {
  hooks_->unregisterCompletionHook(hookId);
}
#endif

#ifdef COMMUX_TORCH_HAS_EPHEMERAL_TIMEOUT
void ProcessGroupUCX::addEphemeralTimeout(const std::chrono::milliseconds& timeout) {
  hooks_->addEphemeralTimeout(timeout);
}
#endif

void ProcessGroupUCX::shutdown() { group_->shutdown(); }

}  // namespace commux
