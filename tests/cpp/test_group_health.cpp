// GroupHealth decides from an error's kind whether the group's collectives stay usable.
#include <gtest/gtest.h>

#include <stdexcept>

#include "core/error.hpp"
#include "core/group_health.hpp"

namespace commux::core {
namespace {

TEST(GroupHealth, AnArgumentErrorLeavesTheGroupInStep) {
  GroupHealth health(3);
  health.collectiveFailed(makeError(ErrorKind::InvalidArgument, "sizes differ", COMMUX_SITE));
  EXPECT_FALSE(health.anyCollectiveFailed());
  EXPECT_EQ(health.collectiveFailure(), "");
}

TEST(GroupHealth, AnyOtherErrorStopsCollectivesAndTheFirstReasonIsKept) {
  GroupHealth health(3);
  health.collectiveFailed(makeError(ErrorKind::Backend, "rank 2 died", COMMUX_SITE));
  health.collectiveFailed(std::make_exception_ptr(std::runtime_error("later")));
  EXPECT_TRUE(health.anyCollectiveFailed());
  EXPECT_EQ(health.collectiveFailure(), "rank 2 died");
}

TEST(GroupHealth, DeathsAreRecordedOnceWithTheirReason) {
  GroupHealth health(4);
  EXPECT_TRUE(health.markDead(2, "its process exited"));
  EXPECT_FALSE(health.markDead(2, "again"));
  EXPECT_TRUE(health.markDead(1, ""));
  std::string why;
  // The first one found: the cause, where later ones may be its consequences.
  EXPECT_EQ(health.firstDead(&why), 2);
  EXPECT_EQ(why, "its process exited");
  EXPECT_EQ(health.deadWhy(1), "it was found dead");
  EXPECT_EQ(health.deadRanks(), (std::vector<int>{1, 2}));
  EXPECT_TRUE(health.anyDead());
}

TEST(GroupHealth, AMemberThatLeftFailsOnlyTheCollectivesItHadNotDone) {
  GroupHealth health(4);
  EXPECT_EQ(health.firstDeadFor(7, nullptr), -1);
  // Rank 3 left having done collectives 0..9.
  EXPECT_TRUE(health.markDead(3, std::string(kClosedByPeer) + ": it left", 10));
  std::string why;
  EXPECT_EQ(health.firstDeadFor(9, &why), -1);
  EXPECT_FALSE(health.lostFor(3, 9));
  EXPECT_EQ(health.firstDeadFor(10, &why), 3);
  EXPECT_TRUE(health.lostFor(3, 10));
  EXPECT_TRUE(health.lostFor(3, 11));
  EXPECT_FALSE(health.lostFor(2, 11));
  // Across the wrap of the 32-bit numbering.
  GroupHealth wrapped(2);
  wrapped.markDead(1, "left", 2);
  EXPECT_FALSE(wrapped.lostFor(1, 0xffffffffu));
  EXPECT_TRUE(wrapped.lostFor(1, 2));
  // A death fails every collective; it is named first when found first.
  EXPECT_TRUE(health.markDead(0, "its process exited"));
  EXPECT_EQ(health.firstDeadFor(5, &why), 0);
  EXPECT_TRUE(health.lostFor(0, 5));
  EXPECT_EQ(health.firstDeadFor(12, &why), 3);
}

TEST(GroupHealth, AnAnySourceReceiveFailsOnADeathOrWhenEveryOtherMemberIsGone) {
  GroupHealth health(4);  // seen by rank 0
  std::string why;
  EXPECT_EQ(health.firstLostForAnySource(&why), -1);
  // Members that left sent all they will; the one still there may send.
  health.markDead(2, std::string(kClosedByPeer) + ": it left", 3);
  health.markDead(1, std::string(kClosedByPeer) + ": it left", 5);
  EXPECT_EQ(health.firstLostForAnySource(&why), -1);
  // The last other member goes: nobody is left to send; the first found gone is named.
  health.markDead(3, std::string(kClosedByPeer) + ": it left", 1);
  EXPECT_EQ(health.firstLostForAnySource(&why), 2);
  // A death fails it though others remain (the sender it waits for may be the dead one).
  GroupHealth died(3);
  died.markDead(1, std::string(kClosedByPeer) + ": it left", 0);
  died.markDead(2, "its process exited");
  EXPECT_EQ(died.firstLostForAnySource(&why), 2);
  EXPECT_EQ(why, "its process exited");
}

TEST(GroupHealth, ALostMemberIsWordedByHowItWent) {
  EXPECT_EQ(lostMember(2, "its process exited"), "rank 2 died (its process exited)");
  EXPECT_EQ(lostMember(2, ""), "rank 2 died");
  EXPECT_EQ(lostMember(1, std::string(kClosedByPeer) + ": it shut down its process group"),
            "rank 1 left the group (Connection closed by peer: it shut down its process group)");
}

}  // namespace
}  // namespace commux::core
