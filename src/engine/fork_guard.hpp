#pragma once
// fork() and commux: a child of a process that has groups inherits their memory but none
// of their threads, and shares their UCX worker, sockets and shared-memory slots with the
// parent. Nothing made before the fork may be used, joined or freed in the child.
#include <atomic>
#include <cstdint>
#include <functional>

namespace commux::engine {

namespace detail {
extern std::atomic<std::uint32_t> forkGeneration;  // written only by the atfork child handler
}

/// How many fork()s this process is a child of since commux was loaded (0 in the process
/// that loaded it). Whatever was made under another number belongs to an ancestor. Inline:
/// every operation asks.
inline std::uint32_t forkGeneration() noexcept {
  return detail::forkGeneration.load(std::memory_order_relaxed);
}

/// Registers the fork handlers (once per process; later calls do nothing). `lock` and
/// `unlock` are called around every fork in the parent, and `unlock` again in the child,
/// so that locks the child needs are never inherited held by a thread it does not have.
void watchForks(std::function<void()> lock, std::function<void()> unlock);

}  // namespace commux::engine
