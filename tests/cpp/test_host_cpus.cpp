// Whether a host's ranks outnumber the CPUs they may run on together.
#include <gtest/gtest.h>
#include <sched.h>

#include <sstream>

#include "shm/host_cpus.hpp"

using commux::shm::cpuList;
using commux::shm::crowdedBy;

TEST(HostCpus, RanksBoundToACoreEachAreNotCrowded) {
  // mpirun's default for 2 ranks on 2 cores: each rank sees one CPU, its own.
  EXPECT_FALSE(crowdedBy({"0 ", "1 "}));
  EXPECT_FALSE(crowdedBy({"0 1 ", "0 1 "}));
  EXPECT_FALSE(crowdedBy({"4 ", "5 ", "6 ", "7 "}));
}

TEST(HostCpus, MoreRanksThanTheirCpusAreCrowded) {
  EXPECT_TRUE(crowdedBy({"0 1 ", "0 1 ", "0 1 "}));
  EXPECT_TRUE(crowdedBy({"0 ", "0 "})) << "two ranks bound to one core";
  EXPECT_TRUE(crowdedBy({"0 1 ", "1 ", "0 "}));
}

TEST(HostCpus, UnreadableMasksCountAsNoCpus) {
  EXPECT_FALSE(crowdedBy({""})) << "one rank always has a CPU";
  EXPECT_TRUE(crowdedBy({"", ""}));
  EXPECT_TRUE(crowdedBy({"0 ", ""}));
}

TEST(HostCpus, CpuListIsThisProcesssMask) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  std::istringstream in(cpuList());
  int listed = 0;
  for (int c = 0; in >> c; ++listed) EXPECT_TRUE(CPU_ISSET(c, &cpus)) << c;
  EXPECT_EQ(listed, CPU_COUNT(&cpus));
}
