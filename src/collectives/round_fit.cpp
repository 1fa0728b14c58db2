#include "collectives/round_fit.hpp"

#include <algorithm>
#include <tuple>
#include <vector>

namespace commux::collectives {
namespace {

struct Posted {
  bool send;
  int peer;
  std::uint32_t tagRound;  // the round modulo the wrap
  std::size_t order;       // position in posting order
  std::uint32_t round;
  std::size_t step;

  auto key() const { return std::make_tuple(send, peer, tagRound, order); }
};

std::string describe(const Posted& later, const Posted& earlier, std::uint32_t roundWrap) {
  const std::string verb = later.send ? " sends round " : " receives round ";
  const std::string peer = (later.send ? " to rank " : " from rank ") + std::to_string(later.peer);
  return "step " + std::to_string(later.step) + verb + std::to_string(later.round) + peer +
         " after step " + std::to_string(earlier.step) + verb + std::to_string(earlier.round) +
         peer + "; the two rounds are equal modulo the " + std::to_string(roundWrap) +
         " values of the tag's round field, so the other end could pair them crosswise";
}

}  // namespace

std::string findRoundClash(const Schedule& s, std::uint32_t roundWrap) {
  // Rounds below the wrap are their own tag: nothing to order (every launch passes here
  // but those of collectives with thousands of rounds, so this path allocates nothing).
  if (maxRound(s) < roundWrap) return "";
  const std::uint32_t mask = roundWrap - 1;
  std::vector<Posted> posted;
  std::size_t order = 0;
  for (std::size_t k = 0; k < s.steps.size(); ++k) {
    for (const auto& t : s.steps[k].sends)
      posted.push_back({true, t.peer, t.round & mask, order++, t.round, k});
    for (const auto& t : s.steps[k].recvs)
      posted.push_back({false, t.peer, t.round & mask, order++, t.round, k});
  }
  std::sort(posted.begin(), posted.end(),
            [](const Posted& a, const Posted& b) { return a.key() < b.key(); });
  // Report the first offender in posting order.
  const Posted* later = nullptr;
  const Posted* earlier = nullptr;
  for (std::size_t i = 1; i < posted.size(); ++i) {
    const Posted& a = posted[i - 1];
    const Posted& b = posted[i];
    if (a.send != b.send || a.peer != b.peer || a.tagRound != b.tagRound || b.round >= a.round)
      continue;
    if (later == nullptr || b.order < later->order) {
      later = &b;
      earlier = &a;
    }
  }
  return later == nullptr ? "" : describe(*later, *earlier, roundWrap);
}

}  // namespace commux::collectives
