#pragma once
// What the engine is told about its configuration. The layer above (c10d) reads the
// environment (commux::Config) and passes these in, so the engine never reads settings
// itself and can be built and tested without them.
#include <chrono>
#include <cstdint>

namespace commux::engine {

struct Settings {
  /// How long the progress thread polls after its last event before it sleeps.
  std::chrono::microseconds progressSpin{0};
  /// How long Engine::wait drives the worker itself before it sleeps.
  std::chrono::microseconds waitSpin{100};
  /// How soon the progress thread takes over operations a caller posted and left.
  std::chrono::microseconds handOffDelay{1000};
  /// UCX's network transports on the loopback device only.
  bool loopbackOnly = false;
  /// How many communicator ids (live groups) the process may hold.
  std::uint32_t maxContexts = (1u << 15) - 1;
  /// How dead peers are found: `Auto` (pidfd on this host, UCX's peer error handling
  /// elsewhere), `Ucx` (UCX's for every peer) or `Off`.
  enum class FailureDetection { Auto, Ucx, Off } failureDetection = FailureDetection::Auto;
  /// The longest a sleeper sleeps without a wake-up: the net under a lost one. Tests set it
  /// far above any honest latency, so that a lost wake-up shows as a long wait.
  std::chrono::milliseconds sleepSafetyNet{100};
};

}  // namespace commux::engine
