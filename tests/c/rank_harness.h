/* What the C tests' parents share: handing rank 0's unique id to the other forked ranks,
 * and waiting for the ranks under a deadline that kills them all (a hang fails the test,
 * it never blocks CI). */
#ifndef COMMUX_TESTS_C_RANK_HARNESS_H
#define COMMUX_TESTS_C_RANK_HARNESS_H

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rank_checks.h"

/* Rank 0 makes the id and puts it in `shared` (an anonymous shared page, zero at first);
 * the others wait for it there. */
static inline void share_unique_id(int rank, volatile char* shared, commuxUniqueId* id) {
  if (rank == 0) {
    OK(commuxGetUniqueId(id));
    memcpy((char*)shared + 1, id, sizeof(*id));
    __sync_synchronize();
    shared[0] = 1;
  } else {
    while (shared[0] == 0) usleep(1000);
    __sync_synchronize();
    memcpy(id, (const char*)shared + 1, sizeof(*id));
  }
}

/* Waits for the `n` ranks; returns how many exited other than 0, or -1 when `deadline`
 * seconds passed first (every rank is then killed). */
static inline int wait_ranks(const char* who, const pid_t* pids, int n, int deadline) {
  int failed = 0, left = n;
  const time_t end = time(NULL) + deadline;
  while (left > 0) {
    int status;
    if (waitpid(-1, &status, WNOHANG) > 0) {
      --left;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
      continue;
    }
    if (time(NULL) > end) {
      fprintf(stderr, "%s: deadline of %d s passed; killing the ranks (seed %lu)\n", who, deadline,
              g_seed);
      for (int r = 0; r < n; ++r) kill(pids[r], SIGKILL);
      while (waitpid(-1, NULL, 0) > 0) {
      }
      return -1;
    }
    usleep(10000);
  }
  return failed;
}

#endif
