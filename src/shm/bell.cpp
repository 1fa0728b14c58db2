#include "shm/bell.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <thread>

namespace commux::shm {
namespace {

// Process-shared futexes (no FUTEX_PRIVATE_FLAG): the word lives in a shared mapping.
void futexWait(std::uint32_t* word, std::uint32_t expected, long timeoutNs) {
  timespec ts{0, timeoutNs};
  ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWakeAll(std::uint32_t* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

constexpr long kSliceNs = 20 * 1000 * 1000;  // how often a sleeper checks interrupt()

}  // namespace

void Bell::ring() {
  // seq_cst on both sides: either the ringer sees the sleeper's count, or the sleeper (who
  // counts itself before re-checking) sees the state this ring publishes.
  __atomic_add_fetch(&w_->rings, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&w_->sleepers, __ATOMIC_SEQ_CST) != 0) futexWakeAll(&w_->rings);
}

bool Bell::waitFor(const std::function<bool()>& ready, const std::function<bool()>& interrupt) {
  if (ready()) return true;
  // Spin, yielding the core: ranks often share cores, and a peer that cannot run cannot
  // ring.
  const auto spinEnd = std::chrono::steady_clock::now() + spin_;
  for (unsigned pass = 1;; ++pass) {
    if (ready()) return true;
    if ((pass & 63u) == 0) {
      if (interrupt()) return false;
      if (std::chrono::steady_clock::now() >= spinEnd) break;
    }
    std::this_thread::yield();
  }
  for (;;) {
    const std::uint32_t seen = __atomic_load_n(&w_->rings, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&w_->sleepers, 1, __ATOMIC_SEQ_CST);
    if (!ready()) futexWait(&w_->rings, seen, kSliceNs);
    __atomic_sub_fetch(&w_->sleepers, 1, __ATOMIC_SEQ_CST);
    if (ready()) return true;
    if (interrupt()) return false;
  }
}

}  // namespace commux::shm
