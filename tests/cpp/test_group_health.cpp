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
  EXPECT_EQ(health.firstDead(&why), 1);
  EXPECT_EQ(why, "it was found dead");
  EXPECT_EQ(health.deadWhy(2), "its process exited");
  EXPECT_EQ(health.deadRanks(), (std::vector<int>{1, 2}));
  EXPECT_TRUE(health.anyDead());
}

}  // namespace
}  // namespace commux::core
