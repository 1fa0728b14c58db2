/* The C API against seeded bad input, on real ranks (forked, meeting by unique id): every
 * case draws, alike on every rank, a call (allreduce, broadcast, allgather, reduce-scatter,
 * all-to-all-v, a ring of sends and receives), sizes, and what is wrong: a type or a
 * reduction that does not exist, a root or a peer outside the group, a negative tag, a NULL
 * buffer, a count whose bytes overflow, a receive buffer overlapping the send buffer, or
 * (collectives, under COMMUX_CHECK_COLLECTIVES=1) a count that only one rank gets wrong.
 * Every buffer has guard bytes on both sides. A refused call must return
 * commuxInvalidArgument with a message on every rank, leave its output untouched and every
 * guard intact; after each case an allreduce must still work. The parent kills the ranks
 * at the deadline.
 *
 *   capi_fuzz --ranks N [--cases C] [--seed S] [--deadline S]
 * COMMUX_FUZZ_CASES sets the cases when --cases is not given. */
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

enum { kGuard = 64, kGuardByte = 0xA5, kFill = 0x3C };
enum Call { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kAllToAllv, kRing, kCalls };
enum Wrong { kNone, kType, kOp, kRoot, kNullBuffer, kHugeCount, kOverlap, kOneRankCount, kPeer,
             kTag, kWrongs };
static const char* const kCallNames[] = {"allreduce", "broadcast", "allgather", "reduce_scatter",
                                          "all_to_all_v", "ring"};
static const char* const kWrongNames[] = {"nothing", "type", "reduction", "root", "NULL buffer",
                                          "huge count", "overlap", "one rank's count", "peer", "tag"};

/* A buffer of `bytes` between two guards. */
typedef struct {
  unsigned char* base;
  size_t bytes;
} Guarded;

static unsigned char* guarded(Guarded* g, size_t bytes, unsigned char fill) {
  g->bytes = bytes;
  g->base = malloc(bytes + 2 * kGuard);
  if (g->base == NULL) fail("out of memory");
  memset(g->base, kGuardByte, kGuard);
  memset(g->base + kGuard, fill, bytes);
  memset(g->base + kGuard + bytes, kGuardByte, kGuard);
  return g->base + kGuard;
}

static void check_guards(const Guarded* g, const char* what, long c) {
  for (size_t i = 0; i < kGuard; ++i) {
    if (g->base[i] != kGuardByte) fail("case %ld: a write before the %s buffer", c, what);
    if (g->base[kGuard + g->bytes + i] != kGuardByte)
      fail("case %ld: a write past the %s buffer (%zu bytes)", c, what, g->bytes);
  }
}

static int untouched(const Guarded* g, unsigned char fill) {
  for (size_t i = 0; i < g->bytes; ++i)
    if (g->base[kGuard + i] != fill) return 0;
  return 1;
}

static long g_refused = 0, g_ran = 0;

static void one_case(commuxComm_t comm, int rank, int size, long c) {
  const enum Call call = (enum Call)shared_random(kCalls);
  enum Wrong wrong = (enum Wrong)shared_random(kWrongs);
  static const size_t kCounts[] = {0, 1, 3, 17, 1000, 4099};
  const size_t count = kCounts[shared_random(sizeof(kCounts) / sizeof(kCounts[0]))];
  const int victim = (int)shared_random((unsigned)size);
  /* What applies to this call; the rest become a correct call. */
  const int has_op = call == kAllReduce || call == kReduceScatter;
  if ((wrong == kOp && !has_op) || (wrong == kRoot && call != kBroadcast) ||
      ((wrong == kPeer || wrong == kTag) && call != kRing) ||
      (wrong == kOneRankCount && (call == kRing || size < 2)) || (wrong == kOverlap && count == 0) ||
      ((wrong == kNullBuffer || wrong == kHugeCount) && count == 0) ||
      /* A broadcast reads its input on the root only: an overlap there is that rank's
       * alone to refuse, and the others rightly wait for it. */
      (wrong == kOverlap && call == kBroadcast))
    wrong = kNone;
  const size_t el = 4; /* int32 */
  size_t my = count + (wrong == kOneRankCount && rank == victim ? 1 : 0);
  const size_t n = (size_t)size;
  /* Room for the largest layout of either count. */
  size_t send_elems = (call == kReduceScatter || call == kAllToAllv) ? n * (count + 1) : count + 1;
  size_t recv_elems = (call == kAllGather || call == kAllToAllv) ? n * (count + 1) : count + 1;
  Guarded sg, rg;
  /* An overlapping output lies inside the input's allocation (and its guards). */
  int32_t* send = (int32_t*)guarded(&sg, (send_elems + (wrong == kOverlap ? recv_elems : 0)) * el, 0);
  int32_t* recv = (int32_t*)guarded(&rg, recv_elems * el, kFill);
  for (size_t i = 0; i < sg.bytes / el; ++i) send[i] = rank + 1;
  commuxDataType_t type = wrong == kType ? (commuxDataType_t)77 : commuxInt32;
  commuxRedOp_t op = wrong == kOp ? (commuxRedOp_t)77 : commuxSum;
  /* NULL where every rank reads or writes: a broadcast's output, every other input. */
  const void* sbuf = wrong == kNullBuffer && call != kBroadcast ? NULL : send;
  void* rbuf = wrong == kNullBuffer && call == kBroadcast ? NULL : recv;
  size_t pass = wrong == kHugeCount ? SIZE_MAX / 2 + 1 : my;
  if (wrong == kOverlap) rbuf = (char*)send + el; /* overlaps sendbuf, not in place */
  size_t sendcounts[32], recvcounts[32];
  if (getenv("COMMUX_FUZZ_VERBOSE") && rank == 0)
    fprintf(stderr, "case %ld: %s of %zu, wrong %s (rank %d)\n", c, kCallNames[call], count,
            kWrongNames[wrong], victim);
  commuxResult_t r = commuxSuccess;
  switch (call) {
    case kAllReduce:
      r = commuxAllReduce(sbuf, rbuf, pass, type, op, comm, NULL);
      break;
    case kBroadcast:
      r = commuxBroadcast(sbuf, rbuf, pass, type, wrong == kRoot ? size : 0, comm, NULL);
      break;
    case kAllGather:
      r = commuxAllGather(sbuf, rbuf, pass, type, comm, NULL);
      break;
    case kReduceScatter:
      r = commuxReduceScatter(sbuf, rbuf, pass, type, op, comm, NULL);
      break;
    case kAllToAllv:
      for (int d = 0; d < size; ++d) {
        /* The victim sends one more to rank 0 than rank 0 expects from it. */
        sendcounts[d] = pass == my ? count + (rank == victim && d == 0 && wrong == kOneRankCount) : pass;
        recvcounts[d] = count;
      }
      r = commuxAllToAllv(sbuf, sendcounts, rbuf, recvcounts, type, comm, NULL);
      break;
    default: {
      const int next = wrong == kPeer ? size + 3 : (rank + 1) % size;
      const int before = wrong == kPeer ? -7 : (rank + size - 1) % size;
      const int tag = wrong == kTag ? -5 : 11;
      if ((r = commuxGroupStart()) != commuxSuccess) break;
      /* Both sides of each pair wrong alike: a receive posted for a send that was refused
       * would wait out the timeout, as it should. */
      commuxResult_t a = commuxRecv(wrong == kNullBuffer ? NULL : rbuf, pass, type, before, tag,
                                    comm, NULL, NULL);
      commuxResult_t b = commuxSend(sbuf, pass, type, next, tag, comm, NULL);
      commuxResult_t e = commuxGroupEnd();
      r = a != commuxSuccess ? a : b != commuxSuccess ? b : e;
      break;
    }
  }
  const char* said = commuxGetLastError(NULL);
  check_guards(&sg, "send", c);
  check_guards(&rg, "receive", c);
  if (wrong == kNone) {
    if (r != commuxSuccess)
      fail("case %ld: a correct %s of %zu failed: %s", c, kCallNames[call], count, said);
    ++g_ran;
  } else if (wrong == kOverlap) {
    /* Refused, or done: either way nothing outside the buffers moved (guards above). */
    if (r != commuxSuccess && r != commuxInvalidArgument)
      fail("case %ld: an overlapping %s returned %s: %s", c, kCallNames[call],
           commuxGetErrorString(r), said);
  } else {
    if (r != commuxInvalidArgument || said == NULL || said[0] == '\0')
      fail("case %ld: a %s with a wrong %s (victim rank %d) returned %s: '%s'", c,
           kCallNames[call], kWrongNames[wrong], victim, commuxGetErrorString(r), said);
    /* Every refusal leaves the output as it was (allreduce and broadcast once copied the
     * caller's input into it before the call check ran). */
    if (!untouched(&rg, kFill))
      fail("case %ld: a refused %s (wrong %s) wrote its output", c, kCallNames[call],
           kWrongNames[wrong]);
    ++g_refused;
  }
  free(sg.base);
  free(rg.base);
  /* The communicator still works. */
  int32_t one = 1, all = 0;
  OK(commuxAllReduce(&one, &all, 1, commuxInt32, commuxSum, comm, NULL));
  if (all != size) fail("case %ld: the allreduce after it summed %d", c, all);
}

static int run_rank(int rank, int size, long cases, volatile char* shared) {
  g_rank = rank;
  commuxUniqueId id;
  share_unique_id(rank, shared, &id);
  commuxComm_t comm = NULL;
  OK(commuxCommInitRank(&comm, size, id, rank));
  OK(commuxCommSetTimeout(comm, 60000));
  for (long c = 0; c < cases; ++c) one_case(comm, rank, size, c);
  OK(commuxCommFinalize(comm));
  OK(commuxCommDestroy(comm));
  if (rank == 0)
    printf("capi_fuzz: %ld cases: %ld refused as they should be, %ld correct calls checked\n",
           cases, g_refused, g_ran);
  return 0;
}

int main(int argc, char** argv) {
  int ranks = 3, deadline = 300;
  long cases = getenv("COMMUX_FUZZ_CASES") ? atol(getenv("COMMUX_FUZZ_CASES")) : 150;
  g_seed = (unsigned long)time(NULL) ^ ((unsigned long)getpid() << 8);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ranks")) ranks = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--cases")) cases = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed")) g_seed = strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--deadline")) deadline = atoi(argv[i + 1]);
  }
  if (ranks < 1 || ranks > 32) fail("--ranks must be 1 .. 32");
  g_shared = g_seed;
  printf("capi_fuzz: %d ranks, %ld cases, seed %lu (replay with --seed %lu)\n", ranks, cases,
         g_seed, g_seed);
  fflush(stdout);
  /* Mismatched counts are told on every rank only by the call check, on the schedules. */
  setenv("COMMUX_SHM", "0", 1);
  setenv("COMMUX_CHECK_COLLECTIVES", "1", 1);
  volatile char* shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) fail("mmap failed");
  pid_t pids[32];
  for (int r = 0; r < ranks; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) exit(run_rank(r, ranks, cases, shared));
  }
  const int failed = wait_ranks("capi_fuzz", pids, ranks, deadline);
  if (failed < 0) return 1;
  printf("capi_fuzz: %s (seed %lu)\n", failed ? "FAILED" : "passed", g_seed);
  return failed;
}
