#pragma once
// The channel's memory, as every rank maps it: a header, one control block per rank, then
// the slots: two parities of one slot per rank, then ChannelShape::depth sets of one small
// slot per rank. Private to steps.cpp and algorithms.cpp.
#include <cstddef>
#include <cstdint>

#include "shm/bell.hpp"
#include "shm/steps.hpp"

namespace commux::shm {
namespace layout {

// Changes whenever the layout does: ranks of different commux builds refuse each other.
constexpr std::uint32_t kMagic = 0x394d4853;  // "SHM9"
constexpr std::size_t kLine = 64;
/// Set in Header::deadRank when that rank left the group rather than died.
constexpr std::uint32_t kLeftBit = 1u << 31;
constexpr std::size_t kPage = 4096;

inline std::size_t roundUp(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

/// Wrap-safe "a is at or past b" for step numbers.
inline bool reached(std::uint32_t a, std::uint32_t b) {
  return static_cast<std::int32_t>(a - b) >= 0;
}

}  // namespace layout

struct alignas(layout::kLine) Steps::Header {
  std::uint32_t magic;
  std::uint32_t size;
  std::uint64_t slotBytes;
  std::uint64_t cma[CmaThresholds::kWords];  // ChannelShape::cma, as words
  std::uint32_t brokenBy;    // 0, or 1 + the rank that abandoned a collective
  std::uint32_t deadRank;    // 0, or 1 + a rank some survivor found dead (| kLeftBit: it
                             // left the group, its process lives on)
  std::uint32_t mismatchBy;  // 0, or 1 + the rank that broke the channel over a mismatch
  std::uint32_t checkAll;    // ChannelShape::checkAll
  std::uint32_t depth;       // ChannelShape::depth
  // A member that left the group (Steps::markLeft): 0, or (1 + its rank) << 32 | the first
  // collective it did no part in; one word, so the first leaver's pair stays whole.
  std::uint64_t left;
  alignas(layout::kLine) BellWords bell;
};

// One per rank, on its own cache lines. Steps a rank has reached in each phase, and what it
// brought to the step (per slot set, so a fast rank's next step never overwrites a
// descriptor a slow rank still compares).
struct alignas(layout::kLine) Steps::Control {
  std::uint32_t arrived;
  std::uint32_t reduced;
  std::uint32_t departed;
  std::uint32_t kind[kMaxDepth];    // shm::Kind
  std::uint32_t reduce[kMaxDepth];  // core::ReduceOp, for the reducing kinds
  std::int32_t root[kMaxDepth];     // for the rooted kinds
  std::uint32_t dtype[kMaxDepth];
  std::uint64_t count[kMaxDepth];    // Job::blockCount()
  std::uint32_t role[kMaxDepth];     // Steps::Role of its first step
  std::int32_t from[kMaxDepth];      // the rank it follows (Role::Follow)
  std::uint32_t steps[kMaxDepth];    // how many steps its collective takes
  std::uint64_t seq[kMaxDepth];      // its collectives on this channel so far, this one included
  std::uint64_t address[kMaxDepth];  // the buffer the others read with CMA
  std::int32_t pid;                  // of the rank's process, for CMA
};

}  // namespace commux::shm
