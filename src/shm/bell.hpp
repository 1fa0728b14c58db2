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

/// How the ranks of a channel tell each other they moved, and wait for each other: the
/// futex Bell between processes; a deterministic scheduler in the step protocol's
/// interleaving test (tests/cpp/test_step_interleavings.cpp), which takes its turns here.
class Signal {
 public:
  virtual ~Signal() = default;
  /// Publishes every store made before it, then wakes all sleepers.
  virtual void ring() = 0;
  /// Returns once `ready()` holds. `interrupt()` is polled while waiting (at least every
  /// few milliseconds) and ends the wait with false when it returns true.
  virtual bool waitFor(const std::function<bool()>& ready,
                       const std::function<bool()>& interrupt) = 0;
};

class Bell final : public Signal {
 public:
  Bell(BellWords* words, std::chrono::microseconds spin) : w_(words), spin_(spin) {}

  void ring() override;
  bool waitFor(const std::function<bool()>& ready,
               const std::function<bool()>& interrupt) override;

 private:
  BellWords* w_;
  std::chrono::microseconds spin_;
};

}  // namespace commux::shm
