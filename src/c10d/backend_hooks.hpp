#pragma once
// What torch 2.15's Backend lets callers attach to a group beyond its operations: abort
// hooks (run before the group aborts), completion hooks (run as each operation completes
// successfully, keyed by the Work's completion key) and ephemeral timeout extensions (added
// to every operation made after them, until the first of those completes). Each operation
// takes a Stamp when it is made; nothing is paid while none is registered.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace commux {

class BackendHooks : public std::enable_shared_from_this<BackendHooks> {
 public:
  using AbortHook = std::function<void()>;
  /// Gets the completion key of an operation that completed successfully.
  using CompletionHook = std::function<void(std::uint64_t key)>;

  void registerAbortHook(std::int64_t id, AbortHook hook);
  void unregisterAbortHook(std::int64_t id);
  /// Runs every abort hook, in registration order of their ids, outside the lock.
  void runAbortHooks() const;

  void registerCompletionHook(std::int64_t id, CompletionHook hook);
  void unregisterCompletionHook(std::int64_t id);

  /// Adds `extra` to the timeout of every operation made from now on, until the first of
  /// them completes (torch's addEphemeralTimeout).
  void addEphemeralTimeout(std::chrono::milliseconds extra);

  /// What one operation takes with it when it is made.
  struct Stamp {
    std::chrono::milliseconds extra{0};  // to add to its timeout
    std::uint64_t key = 0;               // its completion key; 0 when no hook listens
    /// To run once it is done (successful or not); empty when nothing waits for it.
    std::function<void(bool succeeded)> onDone;
  };
  /// Cheap while nothing is registered.
  Stamp stamp();

 private:
  struct Extension {
    std::chrono::milliseconds extra;
    std::shared_ptr<std::atomic<bool>> expired;  // set when its first operation completes
    bool claimed = false;                        // an operation carries `expired`
  };

  mutable std::mutex mutex_;
  std::map<std::int64_t, AbortHook> abortHooks_;
  std::map<std::int64_t, CompletionHook> completionHooks_;
  std::vector<Extension> extensions_;
  std::atomic<bool> active_{false};  // completion hooks or extensions exist
  std::atomic<std::uint64_t> nextKey_{1};
};

}  // namespace commux
