#pragma once
// Forks a test's ranks and says what went wrong; torch-free, so the core's tests (built
// where torch cannot be found) and the adapter's rank tests share it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace commux::testing {

// Runs `body(rank)` in `size` forked processes, each ending with _exit: 0 when body returned,
// 1 (its message on stderr) when it threw. A rank in `killed` is expected to die by SIGKILL;
// a rank still running after `limitSeconds` is killed by its alarm. Returns an empty string
// when every rank did what it should, else what went wrong.
inline std::string forkRanks(int size, const std::function<void(int rank)>& body,
                             const std::vector<int>& killed = {}, int limitSeconds = 60) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(static_cast<unsigned>(limitSeconds));  // a hang fails instead of blocking
      int code = 0;
      try {
        body(rank);
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
    ::waitpid(pids[static_cast<std::size_t>(rank)], &status, 0);
    const bool mustDie = std::find(killed.begin(), killed.end(), rank) != killed.end();
    const bool died = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    const bool ok = mustDie ? died : (WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!ok) {
      problems += "rank " + std::to_string(rank) + " status " + std::to_string(status) +
                  (WIFSIGNALED(status) ? " (signal " + std::to_string(WTERMSIG(status)) + ")" : "") +
                  "; ";
    }
  }
  return problems;
}

}  // namespace commux::testing
