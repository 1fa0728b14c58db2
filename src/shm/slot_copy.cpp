#include "shm/slot_copy.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace commux::shm {

void streamCopy(void* to, const void* from, std::size_t bytes) noexcept {
#if defined(__x86_64__)
  auto* d = static_cast<char*>(to);
  const auto* s = static_cast<const char*>(from);
  // Streaming stores need a 16-byte aligned destination; the source may be anywhere.
  std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(d) % 16) % 16;
  if (head > bytes) head = bytes;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const std::size_t body = bytes & ~std::size_t{63};
  for (std::size_t i = 0; i < body; i += 64) {
    // A whole line per iteration: the write-combining buffer sends it out in one go.
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  // Streaming stores are weakly ordered: without the fence a reader that sees this rank's
  // arrival could still read the old bytes.
  _mm_sfence();
  std::memcpy(d + body, s + body, bytes - body);
#else
  std::memcpy(to, from, bytes);
#endif
}

bool CopyChooser::streamNext() noexcept {
  if (mode_ != SlotCopyMode::Auto) return mode_ == SlotCopyMode::Streaming;
  if (burstLeft_ > 0) return trying_;
  if (cost_[0] < 0 || cost_[1] < 0) {
    startTry(cost_[0] >= 0);  // cached first, then streaming
    return trying_;
  }
  const bool stream = chosen();
  if (stream != choice_) {
    // The chosen way's own copies changed the choice: look at the other one again soon.
    choice_ = stream;
    interval_ = kFirstInterval;
    untilTry_ = std::min(untilTry_, interval_);
  }
  if (--untilTry_ == 0) {
    startTry(!stream);
    return trying_;
  }
  return stream;
}

void CopyChooser::startTry(bool streamed) noexcept {
  trying_ = streamed;
  burstLeft_ = kBurst;
  burstBest_ = -1.0;
}

void CopyChooser::record(bool streamed, double nsPerByte) noexcept {
  if (burstLeft_ > 0 && streamed == trying_) {
    if (burstBest_ < 0 || nsPerByte < burstBest_) burstBest_ = nsPerByte;
    if (--burstLeft_ != 0) return;
    const bool wasKnown = cost_[0] >= 0 && cost_[1] >= 0;  // false after the first tries
    cost_[streamed ? 1 : 0] = burstBest_;
    if (cost_[0] >= 0 && cost_[1] >= 0) {
      const bool stream = chosen();
      if (wasKnown) {
        interval_ = stream == choice_ ? std::min(2 * interval_, kLastInterval) : kFirstInterval;
      }
      choice_ = stream;
    }
    untilTry_ = interval_;
    return;
  }
  // The chosen way's estimate: an average of the last few, each counted as at most twice
  // the average, so that one copy slowed by preemption moves it by a quarter and a real
  // change flips the choice within a few copies.
  double& cost = cost_[streamed ? 1 : 0];
  cost += (std::min(nsPerByte, 2 * cost) - cost) / 4;
}

void SlotCopy::copy(void* to, const void* from, std::size_t bytes) noexcept {
  if (bytes < minBytes_) {
    std::memcpy(to, from, bytes);
    return;
  }
  const bool stream = chooser_.streamNext();
  const auto start = std::chrono::steady_clock::now();
  if (stream) {
    streamCopy(to, from, bytes);
  } else {
    std::memcpy(to, from, bytes);
  }
  const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  chooser_.record(stream, took.count() / static_cast<double>(bytes));
}

}  // namespace commux::shm
