// collectives::findRoundClash on hand-made schedules. No shipped algorithm posts two
// transfers with one peer that share a wrapped round out of round order, at any wrap the
// configuration allows (test_schedules.cpp, RoundWrap.*), so the clashes here are made by hand.
#include <gtest/gtest.h>

#include <string>

#include "collectives/round_fit.hpp"

using namespace commux::collectives;

namespace {

Schedule oneStep(std::vector<Transfer> sends, std::vector<Transfer> recvs) {
  Schedule s;
  s.add(Step{std::move(sends), std::move(recvs), RecvMode::Copy});
  return s;
}

Transfer with(int peer, std::uint32_t round) { return Transfer{peer, round, 0, 1}; }

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(RoundFit, RoundsBelowTheWrapAlwaysFit) {
  EXPECT_EQ(findRoundClash(Schedule{}, 2), "");
  // Out of order, but no two share a tag.
  EXPECT_EQ(findRoundClash(oneStep({with(1, 3), with(1, 1)}, {with(1, 2), with(1, 0)}), 4), "");
}

TEST(RoundFit, EqualWrappedRoundsInRoundOrderFit) {
  // The chains' root: every chunk to one peer in one step, 0, 1, ..., 4096, ...
  std::vector<Transfer> chunks;
  for (std::uint32_t i = 0; i < 5000; ++i) chunks.push_back(with(1, i));
  EXPECT_EQ(findRoundClash(oneStep(chunks, {}), 4096), "");
  EXPECT_EQ(findRoundClash(oneStep({}, chunks), 2), "");
  // Across steps too.
  Schedule s;
  for (std::uint32_t k = 0; k < 10; ++k) s.add(Step{{with(1, k)}, {with(1, k)}, RecvMode::Copy});
  EXPECT_EQ(findRoundClash(s, 2), "");
}

TEST(RoundFit, OtherPeersAndDirectionsAreOtherTags) {
  // Round 5 to rank 2 after round 1 to rank 3, and a receive of round 1 after a send of
  // round 5: different sources or contexts in the tag, so no order between them.
  EXPECT_EQ(findRoundClash(oneStep({with(2, 5), with(3, 1)}, {with(2, 1)}), 4), "");
}

TEST(RoundFit, EqualWrappedRoundsOutOfRoundOrderClash) {
  const Schedule sends = oneStep({with(2, 5), with(3, 0), with(2, 1)}, {});
  EXPECT_EQ(findRoundClash(sends, 8), "") << "5 and 1 differ modulo 8";
  const std::string clash = findRoundClash(sends, 4);
  EXPECT_TRUE(has(clash, "step 0 sends round 1 to rank 2 after step 0 sends round 5 to rank 2"))
      << clash;
  EXPECT_TRUE(has(clash, "equal modulo the 4 values of the tag's round field")) << clash;

  Schedule recvs;
  recvs.add(Step{{}, {with(0, 4096)}, RecvMode::Copy});
  recvs.add(Step{{with(0, 1)}, {}, RecvMode::Copy});
  recvs.add(Step{{}, {with(0, 0)}, RecvMode::Copy});
  EXPECT_TRUE(
      has(findRoundClash(recvs, 4096),
          "step 2 receives round 0 from rank 0 after step 0 receives round 4096 from rank 0"));
  EXPECT_EQ(findRoundClash(recvs, 8192), "") << "a wider field tells them apart";
}

TEST(RoundFit, ReportsTheFirstOffenderInPostingOrder) {
  Schedule s;
  s.add(Step{{with(1, 9)}, {with(4, 6)}, RecvMode::Copy});
  s.add(Step{{with(1, 7)}, {with(4, 2)}, RecvMode::Copy});  // 6 then 2 (mod 4) is first
  s.add(Step{{with(1, 5)}, {}, RecvMode::Copy});            // 9, 7, 5 differ mod 4; 9, 5 don't
  EXPECT_TRUE(has(findRoundClash(s, 4), "step 1 receives round 2 from rank 4 after step 0"));
  s.steps[1].recvs.clear();
  EXPECT_TRUE(
      has(findRoundClash(s, 4), "step 2 sends round 5 to rank 1 after step 0 sends round 9"));
}
