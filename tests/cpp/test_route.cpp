// The route of a collective (collectives/route.hpp) and the plan functions under a forced
// schedule (selection.hpp): automatic choices, every table name, and the refusals.
#include <gtest/gtest.h>

#include <string>

#include "collectives/route.hpp"
#include "collectives/selection.hpp"
#include "core/error.hpp"

namespace commux::collectives {
namespace {

RouteRequest request(Collective c, bool channel, bool partsPossible, bool partsChosen,
                     std::string_view forced = {}) {
  RouteRequest r;
  r.collective = c;
  r.channel = channel;
  r.partsPossible = partsPossible;
  r.partsChosen = partsChosen;
  r.forced = forced;
  return r;
}

std::string refusal(const RouteRequest& r) {
  try {
    route(r);
  } catch (const core::Error& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::InvalidArgument);
    return e.what();
  }
  return "";
}

TEST(Route, AutomaticallyTheChannelThenPartsThenASchedule) {
  EXPECT_EQ(route(request(Collective::Allreduce, true, false, false)).path, Path::SharedMemory);
  EXPECT_EQ(route(request(Collective::Allreduce, false, true, true)).path, Path::Hierarchical);
  EXPECT_EQ(route(request(Collective::Broadcast, false, true, false)).path, Path::Schedule);
  const Route flat = route(request(Collective::Gather, false, false, false));
  EXPECT_EQ(flat.path, Path::Schedule);
  EXPECT_EQ(flat.schedule, nullptr);
}

TEST(Route, AForcedScheduleWinsOverTheChannel) {
  const Route r = route(request(Collective::Allreduce, true, false, false, "ring"));
  EXPECT_EQ(r.path, Path::Schedule);
  EXPECT_STREQ(r.schedule, "ring");
}

TEST(Route, AForcedPathThatCannotRunHereIsRefusedNamingTheSetting) {
  EXPECT_NE(refusal(request(Collective::Reduce, false, true, true, "shm"))
                .find("COMMUX_ALGORITHM_REDUCE=shm, but no shared-memory channel"),
            std::string::npos);
  EXPECT_NE(refusal(request(Collective::Barrier, true, false, false, "hierarchical"))
                .find("COMMUX_ALGORITHM_BARRIER=hierarchical, but this call cannot run in parts"),
            std::string::npos);
  const std::string unknown =
      refusal(request(Collective::ReduceScatter, true, false, false, "tree"));
  EXPECT_NE(unknown.find("COMMUX_ALGORITHM_REDUCE_SCATTER=tree names no algorithm of "
                         "reduce_scatter (shm, hierarchical, ring, recursive_halving)"),
            std::string::npos)
      << unknown;
  // Gather has no parts at all.
  EXPECT_EQ(findAlgorithm(Collective::Gather, "hierarchical"), nullptr);
}

TEST(Route, EveryScheduleInATableIsBuiltByItsPlanFunctionWhenForced) {
  Thresholds t;
  const auto blocks = [](int size, std::size_t n) {
    std::vector<Range> b;
    for (int r = 0; r < size; ++r) b.push_back({static_cast<std::size_t>(r) * n, n});
    return b;
  };
  for (int size : {2, 3, 4, 8}) {
    for (std::size_t count : {std::size_t{1}, std::size_t{100}, std::size_t{1} << 20}) {
      for (const Algorithm& a : algorithmsOf(Collective::Allreduce)) {
        if (a.path != Path::Schedule) continue;
        t.forced = a.name;
        EXPECT_STREQ(planAllreduce(0, size, count, 4, t).algorithm, a.name);
      }
      for (const Algorithm& a : algorithmsOf(Collective::Broadcast)) {
        if (a.path != Path::Schedule) continue;
        t.forced = a.name;
        EXPECT_STREQ(planBroadcast(1, size, 0, count, 4, t).algorithm, a.name);
      }
      for (const Algorithm& a : algorithmsOf(Collective::Reduce)) {
        if (a.path != Path::Schedule) continue;
        t.forced = a.name;
        EXPECT_STREQ(planReduce(1, size, 0, count, 4, t).algorithm, a.name);
      }
      for (const Algorithm& a : algorithmsOf(Collective::ReduceScatter)) {
        if (a.path != Path::Schedule) continue;
        t.forced = a.name;
        EXPECT_STREQ(planReduceScatter(0, size, blocks(size, count), 4, t).algorithm, a.name);
      }
      for (const Algorithm& a : algorithmsOf(Collective::Allgather)) {
        if (a.path != Path::Schedule) continue;
        t.forced = a.name;
        if (std::string(a.name) == "recursive_doubling" && !isPowerOfTwo(size)) {
          EXPECT_THROW(planAllgather(0, size, blocks(size, count), 4, t), core::Error);
          continue;
        }
        EXPECT_STREQ(planAllgather(0, size, blocks(size, count), 4, t).algorithm, a.name);
      }
      for (const Algorithm& a : algorithmsOf(Collective::Alltoall)) {
        if (a.path != Path::Schedule) continue;
        t.forced = a.name;
        const auto send = blocks(size, count);
        auto recv = send;
        for (auto& r : recv) r.offset += count * static_cast<std::size_t>(size);
        EXPECT_STREQ(planAlltoall(0, size, send, recv, 4, true, true, t).algorithm, a.name);
        if (std::string(a.name) == "bruck") {
          EXPECT_THROW(planAlltoall(0, size, send, recv, 4, true, false, t), core::Error);
        }
      }
    }
  }
}

// What runs only as a schedule (the coalesced calls) takes a forced schedule, keeps the
// automatic one under a forced shm or hierarchical, and refuses an unknown name.
TEST(Route, ScheduleOnlyCallsTakeAForcedScheduleAndNothingElse) {
  EXPECT_EQ(scheduleRoute(Collective::Allreduce, "").path, Path::Schedule);
  EXPECT_EQ(scheduleRoute(Collective::Allreduce, "").schedule, nullptr);
  EXPECT_STREQ(scheduleRoute(Collective::Allreduce, "ring").schedule, "ring");
  EXPECT_STREQ(scheduleRoute(Collective::Allgather, "dissemination").schedule, "dissemination");
  for (const char* where : {"shm", "hierarchical"}) {
    const Route r = scheduleRoute(Collective::ReduceScatter, where);
    EXPECT_EQ(r.path, Path::Schedule) << where;
    EXPECT_EQ(r.schedule, nullptr) << where;
  }
  try {
    scheduleRoute(Collective::Allreduce, "fastest");
    ADD_FAILURE() << "an unknown name was taken";
  } catch (const core::Error& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("COMMUX_ALGORITHM_ALLREDUCE=fastest"), std::string::npos)
        << e.what();
  }
}

TEST(Route, SettingNamesAreTheCollectivesInCapitals) {
  EXPECT_EQ(algorithmSetting(Collective::Alltoall), "COMMUX_ALGORITHM_ALL_TO_ALL");
  EXPECT_EQ(algorithmSetting(Collective::ReduceScatter), "COMMUX_ALGORITHM_REDUCE_SCATTER");
  for (std::size_t i = 0; i < kCollectives; ++i) {
    EXPECT_FALSE(algorithmsOf(static_cast<Collective>(i)).empty());
    EXPECT_STREQ(algorithmsOf(static_cast<Collective>(i)).front().name, "shm");
  }
}

}  // namespace
}  // namespace commux::collectives
