#include "c10d/backend_hooks.hpp"

#include <algorithm>
#include <utility>

namespace commux {

void BackendHooks::registerAbortHook(std::int64_t id, AbortHook hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  abortHooks_[id] = std::move(hook);
}

void BackendHooks::unregisterAbortHook(std::int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  abortHooks_.erase(id);
}

void BackendHooks::runAbortHooks() const {
  std::vector<AbortHook> hooks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : abortHooks_) hooks.push_back(entry.second);
  }
  // A hook that unregisters itself (or another) must not deadlock or skip one.
  for (const auto& hook : hooks) hook();
}

void BackendHooks::registerCompletionHook(std::int64_t id, CompletionHook hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  completionHooks_[id] = std::move(hook);
  active_.store(true, std::memory_order_release);
}

void BackendHooks::unregisterCompletionHook(std::int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  completionHooks_.erase(id);
  active_.store(!completionHooks_.empty() || !extensions_.empty(), std::memory_order_release);
}

void BackendHooks::addEphemeralTimeout(std::chrono::milliseconds extra) {
  if (extra.count() <= 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  extensions_.push_back({extra, std::make_shared<std::atomic<bool>>(false), false});
  active_.store(true, std::memory_order_release);
}

BackendHooks::Stamp BackendHooks::stamp() {
  Stamp stamp;
  if (!active_.load(std::memory_order_acquire)) return stamp;
  std::vector<std::shared_ptr<std::atomic<bool>>> expires;  // extensions this one ends
  {
    std::lock_guard<std::mutex> lock(mutex_);
    extensions_.erase(std::remove_if(extensions_.begin(), extensions_.end(),
                                     [](const Extension& e) { return e.expired->load(); }),
                      extensions_.end());
    for (auto& extension : extensions_) {
      stamp.extra += extension.extra;
      if (!extension.claimed) {
        extension.claimed = true;
        expires.push_back(extension.expired);
      }
    }
    if (!completionHooks_.empty()) stamp.key = nextKey_.fetch_add(1, std::memory_order_relaxed);
    active_.store(!completionHooks_.empty() || !extensions_.empty(), std::memory_order_release);
  }
  if (stamp.key == 0 && expires.empty()) return stamp;
  // Weakly: an operation that outlives its group fires nothing.
  stamp.onDone = [weak = weak_from_this(), key = stamp.key,
                  expires = std::move(expires)](bool succeeded) {
    for (const auto& expired : expires) expired->store(true);
    if (key == 0 || !succeeded) return;  // a failure fires nothing (c10d::CompletionHook)
    const auto self = weak.lock();
    if (!self) return;
    std::vector<CompletionHook> hooks;
    {
      std::lock_guard<std::mutex> lock(self->mutex_);
      for (const auto& entry : self->completionHooks_) hooks.push_back(entry.second);
    }
    for (const auto& hook : hooks) hook(key);
  };
  return stamp;
}

}  // namespace commux
