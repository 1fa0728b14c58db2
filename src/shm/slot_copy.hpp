#pragma once
// How a rank writes a large piece into its shared-memory slot for the others to read.
//
// A plain memcpy writes through the cache: each line must first be taken from the readers'
// caches, which still hold it from the previous step on the same slot. On this project's
// 2-vCPU VM that ownership transfer has stretches of seconds where it costs 5-15x more (a
// 2-rank 4 MiB alltoall took 1.2 ms instead of 0.3 ms; docs/performance-log.md, 2026-12-04
// 17:00-18:00). Non-temporal (streaming) stores skip it and write whole lines to memory, but
// then readers read from memory, which costs more when the ownership transfer is cheap.
// So by default each process times its large copies and keeps whichever way is faster now,
// trying the other one now and then.
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace commux::shm {

/// Copies `bytes` from `from` to `to` with non-temporal stores where the CPU has them
/// (x86-64), then fences, so that the copy is visible before any later store (the step's
/// arrival). Plain memcpy elsewhere.
void streamCopy(void* to, const void* from, std::size_t bytes) noexcept;

/// COMMUX_SHM_STREAM: which copy large slot writes use.
enum class SlotCopyMode { Auto, Cached, Streaming };

/// The choice between cached and streaming copies, from timings (no clock inside, so that
/// it can be tested step by step). One per process and channel, used by one thread at a time.
///
/// Each way is first tried for a short burst, then the chosen way's copies keep its estimate
/// current, and now and then a burst of the other way renews that one. A burst's best copy
/// counts: its first copies pay for the state the other way left (after streaming, a cached
/// write finds no line in any cache), which would otherwise lock the choice in.
class CopyChooser {
 public:
  /// Copies per try of a way.
  static constexpr std::uint32_t kBurst = 4;
  /// Copies between tries of the way not chosen: the first interval, doubled while tries
  /// confirm the choice, up to the last, and back to the first when the choice changes.
  static constexpr std::uint32_t kFirstInterval = 128;
  static constexpr std::uint32_t kLastInterval = 2048;
  /// Streaming is chosen when cached copies take this many times longer. A writer times
  /// only its own copy, and a streamed piece costs its readers more (they read it from
  /// memory): in the stretches this is for, cached copies were 5-15x slower (9x by the
  /// chooser's own estimates); otherwise the two ways measure about alike.
  static constexpr double kStreamFactor = 3.0;

  explicit CopyChooser(SlotCopyMode mode) noexcept : mode_(mode) {}
  /// Whether the next large copy streams.
  bool streamNext() noexcept;
  /// What a large copy that streamed (or not) took, per byte.
  void record(bool streamed, double nsPerByte) noexcept;
  /// The current estimates, in ns per byte (negative: no sample yet).
  double estimate(bool streamed) const noexcept { return cost_[streamed ? 1 : 0]; }

 private:
  bool chosen() const noexcept { return cost_[0] > kStreamFactor * cost_[1]; }
  void startTry(bool streamed) noexcept;

  SlotCopyMode mode_;
  double cost_[2] = {-1.0, -1.0};  // [cached, streaming]
  bool choice_ = false;            // the way chosen at the last copy outside a try
  bool trying_ = false;            // the way a burst tries
  std::uint32_t burstLeft_ = 0;    // copies left in the current try
  double burstBest_ = 0;
  std::uint32_t interval_ = kFirstInterval;
  std::uint32_t untilTry_ = kFirstInterval;
};

/// Writes pieces into slots: below `minBytes` always by memcpy (a small piece's lines are
/// few, and a reader finds them in the cache), above it as the chooser says.
class SlotCopy {
 public:
  static constexpr std::size_t kMinBytes = 64 * 1024;

  explicit SlotCopy(SlotCopyMode mode, std::size_t minBytes = kMinBytes) noexcept
      : chooser_(mode), minBytes_(minBytes) {}
  void copy(void* to, const void* from, std::size_t bytes) noexcept;
  const CopyChooser& chooser() const noexcept { return chooser_; }

 private:
  CopyChooser chooser_;
  std::size_t minBytes_;
};

}  // namespace commux::shm
