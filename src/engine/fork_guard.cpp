#include "engine/fork_guard.hpp"

#include <pthread.h>

#include <atomic>
#include <mutex>
#include <system_error>

namespace commux::engine {

std::atomic<std::uint32_t> detail::forkGeneration{0};

namespace {

// Set once, before the handlers are registered; never changed afterwards.
std::function<void()>* lockAll = nullptr;
std::function<void()>* unlockAll = nullptr;

void prepare() { (*lockAll)(); }
void parent() { (*unlockAll)(); }
void child() {
  detail::forkGeneration.fetch_add(1, std::memory_order_relaxed);
  (*unlockAll)();
}

}  // namespace

void watchForks(std::function<void()> lock, std::function<void()> unlock) {
  static std::once_flag once;
  std::call_once(once, [&] {
    // Never freed: the handlers stay registered for the life of the process.
    lockAll = new std::function<void()>(std::move(lock));
    unlockAll = new std::function<void()>(std::move(unlock));
    if (const int rc = ::pthread_atfork(prepare, parent, child); rc != 0) {
      throw std::system_error(rc, std::generic_category(), "commux: pthread_atfork");
    }
  });
}

}  // namespace commux::engine
