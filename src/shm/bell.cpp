#include "shm/bell.hpp"

#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

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

// Tells the core this is a wait loop: the sibling hyperthread runs, and leaving the loop
// costs no pipeline flush.
inline void cpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

constexpr long kSliceNs = 20 * 1000 * 1000;  // how often a sleeper checks interrupt()

// Asked once more after an interruption: what the wait was for may have come between the
// last look and the cause. This rank had read a neighbour's message; after the waiter's last
// look the neighbour read this rank's, ended its step and left its group: it looks dead,
// yet the step is whole. A condition that raises now (a copy from a process that is gone)
// is the interruption's to report.
bool settled(const std::function<bool()>& ready) {
  try {
    return ready();
  } catch (...) {
    return false;
  }
}

}  // namespace

long PollGate::involuntarySwitches() {
  rusage usage{};
  return ::getrusage(RUSAGE_THREAD, &usage) == 0 ? usage.ru_nivcsw : 0;
}

bool PollGate::open() {
  if (++waits_ < kEvery) return open_;
  waits_ = 0;
  const long now = switches_();
  // The channel's runner may be another thread than at the last look (a waiter or the
  // lane's thread): its count says nothing about this one's.
  if (std::this_thread::get_id() == thread_ && last_ >= 0) open_ = now - last_ <= kMaxSwitches;
  thread_ = std::this_thread::get_id();
  last_ = now;
  return open_;
}

void Bell::ring() {
  // seq_cst on both sides: either the ringer sees the sleeper's count, or the sleeper (who
  // counts itself before re-checking) sees the state this ring publishes.
  __atomic_add_fetch(&w_->rings, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&w_->sleepers, __ATOMIC_SEQ_CST) != 0) futexWakeAll(&w_->rings);
}

bool Bell::waitFor(const std::function<bool()>& ready, const std::function<bool()>& interrupt) {
  if (ready()) return true;
  if (poll_.count() > 0 && gate_.open()) {
    const auto pollEnd = std::chrono::steady_clock::now() + poll_;
    for (unsigned pass = 1;; ++pass) {
      if (ready()) return true;
      cpuRelax();
      if ((pass & 15u) == 0 && std::chrono::steady_clock::now() >= pollEnd) break;
    }
  }
  // Spin, yielding the core: ranks often share cores, and a peer that cannot run cannot
  // ring.
  const auto spinEnd = std::chrono::steady_clock::now() + spin_;
  for (unsigned pass = 1;; ++pass) {
    if (ready()) return true;
    if ((pass & 63u) == 0) {
      if (interrupt()) return settled(ready);
      if (std::chrono::steady_clock::now() >= spinEnd) break;
    }
    std::this_thread::yield();
  }
  for (;;) {
    const std::uint32_t seen = __atomic_load_n(&w_->rings, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&w_->sleepers, 1, __ATOMIC_SEQ_CST);
    bool now = false;
    try {
      now = ready();
    } catch (...) {
      // A condition that raises (a failed copy) must not leave this waiter counted: every
      // later ring would enter the kernel.
      __atomic_sub_fetch(&w_->sleepers, 1, __ATOMIC_SEQ_CST);
      throw;
    }
    if (!now) futexWait(&w_->rings, seen, kSliceNs);
    __atomic_sub_fetch(&w_->sleepers, 1, __ATOMIC_SEQ_CST);
    if (ready()) return true;
    if (interrupt()) return settled(ready);
  }
}

}  // namespace commux::shm
