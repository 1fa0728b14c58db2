#pragma once
// Forks a test's ranks, each running a body on its own ProcessGroupUCX over a FileStore,
// and says what went wrong (shared by the rank tests).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "commux/process_group_ucx.hpp"

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
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      alarm(static_cast<unsigned>(limitSeconds));  // a hang fails instead of blocking
      int code = 0;
      try {
        if (setup) setup(rank);
        auto store = c10::make_intrusive<c10d::FileStore>(path, size);
        {
          auto pg = c10::make_intrusive<commux::ProcessGroupUCX>(store, rank, size, std::chrono::seconds(30));
          body(*pg, rank, size);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        code = 1;
      }
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::string problems;
  for (int rank = 0; rank < size; ++rank) {
    int status = 0;
    ::waitpid(pids[rank], &status, 0);
    const bool mustDie = std::find(killed.begin(), killed.end(), rank) != killed.end();
    const bool died = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    const bool ok = mustDie ? died : (WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!ok) {
      problems += "rank " + std::to_string(rank) + " status " + std::to_string(status) +
                  (WIFSIGNALED(status) ? " (signal " + std::to_string(WTERMSIG(status)) + ")" : "") +
                  "; ";
    }
  }
  std::remove(path.c_str());
  return problems;
}

}  // namespace commux::testing
