#pragma once
// Cross-process wake-ups for ranks that share a segment: a waiter polls its condition for
// a short spin, then sleeps in the kernel (futex) until some rank rings. Ringing costs one
// atomic add, plus a system call only while someone sleeps, so busy ranks never enter the
// kernel and idle ones burn no CPU.
#include <chrono>
#include <cstdint>
#include <functional>

namespace commux::shm {

/// Lives inside the shared segment (plain words, zero-initialised by the segment).
struct BellWords {
  std::uint32_t rings;
  std::uint32_t sleepers;
};

class Bell {
 public:
  Bell(BellWords* words, std::chrono::microseconds spin) : w_(words), spin_(spin) {}

  /// Publishes every store made before it, then wakes all sleepers.
  void ring();
  /// Returns once `ready()` holds. `interrupt()` is polled while waiting (at least every
  /// few milliseconds) and ends the wait with false when it returns true.
  bool waitFor(const std::function<bool()>& ready, const std::function<bool()>& interrupt);

 private:
  BellWords* w_;
  std::chrono::microseconds spin_;
};

}  // namespace commux::shm
