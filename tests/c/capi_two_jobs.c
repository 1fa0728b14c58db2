/* Two jobs started on one COMMUX_BOOTSTRAP port, by mistake, as people do: they must never
 * form one communicator. Each job's ranks add values of their own job; a rank whose sum is
 * another's has met the other job, which fails the test. The harness starts the ranks of
 * both jobs in an order drawn from the seed, with gaps of up to 30 ms, and kills everything
 * at the deadline.
 *
 *   capi_two_jobs --ranks N --secret none|job [--seed S] [--deadline S]
 *
 * --secret job: each job has its own COMMUX_BOOTSTRAP_SECRET. The job whose rank 0 took the
 *   port runs; every rank of the other fails, saying the store belongs to another job.
 * --secret none: nothing tells the jobs apart but the store, which sees a rank (rank 0 at
 *   the least: both rank 0s start first here) join twice from two live processes: every
 *   rank fails, with a message that names the port and says what to set (or, for a rank
 *   that never reached a store before the one there left, that it cannot reach it). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commux/commux.h"
#include "rank_checks.h"
#include "rank_harness.h"
#include "reserve_port.h"

enum { kOk = 1, kFailed = 2, kMixed = 3, kNoMessage = 4 };

/* What each rank saw: a status, and its error text. */
struct Outcome {
  volatile int status;
  char message[1024];
  /* When the rank's process began and when its communicator was gone (CLOCK_MONOTONIC). */
  double started, ended;
};

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int run(int job, int rank, int size, struct Outcome* out) {
  g_rank = rank;
  out->started = now_seconds();
  commuxComm_t comm = NULL;
  commuxResult_t r = commuxCommInitFromEnv(&comm);
  if (r == commuxSuccess) r = commuxCommSetTimeout(comm, 20000);
  int64_t value = job * 1000 + rank + 1, sum = 0;
  if (r == commuxSuccess) r = commuxAllReduce(&value, &sum, 1, commuxInt64, commuxSum, comm, NULL);
  if (r == commuxSuccess) {
    const int64_t expected = (int64_t)job * 1000 * size + (int64_t)size * (size + 1) / 2;
    if (sum != expected) {
      snprintf(out->message, sizeof(out->message), "job %d rank %d: sum %lld, expected %lld",
               job, rank, (long long)sum, (long long)expected);
      out->status = kMixed;
      out->ended = now_seconds();
      return 0;
    }
    r = commuxCommFinalize(comm);
  }
  if (r != commuxSuccess) {
    /* The communicator's own word where it has one (an aborted call says less). */
    snprintf(out->message, sizeof(out->message), "%s", commuxGetLastError(NULL));
    /* A call that failed as the store went away (its process, rank 0 of a job, left after
     * it found the two jobs): the communicator hears why on its own connection. */
    for (int waited = 0; comm != NULL && waited < 2000 && strstr(out->message, "two jobs met") == NULL;
         waited += 20) {
      commuxResult_t async = commuxSuccess;
      if (commuxCommGetAsyncError(comm, &async) != commuxSuccess || async != commuxSuccess) {
        if (strstr(commuxGetLastError(NULL), "two jobs met") != NULL)
          snprintf(out->message, sizeof(out->message), "%s", commuxGetLastError(NULL));
      }
      usleep(20000);
    }
    out->status = kFailed;
  } else {
    out->status = kOk;
  }
  commuxCommDestroy(comm);
  out->ended = now_seconds();
  return 0;
}

int main(int argc, char** argv) {
  int ranks = 2, deadline = 60, secret = 0, held = -1;
  g_seed = (unsigned long)time(NULL) ^ (unsigned long)getpid();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ranks")) ranks = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed")) g_seed = strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--deadline")) deadline = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--secret")) secret = !strcmp(argv[i + 1], "job");
  }
  if (ranks < 1 || ranks > 8) fail("--ranks must be 1 .. 8");
  g_shared = g_seed;
  printf("capi_two_jobs: 2 jobs of %d ranks, secret %s, seed %lu (replay with --seed %lu)\n", ranks,
         secret ? "per job" : "none", g_seed, g_seed);
  fflush(stdout);
  const int total = 2 * ranks;
  struct Outcome* outcomes = mmap(NULL, sizeof(struct Outcome) * (size_t)total,
                                  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (outcomes == MAP_FAILED) fail("mmap: %s", strerror(errno));
  char where[64], n[16];
  snprintf(where, sizeof(where), "127.0.0.1:%d", reserve_port(&held));
  snprintf(n, sizeof(n), "%d", ranks);
  setenv("COMMUX_BOOTSTRAP", where, 1);
  setenv("COMMUX_SIZE", n, 1);
  /* A rank that never reached a store (the one there left when it found the two jobs)
   * gives up in seconds, not the default half hour. */
  setenv("COMMUX_BOOTSTRAP_TIMEOUT", "15", 1);
  /* No launcher's job id may tell the jobs apart here. */
  for (const char* const* v = (const char* const[]){"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
                                                    "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", NULL};
       *v != NULL; ++v)
    unsetenv(*v);
  /* The start order: a shuffle of (job, rank), from the seed. */
  int order[16];
  for (int i = 0; i < total; ++i) order[i] = i;
  for (int i = total - 1; i > 0; --i) {
    int j = (int)shared_random((unsigned)i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  if (!secret) {
    /* Both rank 0s first: only what the store sees can tell jobs with one secret apart, and
     * a job that started and ended before the other's ranks arrived cannot be told from
     * one rank of it arriving early (README: detection, not prevention). */
    for (int k = 0, placed = 0; k < total; ++k) {
      if (order[k] % ranks == 0) {
        const int t = order[placed];
        order[placed++] = order[k];
        order[k] = t;
      }
    }
  }
  pid_t pids[16];
  for (int k = 0; k < total; ++k) {
    const int job = order[k] / ranks, rank = order[k] % ranks;
    printf("capi_two_jobs: start job %d rank %d\n", job, rank);
    fflush(stdout);
    pids[k] = fork();
    if (pids[k] == 0) {
      if (held >= 0) close(held);
      char v[16];
      snprintf(v, sizeof(v), "%d", rank);
      setenv("COMMUX_RANK", v, 1);
      if (secret) setenv("COMMUX_BOOTSTRAP_SECRET", job ? "job-one" : "job-zero", 1);
      else unsetenv("COMMUX_BOOTSTRAP_SECRET");
      exit(run(job, rank, ranks, &outcomes[order[k]]));
    }
    usleep(1000u * shared_random(30));
  }
  /* Every rank exits 0: what it saw is in its outcome. */
  if (wait_ranks("capi_two_jobs", pids, total, deadline) < 0) return 1;
  if (held >= 0) close(held);
  int bad = 0, jobsOk[2] = {0, 0}, jobsFailed[2] = {0, 0};
  for (int i = 0; i < total; ++i) {
    const int job = i / ranks;
    const struct Outcome* o = &outcomes[i];
    printf("capi_two_jobs: job %d rank %d: %s %s\n", job, i % ranks,
           o->status == kOk ? "ok" : o->status == kFailed ? "failed:" : o->status == kMixed ? "MIXED:" : "no outcome",
           o->message);
    if (o->status == kOk) ++jobsOk[job];
    if (o->status == kFailed) {
      ++jobsFailed[job];
      /* Why: the jobs met (or the store is another job's); or, for a rank that never got
       * into a store before the one there left, that the store cannot be reached. Each
       * names the port. */
      const char* says = secret ? "another job" : "two jobs met";
      int gone = strstr(o->message, "cannot connect to the bootstrap store") != NULL ||
                 strstr(o->message, "stopped answering") != NULL ||
                 strstr(o->message, "closed the connection") != NULL;
      /* A rank 0 that started after the other job's rank 0 had ended found the port free:
       * it serves its own job's store and waits there, in vain, for its ranks that met the
       * other job's store before and failed. Nothing was mixed; no store saw both jobs. */
      const struct Outcome* otherZero = &outcomes[(1 - job) * ranks];
      const int lateZero = i % ranks == 0 && otherZero->ended > 0 &&
                           o->started > otherZero->ended &&
                           strstr(o->message, "waited in vain") != NULL;
      if (!lateZero &&
          ((strstr(o->message, says) == NULL && !gone) || strstr(o->message, where + 10) == NULL)) {
        fprintf(stderr, "capi_two_jobs: job %d rank %d's error does not say '%s' and the port\n",
                job, i % ranks, says);
        bad = 1;
      }
    }
    if (o->status != kOk && o->status != kFailed) bad = 1;
  }
  if (secret) {
    /* One job runs whole, the other fails whole. */
    if (!((jobsOk[0] == ranks && jobsFailed[1] == ranks) || (jobsOk[1] == ranks && jobsFailed[0] == ranks))) {
      fprintf(stderr, "capi_two_jobs: expected one job to run and the other to fail\n");
      bad = 1;
    }
  } else if (jobsFailed[0] + jobsFailed[1] != total) {
    fprintf(stderr, "capi_two_jobs: expected every rank of both jobs to fail\n");
    bad = 1;
  }
  printf("capi_two_jobs: %s (seed %lu)\n", bad ? "FAILED" : "passed", g_seed);
  return bad;
}
