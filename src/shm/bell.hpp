#pragma once
// Cross-process wake-ups for ranks that share a segment: a waiter polls its condition for
// a short spin, then sleeps in the kernel (futex) until some rank rings. Ringing costs one
// atomic add, plus a system call only while someone sleeps, so busy ranks never enter the
// kernel and idle ones burn no CPU.
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

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
  /// few milliseconds); when it returns true, `ready()` is asked once more and the wait ends
  /// with its answer (false also when it raises): an interruption after the thing waited for
  /// came is none.
  virtual bool waitFor(const std::function<bool()>& ready,
                       const std::function<bool()>& interrupt) = 0;
};

/// Whether a wait should poll without yielding first. That pays while this rank has its
/// core to itself: the rank it waits for runs elsewhere, and a yield (a system call) only
/// delays seeing its answer. Where other threads want the core (more ranks than cores, a busy
/// machine), polling keeps them off it. The kernel counts the times a thread was switched
/// out while it could run (its involuntary context switches, which include yields that let
/// another thread run): every kEvery waits, the gate looks at that count and polls while it
/// barely grew.
class PollGate {
 public:
  static constexpr unsigned kEvery = 256;
  static constexpr long kMaxSwitches = kEvery / 16;  // per kEvery waits, to keep polling

  /// `switches`: the calling thread's involuntary context switches so far.
  explicit PollGate(std::function<long()> switches = involuntarySwitches)
      : switches_(std::move(switches)) {}

  bool open();

  static long involuntarySwitches();

 private:
  std::function<long()> switches_;
  unsigned waits_ = 0;
  long last_ = -1;  // the count at the last look, or -1 (none yet, or another thread's)
  std::thread::id thread_;
  bool open_ = true;
};

class Bell final : public Signal {
 public:
  /// A wait polls for `poll` without yielding (while its PollGate says it pays), then for
  /// `spin` yielding between polls, then sleeps.
  Bell(BellWords* words, std::chrono::microseconds spin,
       std::chrono::nanoseconds poll = std::chrono::nanoseconds(0))
      : w_(words), spin_(spin), poll_(poll) {}

  void ring() override;
  bool waitFor(const std::function<bool()>& ready, const std::function<bool()>& interrupt) override;

 private:
  BellWords* w_;
  std::chrono::microseconds spin_;
  std::chrono::nanoseconds poll_;
  PollGate gate_;
};

}  // namespace commux::shm
