// The time estimates of collectives/estimate.hpp: they follow the models they come from,
// grow with the size, and refuse a request no route makes.
#include <gtest/gtest.h>

#include <chrono>

#include "collectives/estimate.hpp"
#include "collectives/schedule.hpp"
#include "collectives/schedule_cost.hpp"
#include "core/error.hpp"

using namespace commux::collectives;

namespace {

EstimateRequest request(Collective c, Path path, int size, std::size_t count,
                        std::size_t es = 4) {
  EstimateRequest r;
  r.collective = c;
  r.path = path;
  r.size = size;
  r.count = count;
  r.elementSize = es;
  return r;
}

}  // namespace

TEST(Estimate, AScheduleCostsWhatItsPlayedScheduleCostsPlusTheCall) {
  Thresholds t;
  const EstimateModel em;
  // The ring of 8 ranks, 1 MiB: the played schedules, and the closed form the selection
  // uses (they agree: "the two agree", selection.hpp), both under the estimate's model.
  const std::size_t n = (1 << 20) / 4;
  EstimateRequest r = request(Collective::Allreduce, Path::Schedule, 8, n);
  r.schedule = "ring";
  const double played =
      predict(8, [&](int k) { return Plan{allreduceRing(k, 8, n, t.pipelineChunkBytes / 4), "ring"}; },
              4, em.ucx)
          .seconds;
  EXPECT_DOUBLE_EQ(estimateSeconds(r, t), played + em.collectiveCall);
  EXPECT_NEAR(played, cost::allreduceRing(em.ucx, 8, 1 << 20), 0.05 * played);
  // Two ranks, 8 bytes, recursive doubling: one exchange and its fold.
  const double small = estimateSeconds(request(Collective::Allreduce, Path::Schedule, 2, 2), t);
  EXPECT_DOUBLE_EQ(small, em.collectiveCall + em.ucx.alpha + em.ucx.gamma + em.ucx.beta * 8 +
                              em.ucx.delta * 8);
  EXPECT_DOUBLE_EQ(estimateMessageSeconds(8),
                   em.messageCall + em.ucx.alpha + em.ucx.gamma + em.ucx.beta * 8);
  // The schedule is the selection's (recursive doubling below its ring threshold), whatever
  // model plays it.
  EstimateModel slow;
  slow.ucx.beta *= 10;
  const EstimateRequest big = request(Collective::Allreduce, Path::Schedule, 8, 1024);
  EXPECT_GT(estimateSeconds(big, t, slow), estimateSeconds(big, t));
}

TEST(Estimate, EveryCollectiveOnEveryPathGrowsWithItsSize) {
  const Thresholds t;
  for (int c = 0; c < static_cast<int>(kCollectives); ++c) {
    const auto collective = static_cast<Collective>(c);
    for (const Algorithm& a : algorithmsOf(collective)) {
      if (a.path == Path::Hierarchical &&
          (collective == Collective::Gather || collective == Collective::Scatter ||
           collective == Collective::Alltoall)) {
        continue;
      }
      for (int p : {2, 3, 8, 13}) {
        SCOPED_TRACE(std::string(nameOf(collective)) + " " + a.name + " p=" + std::to_string(p));
        double before = -1;
        for (std::size_t bytes : {std::size_t{0}, std::size_t{4096}, std::size_t{1} << 22}) {
          EstimateRequest r = request(collective, a.path, p, bytes / 4 / p * p);
          if (a.path == Path::Schedule) r.schedule = a.name;
          if (a.path == Path::Hierarchical) r.hosts = 2;
          if (collective == Collective::Barrier) r.count = 0;
          if ((a.name == std::string("recursive_doubling") && collective == Collective::Allgather &&
               (p & (p - 1)) != 0)) {
            continue;  // recursive doubling of allgather needs a power-of-two group
          }
          const double s = estimateSeconds(r, t);
          EXPECT_GT(s, 0.0);
          if (collective != Collective::Barrier) EXPECT_GE(s, before);
          before = s;
        }
      }
    }
  }
}

TEST(Estimate, OneRankCostsNothingAndABadRequestIsRefused) {
  const Thresholds t;
  EXPECT_EQ(estimateSeconds(request(Collective::Allreduce, Path::Schedule, 1, 1000), t), 0.0);
  EXPECT_EQ(estimateSeconds(request(Collective::Broadcast, Path::SharedMemory, 1, 1000), t), 0.0);
  EstimateRequest r = request(Collective::Broadcast, Path::Schedule, 4, 1000);
  r.root = 4;
  EXPECT_THROW(estimateSeconds(r, t), commux::core::Error);
  EXPECT_THROW(estimateSeconds(request(Collective::Alltoall, Path::Hierarchical, 4, 1000), t),
               commux::core::Error);
}

TEST(Estimate, ALargeGroupIsSampledAndStaysFast) {
  const Thresholds t;
  const auto start = std::chrono::steady_clock::now();
  const double s =
      estimateSeconds(request(Collective::Allreduce, Path::Schedule, 4096, 1 << 24), t);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(s, 0.0);
  EXPECT_LT(elapsed, 5.0);  // sanitized builds included
}
