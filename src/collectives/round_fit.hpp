#pragma once
// Whether a schedule survives the tag's round field (wire/tag.hpp), which keeps rounds
// modulo a power of two (4,096; COMMUX_ROUND_WRAP lowers it for tests).
//
// UCX pairs messages of one tag from one sender with the receives of that tag in the order
// both were posted. Two transfers with one peer in one direction whose rounds are equal
// modulo the wrap carry one tag, so they meet their own partners exactly when both ends post
// them in the same order. Every end posting them in the order of their (unwrapped) rounds is
// such an order, and each rank can check it alone: if every rank's schedule passes, every
// message meets its own receive at any wrap. The pipelined chains rely on it (their root
// posts all chunks to one peer in one step, past 4,096 chunks for buffers over 2 GiB).
#include <cstdint>
#include <string>

#include "collectives/schedule.hpp"

namespace commux::collectives {

/// "" when, for every peer and direction, the transfers of `s` whose rounds are equal
/// modulo `roundWrap` (a power of two) are posted (steps in order, each step's sends and
/// receives in list order) with rounds that never decrease; otherwise the first transfer
/// that breaks this, as a sentence for an error message.
std::string findRoundClash(const Schedule& s, std::uint32_t roundWrap);

}  // namespace commux::collectives
