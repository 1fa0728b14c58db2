#pragma once
// The 64-bit UCX tag every commux message carries.
//
//   63  62           48 47           32 31 30                            0
//  +---+---------------+---------------+--+------------------------------+
//  | K |  context (15) |  source (16)  |  payload (32)                   |
//  +---+---------------+---------------+--+------------------------------+
//
//  K        kind: 0 = user point-to-point (and control notices, below), 1 = collective traffic.
//  context  the RECEIVER's local id for the communicator (process group). Each process
//           numbers its own groups, publishes the id through the group's store, and
//           senders put the receiver's id here. Ids are unique inside a process, so two
//           groups can never match each other's messages, with no global agreement.
//  source   the sender's rank in the group. A receive from any source masks it out.
//  payload  K=0: bit 31 = packing flag (reserved for IOV-coalesced messages; receivers
//                match with it masked so a format mismatch is detected, not a hang),
//                bits 30..0 = the user tag, [0, 2^31-1].
//           K=1: bits 31..12 = collective sequence number (mod 2^20), bits 11..0 = the
//                round inside the collective (mod 2^12).
//
// Control notices (a member's death, relayed between hosts: group/death_relay.hpp) carry
// K=0 and the context kControlContext, which no group is ever given, so no user or
// collective receive can match them; their payload is the receiver's context for the group.
//
// No field overflows silently (docs/design.md, "Tag limits"). Two fields fail before
// anything is sent, two wrap where wrapping is harmless, one is checked at the call:
//  source   a group has at most 2^16 ranks: a larger one fails when it is created
//           (ProcessGroupUCX), before it publishes or sends anything.
//  context  at most 2^15 - 1 groups live in one process: one more fails when it is created
//           (engine::ContextIds), before it publishes anything. A destroyed group's id
//           comes back only after every other id was used, and its queued messages are
//           purged, so nothing addressed to the old group reaches the new one.
//  user tag [0, 2^31-1]; any other tag is refused at the call (c10d/validation.cpp).
//  sequence wraps. Every rank issues a group's collectives in one order and UCX pairs equal
//           tags from one sender in send order, so collectives 2^20 apart meet their own
//           messages as long as one has finished before the other starts on each rank.
//           A collective that failed may leave messages behind; the group then refuses
//           further collectives (core/group_health.hpp), so none is ever matched.
//  round    wraps. Transfers with one peer whose rounds are equal modulo the wrap carry
//           one tag; both ends post them in round order, which is the order UCX pairs
//           them in. Every launch checks this of its schedule and refuses one that breaks
//           it before posting anything (collectives/round_fit.hpp); the simulator shows
//           that no shipped algorithm does, at any wrap (tests/cpp/test_schedules.cpp).
// Tests lower every limit: COMMUX_MAX_RANKS, COMMUX_MAX_CONTEXTS, COMMUX_SEQUENCE_WRAP and
// COMMUX_ROUND_WRAP (commux/options.hpp).
#include <cstdint>

namespace commux::wire {

using Tag = std::uint64_t;

inline constexpr int kKindShift = 63;
inline constexpr int kContextShift = 48;
inline constexpr int kContextBits = 15;
inline constexpr int kSourceShift = 32;
inline constexpr int kSourceBits = 16;
inline constexpr int kPackedShift = 31;
inline constexpr int kRoundBits = 12;
inline constexpr int kSequenceBits = 20;

inline constexpr std::uint32_t kMaxContexts = 1u << kContextBits;
/// The context of control notices; groups get the others (engine::ContextIds).
inline constexpr std::uint32_t kControlContext = kMaxContexts - 1;
inline constexpr std::uint32_t kMaxRanks = 1u << kSourceBits;
inline constexpr std::int64_t kMaxUserTag = (std::int64_t{1} << 31) - 1;

inline constexpr Tag kKindBit = Tag{1} << kKindShift;
inline constexpr Tag kContextMask = Tag{kMaxContexts - 1} << kContextShift;
inline constexpr Tag kSourceMask = Tag{kMaxRanks - 1} << kSourceShift;
inline constexpr Tag kPackedBit = Tag{1} << kPackedShift;
inline constexpr Tag kUserTagMask = (Tag{1} << kPackedShift) - 1;

/// Mask for an exact (context, source, tag) receive that tolerates either packing format.
inline constexpr Tag kExactMask = ~kPackedBit;
/// Mask for a receive from any source.
inline constexpr Tag kAnySourceMask = kExactMask & ~kSourceMask;
/// Mask for collective receives: every bit counts.
inline constexpr Tag kCollectiveMask = ~Tag{0};

static_assert(kContextShift + kContextBits == kKindShift, "context sits right below kind");
static_assert(kSourceShift + kSourceBits == kContextShift, "source sits right below context");
static_assert(kSequenceBits + kRoundBits == 32, "sequence and round fill the payload");
static_assert((kKindBit & kContextMask) == 0 && (kContextMask & kSourceMask) == 0 &&
                  (kSourceMask & (kPackedBit | kUserTagMask)) == 0,
              "fields must not overlap");

constexpr Tag p2pTag(std::uint32_t context, std::uint32_t source, std::uint32_t userTag,
                     bool packed = false) {
  return (Tag{context} << kContextShift) | (Tag{source} << kSourceShift) |
         (packed ? kPackedBit : 0) | (Tag{userTag} & kUserTagMask);
}

constexpr Tag collectiveTag(std::uint32_t context, std::uint32_t source, std::uint32_t sequence,
                            std::uint32_t round) {
  const Tag payload = (Tag{sequence & ((1u << kSequenceBits) - 1)} << kRoundBits) |
                      Tag{round & ((1u << kRoundBits) - 1)};
  return kKindBit | (Tag{context} << kContextShift) | (Tag{source} << kSourceShift) | payload;
}

/// A control notice for the group whose context at the receiver is `context`.
constexpr Tag controlTag(std::uint32_t context, std::uint32_t source) {
  return (Tag{kControlContext} << kContextShift) | (Tag{source} << kSourceShift) | Tag{context};
}
/// Mask for all of a group's control notices, whoever sent them (the purge at its end).
inline constexpr Tag kControlMask = ~kSourceMask;

constexpr bool isCollective(Tag tag) { return (tag & kKindBit) != 0; }
constexpr std::uint32_t contextOf(Tag tag) {
  return static_cast<std::uint32_t>((tag & kContextMask) >> kContextShift);
}
constexpr std::uint32_t sourceOf(Tag tag) {
  return static_cast<std::uint32_t>((tag & kSourceMask) >> kSourceShift);
}
constexpr std::uint32_t userTagOf(Tag tag) { return static_cast<std::uint32_t>(tag & kUserTagMask); }
constexpr bool isPacked(Tag tag) { return (tag & kPackedBit) != 0; }

static_assert(sourceOf(p2pTag(3, 65535, 7)) == 65535);
static_assert(userTagOf(p2pTag(3, 1, 0x7fffffff)) == 0x7fffffff);
static_assert(!isCollective(p2pTag(kMaxContexts - 1, kMaxRanks - 1, 0x7fffffff, true)));
static_assert(isCollective(collectiveTag(0, 0, 0, 0)));

}  // namespace commux::wire
