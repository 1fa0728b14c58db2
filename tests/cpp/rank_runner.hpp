#pragma once
// Forks a test's ranks, each running a body on its own ProcessGroupUCX over a FileStore,
// and says what went wrong (shared by the rank tests).
#include <unistd.h>

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "commux/process_group_ucx.hpp"
#include "fork_ranks.hpp"

namespace commux::testing {

using Body = std::function<void(commux::ProcessGroupUCX& pg, int rank, int size)>;

inline int counter = 0;

inline std::string freshStorePath() {
  return "/tmp/commux-ranks-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

// Runs `body` in `size` forked ranks. A rank in `killed` is expected to die by SIGKILL.
// `setup(rank)` runs in each rank before its group exists (its environment, which commux
// reads once). Returns an empty string when every rank did what it should, else what went
// wrong.
inline std::string runRanks(int size, const Body& body, std::vector<int> killed = {},
                            int limitSeconds = 60,
                            const std::function<void(int rank)>& setup = {}) {
  const std::string path = freshStorePath();
  std::remove(path.c_str());
  const std::string problems = forkRanks(
      size,
      [&](int rank) {
        if (setup) setup(rank);
        auto store = c10::make_intrusive<c10d::FileStore>(path, size);
        auto pg = c10::make_intrusive<commux::ProcessGroupUCX>(store, rank, size,
                                                               std::chrono::seconds(30));
        body(*pg, rank, size);
      },
      killed, limitSeconds);
  std::remove(path.c_str());
  return problems;
}

}  // namespace commux::testing
