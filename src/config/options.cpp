#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>
#include <stdexcept>
#include <string>

#include "commux/options.hpp"
#include "wire/tag.hpp"

namespace commux {
namespace {

template <typename T>
void readUnsigned(const char* name, T& out) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(raw, &end, 10);
  if (errno != 0 || end == raw || *end != '\0' || raw[0] == '-') {
    throw std::invalid_argument(std::string(name) + "='" + raw +
                                "' is not a non-negative integer");
  }
  if (value > static_cast<unsigned long long>(std::numeric_limits<T>::max())) {
    throw std::invalid_argument(std::string(name) + "='" + raw + "' is too large (at most " +
                                std::to_string(std::numeric_limits<T>::max()) + ")");
  }
  out = static_cast<T>(value);
}

/// A size or count in [lo, hi]; `unit` names what it counts in the error.
template <typename T>
void readInRange(const char* name, T& out, unsigned long long lo, unsigned long long hi,
                 const char* unit) {
  T value = out;
  readUnsigned(name, value);
  const auto v = static_cast<unsigned long long>(value);
  if (v < lo || v > hi) {
    throw std::invalid_argument(std::string(name) + "=" + std::to_string(v) + " is outside [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "] " + unit);
  }
  out = value;
}

/// The limits of the tag's fields (wire/tag.hpp): tests lower them, nothing raises them.
void readBounded(const char* name, std::uint32_t& out, std::uint32_t lo, std::uint32_t hi) {
  unsigned long long value = out;
  readUnsigned(name, value);
  if (value < lo || value > hi) {
    throw std::invalid_argument(std::string(name) + "=" + std::to_string(value) + " is outside [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]" +
                                (value > hi ? ": the tag's field holds no more" : ""));
  }
  out = static_cast<std::uint32_t>(value);
}

void readPowerOfTwo(const char* name, std::uint32_t& out, std::uint32_t lo, std::uint32_t hi) {
  readBounded(name, out, lo, hi);
  if ((out & (out - 1)) != 0) {
    throw std::invalid_argument(std::string(name) + "=" + std::to_string(out) +
                                " is not a power of two");
  }
}

// A wait longer than a minute is a mistake, not a tuning (and would overflow the clock's
// arithmetic further up).
constexpr unsigned long long kMaxMicros = 60'000'000;
// Sizes beyond 1 GiB overflow nothing here, but the segment and buffers they size would
// exhaust memory first; refused with their name rather than as a failed allocation.
constexpr unsigned long long kMaxBytes = 1ULL << 30;
// A threshold ("from this size on") sizes nothing: any value up to 2^62 is a size no
// message reaches, the way to say "never".
constexpr unsigned long long kMaxThreshold = 1ULL << 62;

void readMicros(const char* name, std::chrono::microseconds& out) {
  long long us = out.count();
  readInRange(name, us, 0, kMaxMicros, "microseconds");
  out = std::chrono::microseconds(us);
}

void readBool(const char* name, bool& out) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return;
  const std::string v(raw);
  if (v == "1" || v == "true" || v == "on" || v == "yes") {
    out = true;
  } else if (v == "0" || v == "false" || v == "off" || v == "no") {
    out = false;
  } else {
    throw std::invalid_argument(std::string(name) + "='" + raw +
                                "' is not a boolean (use 1, true, on or yes; 0, false, off or no)");
  }
}

/// One of a few named values; `listing` names them for the error.
template <typename E>
void readChoice(const char* name, E& out,
                std::initializer_list<std::pair<const char*, E>> choices, const char* listing) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return;
  for (const auto& [word, value] : choices) {
    if (std::strcmp(raw, word) == 0) {
      out = value;
      return;
    }
  }
  throw std::invalid_argument(std::string(name) + "='" + raw + "' is not " + listing);
}

}  // namespace

Config Config::fromEnvironment() {
  Config c;
  readMicros("COMMUX_PROGRESS_SPIN_US", c.progressSpin);
  readMicros("COMMUX_WAIT_SPIN_US", c.waitSpin);
  readMicros("COMMUX_HANDOFF_DELAY_US", c.handOffDelay);
  readBool("COMMUX_COALESCE", c.coalesce);
  readBool("COMMUX_GROUP", c.group);
  readInRange("COMMUX_ALLREDUCE_RING_MIN_BYTES", c.allreduceRingMinBytes, 0, kMaxThreshold, "bytes");
  readInRange("COMMUX_CHAIN_MIN_BYTES", c.chainMinBytes, 0, kMaxThreshold, "bytes");
  readInRange("COMMUX_PIPELINE_CHUNK_BYTES", c.pipelineChunkBytes, 1, kMaxBytes, "bytes");
  readInRange("COMMUX_CUDA_CHUNK_BYTES", c.cudaChunkBytes, 1, kMaxBytes, "bytes");
  readInRange("COMMUX_LOG_ALGORITHMS_MIN_RANKS", c.logAlgorithmsMinRanks, 0, wire::kMaxRanks + 1,
              "ranks");
  readInRange("COMMUX_RING_MIN_BLOCK_BYTES", c.ringMinBlockBytes, 0, kMaxThreshold, "bytes");
  readBool("COMMUX_SHM", c.shm);
  readBool("COMMUX_WINDOW_SHARE", c.windowShare);
  readInRange("COMMUX_SHM_SLOT_BYTES", c.shmSlotBytes, 0, 256ULL << 20, "bytes (0: chosen per group)");
  {
    unsigned long long depth = 0;  // unset or 0: chosen per group
    readUnsigned("COMMUX_SHM_DEPTH", depth);
    if (depth != 0 && (depth < 2 || depth > 16 || (depth & (depth - 1)) != 0)) {
      throw std::invalid_argument("COMMUX_SHM_DEPTH=" + std::to_string(depth) +
                                  " is not 2, 4, 8 or 16 (or 0: chosen per group)");
    }
    c.shmDepth = static_cast<std::uint32_t>(depth);
  }
  readInRange("COMMUX_SHM_SMALL_BYTES", c.shmSmallBytes, 0, 1ULL << 20, "bytes (0: no small slots)");
  readInRange("COMMUX_SHM_CMA_BYTES", c.shmCmaBytes, 0, kMaxThreshold, "bytes (0: off)");
  readMicros("COMMUX_SHM_SPIN_US", c.shmSpin);
  if (const char* raw = std::getenv("COMMUX_SHM_POLL_NS"); raw != nullptr && *raw != '\0') {
    long long ns = 0;
    readInRange("COMMUX_SHM_POLL_NS", ns, 0, 1'000'000'000, "nanoseconds");
    c.shmPoll = std::chrono::nanoseconds(ns);
  }
  readChoice("COMMUX_SHM_STREAM", c.shmStream,
             {{"auto", ShmStream::Auto}, {"on", ShmStream::On}, {"1", ShmStream::On},
              {"off", ShmStream::Off}, {"0", ShmStream::Off}},
             "auto, on or off");
  if (const char* debug = std::getenv("TORCH_DISTRIBUTED_DEBUG"); debug != nullptr) {
    c.checkCollectives = std::strcmp(debug, "DETAIL") == 0;
  }
  readBool("COMMUX_CHECK_COLLECTIVES", c.checkCollectives);
  if (const char* raw = std::getenv("COMMUX_HOST"); raw != nullptr) c.host = raw;
  readChoice("COMMUX_HIERARCHY", c.hierarchy,
             {{"auto", Hierarchy::Auto}, {"leader", Hierarchy::Leader},
              {"parallel", Hierarchy::Parallel}, {"off", Hierarchy::Off}, {"0", Hierarchy::Off}},
             "auto, leader, parallel or off");
  readInRange("COMMUX_HIERARCHY_PARALLEL_MIN_BYTES", c.hierarchyParallelMinBytes, 0, kMaxThreshold, "bytes");
  readInRange("COMMUX_HIERARCHY_MIN_BYTES", c.hierarchyMinBytes, 0, kMaxThreshold, "bytes");
  readChoice("COMMUX_FAILURE_DETECTION", c.failureDetection,
             {{"auto", FailureDetection::Auto}, {"ucx", FailureDetection::Ucx},
              {"off", FailureDetection::Off}, {"0", FailureDetection::Off}},
             "auto, ucx or off");
  {
    const char* world = std::getenv("WORLD_SIZE");
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    const auto unset = [](const char* name) {
      const char* v = std::getenv(name);
      return v == nullptr || *v == '\0';
    };
    c.loopbackOnly = world != nullptr && local != nullptr && *world != '\0' &&
                     std::string(world) == local && unset("UCX_NET_DEVICES") && unset("UCX_TLS");
    readBool("COMMUX_LOOPBACK_ONLY", c.loopbackOnly);
  }
  readPowerOfTwo("COMMUX_SEQUENCE_WRAP", c.sequenceWrap, 2, 1u << wire::kSequenceBits);
  readPowerOfTwo("COMMUX_ROUND_WRAP", c.roundWrap, 2, 1u << wire::kRoundBits);
  readBounded("COMMUX_MAX_RANKS", c.maxRanks, 1, wire::kMaxRanks);
  readBounded("COMMUX_MAX_CONTEXTS", c.maxContexts, 1, wire::kControlContext);
  c.shmSlotBytes = (c.shmSlotBytes + 4095) / 4096 * 4096;  // 0 stays 0: chosen per group
  return c;
}

const Config& Config::get() {
  static const Config config = fromEnvironment();
  return config;
}

}  // namespace commux
