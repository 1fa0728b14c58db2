/* Real ranks through the C API, as a C program sees it: the harness forks `ranks`
 * processes (each one a rank of its own, with nothing of commux loaded before the fork),
 * they meet through a unique id (or COMMUX_BOOTSTRAP from the environment) and run every
 * call with seeded sizes, roots and types, checking each result element by element. The
 * parent kills everything at the deadline: a hang fails the test, it never blocks CI.
 *
 *   capi_ranks --ranks N [--mode id|env|death|reconnect|abort|shrink|checkv|kill] [--seed S]
 *              [--deadline S]
 *   capi_ranks --rank-from-env [--seed S]   one rank of a job started by someone else
 *                                          (COMMUX_RANK, COMMUX_SIZE, COMMUX_BOOTSTRAP; the
 *                                          same seed on every rank): scripts/multihost_check.sh
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commux/commux.h"
#include "rank_checks.h"
#include "rank_harness.h"
#include "reserve_port.h"

static size_t pick_count(void) {
  static const size_t kCounts[] = {0, 1, 3, 17, 1000, 4099, 70000};
  return kCounts[shared_random(sizeof(kCounts) / sizeof(kCounts[0]))];
}


/* One blocking ring step on another thread: send this rank to `next`, receive `before`'s. */
struct RingArgs {
  commuxComm_t comm;
  int next, before, tag;
  int32_t got;
};

static void* ring_once(void* arg) {
  struct RingArgs* a = arg;
  int mine = -1;
  int32_t got = -1;
  commuxRequest_t sent;
  OK(commuxCommUserRank(a->comm, &mine));
  OK(commuxIsend(&mine, 1, commuxInt32, a->next, a->tag, a->comm, NULL, &sent));
  OK(commuxRecv(&got, 1, commuxInt32, a->before, a->tag, a->comm, NULL, NULL));
  OK(commuxWait(sent, NULL));
  a->got = got;
  return NULL;
}

static void test_messages(commuxComm_t comm, int rank, int size) {
  const int next = (rank + 1) % size, before = (rank + size - 1) % size;
  /* A ring of blocking calls inside a group: no order can deadlock. */
  int32_t out[64], in[64];
  for (int i = 0; i < 64; ++i) out[i] = rank * 1000 + i;
  OK(commuxGroupStart());
  OK(commuxRecv(in, 64, commuxInt32, before, 7, comm, NULL, NULL));
  OK(commuxSend(out, 64, commuxInt32, next, 7, comm, NULL));
  OK(commuxGroupEnd());
  for (int i = 0; i < 64; ++i)
    if (in[i] != before * 1000 + i) fail("ring: element %d is %d", i, in[i]);
  /* A communicator an open group holds is not destroyed: the group's end still needs it. */
  OK(commuxGroupStart());
  OK(commuxRecv(in, 64, commuxInt32, before, 8, comm, NULL, NULL));
  OK(commuxSend(out, 64, commuxInt32, next, 8, comm, NULL));
  REFUSED(commuxCommDestroy(comm), commuxInvalidUsage, "still open");
  OK(commuxGroupEnd());
  for (int i = 0; i < 64; ++i)
    if (in[i] != before * 1000 + i) fail("ring after a refused destroy: element %d is %d", i, in[i]);

  /* A group is per thread: while this thread's group is open (its receive only posted),
   * another thread's blocking calls on the same communicator run at once. The group's
   * receive is matched only by the send this thread posts after that thread returned;
   * with COMMUX_GROUP=1 the other thread's calls were once swallowed by this thread's batch
   * (its receive then never completed). */
  if (size >= 2) {
    struct RingArgs ring = {comm, next, before, 32, -1};
    int32_t grouped_in = -1, grouped_out = rank;
    pthread_t other;
    OK(commuxGroupStart());
    OK(commuxRecv(&grouped_in, 1, commuxInt32, before, 31, comm, NULL, NULL));
    if (pthread_create(&other, NULL, ring_once, &ring) != 0) fail("pthread_create failed");
    pthread_join(other, NULL);
    if (ring.got != before) fail("another thread's ring during an open group got %d", ring.got);
    OK(commuxSend(&grouped_out, 1, commuxInt32, next, 31, comm, NULL));
    OK(commuxGroupEnd());
    if (grouped_in != before) fail("the group's receive got %d", grouped_in);
  }

  /* Tags select, order holds per (sender, tag): rank 0 sends tag 6 then three of tag 5;
   * rank 1 takes the three of tag 5 first, in order, then tag 6. */
  if (size >= 2 && rank < 2) {
    if (rank == 0) {
      int64_t six = 6;
      OK(commuxSend(&six, 1, commuxInt64, 1, 6, comm, NULL));
      for (int64_t k = 0; k < 3; ++k) OK(commuxSend(&k, 1, commuxInt64, 1, 5, comm, NULL));
    } else {
      commuxStatus st;
      for (int64_t k = 0; k < 3; ++k) {
        int64_t got = -1;
        OK(commuxRecv(&got, 1, commuxInt64, 0, 5, comm, NULL, &st));
        if (got != k || st.source != 0 || st.tag != 5) fail("tag 5 #%lld got %lld", (long long)k, (long long)got);
      }
      int64_t got = -1;
      OK(commuxRecv(&got, 1, commuxInt64, 0, 6, comm, NULL, NULL));
      if (got != 6) fail("tag 6 got %lld", (long long)got);
    }
  }

  /* Any source: every other rank sends its rank to rank 0, which learns who sent what. */
  if (rank == 0) {
    int seen = 0;
    for (int k = 1; k < size; ++k) {
      int32_t who = -1;
      commuxStatus st = {-1, -1};
      OK(commuxRecv(&who, 1, commuxInt32, COMMUX_ANY_SOURCE, 100, comm, NULL, &st));
      if (who != st.source || st.tag != 100) fail("any source: %d from status %d", who, st.source);
      seen |= 1 << who;
    }
    if (seen != ((1 << size) - 2)) fail("any source: senders seen %x", seen);
  } else {
    int32_t me = rank;
    OK(commuxSend(&me, 1, commuxInt32, 0, 100, comm, NULL));
  }

  /* Non-blocking: the receive posted first, tested until done. */
  commuxRequest_t rr, sr;
  double big_out[5000], big_in[5000];
  for (int i = 0; i < 5000; ++i) big_out[i] = rank + i * 0.5;
  OK(commuxIrecv(big_in, 5000, commuxFloat64, before, 9, comm, NULL, &rr));
  OK(commuxIsend(big_out, 5000, commuxFloat64, next, 9, comm, NULL, &sr));
  int done = 0;
  commuxStatus st;
  for (long spins = 0; !done; ++spins) {
    OK(commuxTest(rr, &done, &st));
    if (!done) usleep(50);
    if (spins > 2000000) fail("irecv never completed");
  }
  OK(commuxWait(sr, NULL));
  if (st.source != before) fail("irecv status names %d", st.source);
  for (int i = 0; i < 5000; ++i)
    if (big_in[i] != before + i * 0.5) fail("irecv element %d", i);

  /* A request freed before its message arrives leaves the buffer alone. */
  commuxRequest_t lonely;
  int32_t nothing = -5;
  OK(commuxIrecv(&nothing, 1, commuxInt32, before, 4242, comm, NULL, &lonely));
  OK(commuxRequestFree(lonely));
  if (nothing != -5) fail("a freed receive wrote its buffer");
}

static void test_collectives(commuxComm_t comm, int rank, int size, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    const TypeInfo* t = &kTypes[shared_random(sizeof(kTypes) / sizeof(kTypes[0]))];
    static const commuxRedOp_t kOps[] = {commuxSum, commuxMax, commuxMin};
    commuxRedOp_t op = kOps[shared_random(3)];
    if (t->type == commuxUint8 || t->type == commuxBfloat16) op = commuxMax;
    const size_t n = pick_count();
    const int root = (int)shared_random((unsigned)size);
    const int inplace = (int)shared_random(2);
    /* n x size elements, and at least the 2 x size that alltoallv's blocks take */
    char* send = malloc((n + 2) * size * t->size + 1);
    char* recv = malloc((n + 2) * size * t->size + 1);
    for (size_t i = 0; i < n * size; ++i) put(send, t->type, i, value_of(rank, i));

    /* allreduce, in place or not */
    for (size_t i = 0; i < n; ++i) put(recv, t->type, i, value_of(rank, i));
    OK(commuxAllReduce(inplace ? recv : send, recv, n, t->type, op, comm, NULL));
    for (size_t i = 0; i < n; ++i) check_value("allreduce", t, recv, i, fold(op, size, i));

    /* reduce to root; the others' recvbuf is untouched (NULL is allowed) */
    memset(recv, 0x5a, n * t->size + 1);
    OK(commuxReduce(send, rank == root ? recv : NULL, n, t->type, op, root, comm, NULL));
    if (rank == root)
      for (size_t i = 0; i < n; ++i) check_value("reduce", t, recv, i, fold(op, size, i));
    for (size_t i = 0; i < n; ++i) check_value("reduce's input", t, send, i, value_of(rank, i));

    /* broadcast */
    for (size_t i = 0; i < n; ++i) put(recv, t->type, i, -1);
    OK(commuxBroadcast(send, recv, n, t->type, root, comm, NULL));
    for (size_t i = 0; i < n; ++i) check_value("broadcast", t, recv, i, value_of(root, i));

    /* allgather (in place: this rank's block of recv) */
    for (size_t i = 0; i < n; ++i) put(recv, t->type, rank * n + i, value_of(rank, i));
    OK(commuxAllGather(inplace ? recv + rank * n * t->size : send, recv, n, t->type, comm, NULL));
    for (int r = 0; r < size; ++r)
      for (size_t i = 0; i < n; ++i) check_value("allgather", t, recv, r * n + i, value_of(r, i));

    /* reduce_scatter: block `rank` of the fold of every rank's n x size */
    OK(commuxReduceScatter(send, recv, n, t->type, op, comm, NULL));
    for (size_t i = 0; i < n; ++i)
      check_value("reduce_scatter", t, recv, i, fold(op, size, rank * n + i));

    /* alltoall: block d of rank s is value_of(s, d * n + i) */
    OK(commuxAllToAll(send, recv, n, t->type, comm, NULL));
    for (int s = 0; s < size; ++s)
      for (size_t i = 0; i < n; ++i) check_value("alltoall", t, recv, s * n + i, value_of(s, rank * n + i));

    /* gather and scatter */
    OK(commuxGather(send, rank == root ? recv : NULL, n, t->type, root, comm, NULL));
    if (rank == root)
      for (int r = 0; r < size; ++r)
        for (size_t i = 0; i < n; ++i) check_value("gather", t, recv, r * n + i, value_of(r, i));
    OK(commuxScatter(rank == root ? send : NULL, recv, n, t->type, root, comm, NULL));
    for (size_t i = 0; i < n; ++i) check_value("scatter", t, recv, i, value_of(root, rank * n + i));

    /* alltoallv: rank s sends (s + d) % 3 elements to rank d */
    size_t sc[64], rc[64], so = 0, ro = 0;
    for (int d = 0; d < size; ++d) {
      sc[d] = (size_t)((rank + d) % 3);
      rc[d] = (size_t)((d + rank) % 3);
    }
    for (int d = 0; d < size; ++d)
      for (size_t i = 0; i < sc[d]; ++i) put(send, t->type, so++, value_of(rank, d * 10 + i));
    OK(commuxAllToAllv(send, sc, recv, rc, t->type, comm, NULL));
    for (int s = 0; s < size; ++s)
      for (size_t i = 0; i < rc[s]; ++i) check_value("alltoallv", t, recv, ro++, value_of(s, rank * 10 + i));
    (void)so;
    OK(commuxBarrier(comm, NULL));
    free(send);
    free(recv);
  }
}

static void test_refusals(commuxComm_t comm, int rank, int size) {
  float x[4] = {1, 2, 3, 4};
  int dummy_stream = 0;
  REFUSED(commuxAllReduce(x, x, 4, (commuxDataType_t)99, commuxSum, comm, NULL),
          commuxInvalidArgument, "not a commuxDataType_t");
  REFUSED(commuxAllReduce(x, x, 4, commuxFloat32, (commuxRedOp_t)42, comm, NULL),
          commuxInvalidArgument, "not a commuxRedOp_t");
  REFUSED(commuxAllReduce(x, x, 4, commuxFloat32, commuxBand, comm, NULL), commuxInvalidArgument,
          "not defined on float32");
  REFUSED(commuxBroadcast(x, x, 4, commuxFloat32, size, comm, NULL), commuxInvalidArgument,
          "is not a rank");
  REFUSED(commuxSend(x, 4, commuxFloat32, size + 3, 1, comm, NULL), commuxInvalidArgument,
          "is not a rank");
  REFUSED(commuxSend(x, 4, commuxFloat32, 0, -2, comm, NULL), commuxInvalidArgument, "negative");
  REFUSED(commuxRecv(NULL, 4, commuxFloat32, 0, 1, comm, NULL, NULL), commuxInvalidArgument,
          "NULL");
  /* A stream with host memory: refused as host memory where the build has the CUDA device
   * path, as a stream where it has none. */
  {
    commuxResult_t r = commuxAllReduce(x, x, 4, commuxFloat32, commuxSum, comm, &dummy_stream);
    const char* says = r == commuxInvalidArgument ? "is host memory" : "stream";
    if (r != commuxInvalidArgument && r != commuxUnsupported)
      fail("a stream with host memory returned %s", commuxGetErrorString(r));
    if (strstr(commuxGetLastError(NULL), says) == NULL)
      fail("a stream with host memory: '%s' does not say '%s'", commuxGetLastError(NULL), says);
  }
  REFUSED(commuxAllReduce(x, x + 1, 3, commuxFloat32, commuxSum, comm, NULL),
          commuxInvalidArgument, "overlap");
  REFUSED(commuxAllGather(x, x, SIZE_MAX / 2, commuxFloat32, comm, NULL), commuxInvalidArgument,
          "overflow");
  REFUSED(commuxGroupEnd(), commuxInvalidUsage, "without commuxGroupStart");
  REFUSED(commuxCommSetTimeout(comm, -1), commuxInvalidArgument, "not a timeout");
  /* ... and the communicator still works. */
  float one = 1;
  OK(commuxAllReduce(&one, &one, 1, commuxFloat32, commuxSum, comm, NULL));
  if (one != (float)size) fail("allreduce after refusals: %g", one);
  commuxResult_t async;
  OK(commuxCommGetAsyncError(comm, &async));
  if (async != commuxSuccess) fail("unhealthy after refusals: %s", commuxGetLastError(NULL));
  /* A receive nobody answers runs out with its own code; messages still work after it. */
  int32_t never = 0;
  OK(commuxCommSetTimeout(comm, 300));
  REFUSED(commuxRecv(&never, 1, commuxInt32, (rank + 1) % size, 777, comm, NULL, NULL),
          commuxTimeout, "timed out after 300 ms");
  OK(commuxCommSetTimeout(comm, 60000));
  int32_t out = rank, in = -1;
  OK(commuxGroupStart());
  OK(commuxSend(&out, 1, commuxInt32, (rank + 1) % size, 778, comm, NULL));
  OK(commuxRecv(&in, 1, commuxInt32, (rank + size - 1) % size, 778, comm, NULL, NULL));
  OK(commuxGroupEnd());
  if (in != (rank + size - 1) % size) fail("message after a timeout: %d", in);
}

/* Memory commux allocates and memory registered with it, used by the other calls. */
static void test_memory(commuxComm_t comm, int rank, int size) {
  const size_t n = 1 << 18;
  float* shared = NULL;
  OK(commuxMemAlloc((void**)&shared, n * sizeof(float)));
  for (size_t i = 0; i < n; ++i)
    if (shared[i] != 0) fail("commuxMemAlloc's memory is not zeroed at %zu", i);
  void* handle = NULL;
  OK(commuxCommRegister(comm, shared, n * sizeof(float), &handle));
  for (size_t i = 0; i < n; ++i) shared[i] = (float)(rank + 1);
  OK(commuxAllReduce(shared, shared, n, commuxFloat32, commuxSum, comm, NULL));
  for (size_t i = 0; i < n; i += 4099)
    if (shared[i] != size * (size + 1) / 2.0f) fail("allreduce in registered memory: %g", shared[i]);
  OK(commuxCommDeregister(comm, handle));
  REFUSED(commuxCommDeregister(comm, handle), commuxInvalidArgument, "not a registration");
  OK(commuxMemFree(shared));
  REFUSED(commuxMemFree(shared), commuxInvalidArgument, "not returned by commuxMemAlloc");
  float local;
  REFUSED(commuxMemFree(&local), commuxInvalidArgument, "not returned by commuxMemAlloc");
}

/* The last rank dies; the others see it, destroy and init again with the same id; the
 * harness starts a new process for the dead rank, which joins them; they work together. */
static void rebuild_and_check(commuxComm_t comm, int rank, int size) {
  float v = (float)(rank + 1);
  OK(commuxAllReduce(&v, &v, 1, commuxFloat32, commuxSum, comm, NULL));
  if (v != size * (size + 1) / 2.0f) fail("allreduce after the rebuild: %g", v);
  OK(commuxBarrier(comm, NULL));
}

static commuxComm_t init(int mode, int rank, int size, const commuxUniqueId* id) {
  commuxComm_t comm = NULL;
  if (mode == 1) {
    OK(commuxCommInitFromEnv(&comm));
  } else {
    OK(commuxCommInitRank(&comm, size, *id, rank));
  }
  int r = -1, n = -1;
  OK(commuxCommUserRank(comm, &r));
  OK(commuxCommCount(comm, &n));
  if (r != rank || n != size) fail("rank %d of %d reported", r, n);
  return comm;
}

/* Rank `size - 1` exits mid-job; rank 0's receive from it fails naming it, in seconds. */
static void test_death(commuxComm_t comm, int rank, int size) {
  OK(commuxBarrier(comm, NULL));
  if (rank == size - 1) _exit(0);
  if (rank == 0) {
    /* An orderly end with a member gone fails at once, naming the trouble. */
    int32_t v = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    commuxResult_t r = commuxRecv(&v, 1, commuxInt32, size - 1, 3, comm, NULL, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    if (r != commuxRemoteError) fail("recv from a dead rank returned %s", commuxGetErrorString(r));
    char want[32];
    snprintf(want, sizeof(want), "%d", size - 1);
    if (strstr(commuxGetLastError(NULL), want) == NULL) fail("death message: %s", commuxGetLastError(NULL));
    if (s > 30) fail("the death took %.1f s to see", s);
    commuxResult_t async;
    OK(commuxCommGetAsyncError(comm, &async));
    if (async != commuxRemoteError) fail("async error after a death: %s", commuxGetErrorString(async));
    REFUSED(commuxCommFinalize(comm), commuxRemoteError, "unhealthy");
  }
}

static commuxComm_t init(int mode, int rank, int size, const commuxUniqueId* id);

/* Windows: every rank puts a block into every window (its own too) and signals; each waits
 * for every signal and finds every block. Then a large put with its signal to the next rank,
 * a flush, refusals, and the collective free. Window sizes differ per rank. */
static void test_windows(commuxComm_t comm, int rank, int size) {
  const size_t elements = 4096 + (size_t)rank * 16, block = 16, big = 3000; /* 12000 B: past the 8 KiB that travel eagerly */
  float* mem = calloc(elements, sizeof(float));
  commuxWin_t win = NULL;
  OK(commuxWinCreate(comm, mem, elements * sizeof(float), &win));
  float mine[16];
  for (size_t i = 0; i < block; ++i) mine[i] = (float)(rank * 100 + i);
  for (int t = 0; t < size; ++t) {
    OK(commuxWinPut(win, mine, sizeof(mine), t, (size_t)rank * sizeof(mine)));
    OK(commuxWinSignal(win, t));
  }
  for (int s = 0; s < size; ++s) OK(commuxWinWaitSignal(win, s));
  for (int s = 0; s < size; ++s)
    for (size_t i = 0; i < block; ++i)
      if (mem[(size_t)s * block + i] != (float)(s * 100 + i)) fail("window: block of rank %d, element %zu is %g", s, i, mem[(size_t)s * block + i]);
  /* A put past the eager size, with its signal, to the next rank; and one to the previous
   * rank followed by a flush. */
  const int next = (rank + 1) % size, before = (rank + size - 1) % size;
  float* large = malloc(big * sizeof(float));
  for (size_t i = 0; i < big; ++i) large[i] = (float)(rank + 0.5 * (double)i);
  const size_t at = 64 * sizeof(float);
  OK(commuxWinPutSignal(win, large, big * sizeof(float), next, at));
  OK(commuxWinWaitSignal(win, before));
  for (size_t i = 0; i < big; ++i)
    if (mem[64 + i] != (float)(before + 0.5 * (double)i)) fail("window: large put element %zu is %g", i, mem[64 + i]);
  OK(commuxWinFlush(win, before));
  /* Refusals: past the target's window (its size differs from this one's), a bad rank. */
  REFUSED(commuxWinPut(win, mine, sizeof(mine), next, (4096 + (size_t)next * 16) * sizeof(float) - 8),
          commuxInvalidArgument, "do not fit");
  REFUSED(commuxWinSignal(win, size), commuxInvalidArgument, "is not a rank");
  REFUSED(commuxWinPut(win, NULL, 8, next, 0), commuxInvalidArgument, "NULL");
  OK(commuxBarrier(comm, NULL)); /* every rank done reading before anyone frees */
  OK(commuxWinFree(win));
  free(large);
  free(mem);
}

/* The value of global cell (x, y) of field f at step `step`: tells every cell apart. */
static double halo_value(int f, int step, long x, long y) {
  return (double)(f * 1000003 + step * 7919) + (double)x * 1000.0 + (double)y;
}

/* A 2-D periodic grid (diagonals drawn from the seed) of equal blocks, two fields of two
 * types with their ghost cells inside: after each step every ghost cell holds the global
 * array's value across its face (wrapped), and a corner's only with diagonals. Then a graph
 * exchange around a ring, cut differently on each side, and the refusals. */
static void test_halo(commuxComm_t comm, int rank, int size) {
  int dims[2] = {0, 0};
  OK(commuxDimsCreate(size, 2, dims));
  if (dims[0] * dims[1] != size) fail("halo: commuxDimsCreate gave %d x %d for %d", dims[0], dims[1], size);
  const int periodic[2] = {1, 1}, diagonals = (int)shared_random(2);
  const long wx = 1 + (long)shared_random(2), wy = 1, nx = 3 + (long)shared_random(4), ny = 2 + (long)shared_random(5);
  const int64_t shape[2] = {nx + 2 * wx, ny + 2 * wy}, widths[2] = {wx, wy};
  const size_t cells = (size_t)(shape[0] * shape[1]);
  double* a = malloc(cells * sizeof(double));
  float* b = malloc(cells * sizeof(float));
  void* fields[2] = {a, b};
  const commuxDataType_t types[2] = {commuxFloat64, commuxFloat32};
  const int cx = rank / dims[1], cy = rank % dims[1];
  commuxExchange_t ex = NULL;
  if (size > 1) {
    /* The ranks agree on the exchange before any builds it: every rank is told when one
     * rank's tag, shared face or own arguments differ, and the communicator goes on. */
    const int64_t wider[2] = {shape[0], shape[1] + 1}; /* rank 1's face towards dimension 0 */
    REFUSED(commuxHaloCreate(comm, 2, dims, periodic, diagonals, 2, fields, types, 2,
                             rank == 1 ? wider : shape, widths, 77, &ex),
            commuxInvalidArgument, "the faces they share differ");
    if (ex != NULL) fail("halo: a refused commuxHaloCreate left an exchange");
    REFUSED(commuxHaloCreate(comm, 2, dims, periodic, diagonals, 2, fields, types, 2, shape, widths,
                             rank == size - 1 ? 78 : 77, &ex),
            commuxInvalidArgument, "gives tag 78, rank 0 77");
    REFUSED(commuxHaloCreate(comm, 2, dims, periodic, diagonals, 2, rank == 0 ? NULL : fields,
                             types, 2, shape, widths, 77, &ex),
            commuxInvalidArgument, rank == 0 ? "needs nfields > 0, fields" : "rank 0 refused its own");
    /* Collective, so not inside a batch that another call has opened (it would wait for
     * the batch's end); the batch still completes. */
    int one = 1;
    OK(commuxGroupStart());
    OK(commuxAllReduce(&one, &one, 1, commuxInt32, commuxSum, comm, NULL));
    REFUSED(commuxHaloCreate(comm, 2, dims, periodic, diagonals, 2, fields, types, 2, shape, widths,
                             77, &ex),
            commuxInvalidUsage, "outside a batch");
    OK(commuxGroupEnd());
    if (one != size) fail("halo: the batch around a refused commuxHaloCreate summed %d, not %d", one, size);
  }
  OK(commuxHaloCreate(comm, 2, dims, periodic, diagonals, 2, fields, types, 2, shape, widths, 77, &ex));
  const long gx = nx * dims[0], gy = ny * dims[1];
  for (int step = 0; step < 3; ++step) {
    for (long i = 0; i < shape[0]; ++i)
      for (long j = 0; j < shape[1]; ++j) {
        const int inside = i >= wx && i < wx + nx && j >= wy && j < wy + ny;
        const long x = cx * nx + i - wx, y = cy * ny + j - wy;
        a[i * shape[1] + j] = inside ? halo_value(0, step, x, y) : -1.0;
        b[i * shape[1] + j] = inside ? (float)(halo_value(1, step, x, y) / 1024.0) : -1.0f;
      }
    OK(commuxExchangeStart(ex));
    if (step == 1) { /* polled (MPI_Test's way): it ends with nobody in commuxExchangeWait */
      int done = 0;
      for (long polls = 0; !done; ++polls) {
        OK(commuxExchangeTest(ex, &done));
        if (!done && polls > 600000) fail("halo: commuxExchangeTest never said done (30 s)");
        if (!done) usleep(50);
      }
      REFUSED(commuxExchangeTest(ex, NULL), commuxInvalidArgument, "NULL");
      /* The cells are checked below before any wait: done means written. */
    } else {
      OK(commuxExchangeWait(ex));
    }
    for (long i = 0; i < shape[0]; ++i)
      for (long j = 0; j < shape[1]; ++j) {
        const int outX = i < wx || i >= wx + nx, outY = j < wy || j >= wy + ny;
        const long x = ((cx * nx + i - wx) % gx + gx) % gx, y = ((cy * ny + j - wy) % gy + gy) % gy;
        const int filled = !(outX && outY) || diagonals;
        const double wantA = filled ? halo_value(0, step, x, y) : -1.0;
        const float wantB = filled ? (float)(halo_value(1, step, x, y) / 1024.0) : -1.0f;
        if (a[i * shape[1] + j] != wantA || b[i * shape[1] + j] != wantB)
          fail("halo: step %d cell (%ld, %ld) holds %g / %g, not %g / %g (grid %d x %d, widths %ld %ld, diagonals %d)",
               step, i, j, a[i * shape[1] + j], (double)b[i * shape[1] + j], wantA, (double)wantB,
               dims[0], dims[1], wx, wy, diagonals);
      }
    if (step == 1) OK(commuxExchangeWait(ex)); /* after a tested step: its outcome, nothing more */
  }
  REFUSED(commuxExchangeWait(ex), commuxInvalidUsage, "without start");
  OK(commuxExchangeFree(ex));

  /* A ring: 24 bytes to the next rank in three pieces, from the one before into two. */
  const int next = (rank + 1) % size, before = (rank + size - 1) % size;
  unsigned char out[40], in[40];
  for (int i = 0; i < 40; ++i) out[i] = (unsigned char)(rank * 50 + i);
  memset(in, 0, sizeof(in));
  const commuxPiece sendPieces[3] = {{out, 4}, {out + 10, 12}, {out + 30, 8}};
  const commuxPiece recvPieces[2] = {{in + 1, 15}, {in + 20, 9}};
  commuxNeighbour ring[2];
  memset(ring, 0, sizeof(ring));
  size_t count = 0;
  if (next == before) { /* 2 ranks (or 1): one neighbour both ways */
    ring[0] = (commuxNeighbour){next, sendPieces, 3, recvPieces, 2};
    count = 1;
  } else {
    ring[0] = (commuxNeighbour){next, sendPieces, 3, NULL, 0};
    ring[1] = (commuxNeighbour){before, NULL, 0, recvPieces, 2};
    count = 2;
  }
  OK(commuxExchangeCreate(comm, ring, count, 78, &ex));
  /* Partitioned: the receives first, then the message as soon as it is "computed". */
  REFUSED(commuxExchangeReady(ex, next), commuxInvalidUsage, "outside a step");
  OK(commuxExchangeStartReceives(ex));
  OK(commuxExchangeReady(ex, next));
  if (next != rank) REFUSED(commuxExchangeReady(ex, next), commuxInvalidUsage, "already sent");
  REFUSED(commuxExchangeReady(ex, size + 5), commuxInvalidArgument, "not a neighbour");
  OK(commuxExchangeWait(ex));
  const int from[24] = {0, 1, 2, 3, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 30, 31, 32, 33, 34, 35, 36, 37};
  for (int k = 0; k < 24; ++k) {
    const unsigned char got = k < 15 ? in[1 + k] : in[20 + k - 15];
    if (got != (unsigned char)(before * 50 + from[k])) fail("graph exchange: byte %d is %u", k, got);
  }
  if (in[0] != 0 || in[16] != 0 || in[29] != 0) fail("graph exchange wrote outside its pieces");
  OK(commuxExchangeFree(ex));

  /* Refusals, before anything moves. */
  int wrong[2] = {size + 1, 1};
  REFUSED(commuxHaloCreate(comm, 2, wrong, periodic, 0, 2, fields, types, 2, shape, widths, 79, &ex),
          commuxInvalidArgument, "");
  const int64_t thin[2] = {3, shape[1]}, wide[2] = {2, 1};
  REFUSED(commuxHaloCreate(comm, 2, dims, periodic, 0, 2, fields, types, 2, thin, wide, 79, &ex),
          commuxInvalidArgument, "narrower than the halo");
  const commuxNeighbour twice[2] = {{next, sendPieces, 3, recvPieces, 2}, {next, sendPieces, 3, recvPieces, 2}};
  REFUSED(commuxExchangeCreate(comm, twice, 2, 80, &ex), commuxInvalidArgument, "named twice");
  if (ex != NULL) fail("a refused exchange was handed out");
  free(a);
  free(b);
}

/* Even and odd ranks in communicators of their own, ranked in reverse by key; rank 0 (with
 * 3 ranks or more) takes no color and gets none. Each works alone, and the parent after. */
static void test_split(commuxComm_t comm, int rank, int size) {
  const int color = (rank == 0 && size >= 3) ? COMMUX_SPLIT_NOCOLOR : rank % 2;
  commuxComm_t sub = (commuxComm_t)1;
  OK(commuxCommSplit(comm, color, -rank, &sub));
  if (color == COMMUX_SPLIT_NOCOLOR) {
    if (sub != NULL) fail("split without a color gave a communicator");
  } else {
    int members[32], n = 0;
    for (int r = 0; r < size; ++r)
      if (r % 2 == color && !(r == 0 && size >= 3)) members[n++] = r;
    int sub_rank = -1, sub_size = -1;
    OK(commuxCommUserRank(sub, &sub_rank));
    OK(commuxCommCount(sub, &sub_size));
    /* key -rank: the highest old rank comes first */
    int want = -1;
    for (int i = 0; i < n; ++i)
      if (members[n - 1 - i] == rank) want = i;
    if (sub_size != n || sub_rank != want) fail("split: rank %d of %d, expected %d of %d", sub_rank, sub_size, want, n);
    int32_t v = rank, sum = 0;
    for (int i = 0; i < n; ++i) sum += members[i];
    OK(commuxAllReduce(&v, &v, 1, commuxInt32, commuxSum, sub, NULL));
    if (v != sum) fail("allreduce in the split communicator: %d, expected %d", v, sum);
    OK(commuxCommFinalize(sub));
    OK(commuxCommDestroy(sub));
  }
  REFUSED(commuxCommSplit(comm, -5, 0, &sub), commuxInvalidArgument, "negative");
  int32_t one = 1;
  OK(commuxAllReduce(&one, &one, 1, commuxInt32, commuxSum, comm, NULL));
  if (one != size) fail("the parent after a split: %d", one);
}

static void test_reconnect(commuxComm_t* comm, int rank, int size, const commuxUniqueId* id,
                           int restarted) {
  if (restarted) {
    rebuild_and_check(*comm, rank, size);
    return;
  }
  OK(commuxBarrier(*comm, NULL));
  if (rank == size - 1) _exit(42); /* the harness restarts this rank */
  commuxResult_t async = commuxSuccess;
  for (int waited = 0; async == commuxSuccess; waited += 10) {
    if (waited > 30000) fail("the death of rank %d was not seen in 30 s", size - 1);
    OK(commuxCommGetAsyncError(*comm, &async));
    usleep(10000);
  }
  OK(commuxCommDestroy(*comm));
  *comm = init(0, rank, size, id);
  OK(commuxCommSetTimeout(*comm, 60000));
  rebuild_and_check(*comm, rank, size);
}

/* The survivors of a death shrink the communicator and go on: refusals first (nothing
 * changes), then the last rank dies and the others make a communicator without it, on which
 * every collective and message runs. */
static void test_shrink(commuxComm_t comm, int rank, int size) {
  commuxComm_t small = NULL;
  int bad[2] = {rank, 0};
  REFUSED(commuxCommShrink(comm, bad, 1, COMMUX_SHRINK_DEFAULT, &small), commuxInvalidArgument,
          "only the survivors");
  bad[0] = size;
  REFUSED(commuxCommShrink(comm, bad, 1, COMMUX_SHRINK_DEFAULT, &small), commuxInvalidArgument,
          "is not a rank");
  bad[0] = 0;
  REFUSED(commuxCommShrink(comm, bad, 2, COMMUX_SHRINK_DEFAULT, &small), commuxInvalidArgument,
          "twice");
  bad[0] = size - 1;
  REFUSED(commuxCommShrink(comm, bad, 1, 7, &small), commuxInvalidArgument, "flags");
  if (small != NULL) fail("a refused shrink returned a communicator");
  OK(commuxBarrier(comm, NULL));
  if (rank == size - 1) _exit(0); /* gone without a word */
  commuxResult_t async = commuxSuccess;
  for (int waited = 0; async == commuxSuccess; waited += 10) {
    if (waited > 30000) fail("the death of rank %d was not seen in 30 s", size - 1);
    OK(commuxCommGetAsyncError(comm, &async));
    usleep(10000);
  }
  const int victim = size - 1;
  OK(commuxCommShrink(comm, &victim, 1, COMMUX_SHRINK_DEFAULT, &small));
  int n = 0, r = -1;
  OK(commuxCommCount(small, &n));
  OK(commuxCommUserRank(small, &r));
  if (n != size - 1 || r != rank) fail("the shrunk communicator: rank %d of %d", r, n);
  test_messages(small, rank, size - 1);
  test_collectives(small, rank, size - 1, 6);
  OK(commuxCommFinalize(small));
  OK(commuxCommDestroy(small));
}

/* COMMUX_CHECK_COLLECTIVES=1 on the schedules' path (COMMUX_SHM=0): all-to-all counts that do
 * not fit (rank s's sendcounts[d] against rank d's recvcounts[s]) are refused on every rank
 * alike, before anything moves, instead of failing the one rank whose receive does not fit
 * while the others wait for the timeout; then the right counts still work. */
static void test_checkv(commuxComm_t comm, int rank, int size) {
  size_t sc[32], rc[32], so = 0, ro = 0;
  int32_t in[128], out[128];
  /* Refused well before the timeout: a rank left waiting for the others would take 60 s. */
  OK(commuxCommSetTimeout(comm, 60000));
  for (int k = 0; k < 2; ++k) {
    /* k = 0: rank 0 sends 2 to rank 1, which makes room for 1 (its receive would not fit);
     * k = 1: the last rank expects 3 from rank 1, which sends it 1 (a short message). */
    const int from = k == 0 ? 0 : 1, to = k == 0 ? 1 : size - 1;
    const size_t sent = k == 0 ? 2 : 1, expected = k == 0 ? 1 : 3;
    for (int d = 0; d < size; ++d) sc[d] = rc[d] = 1;
    if (rank == from) sc[to] = sent;
    if (rank == to) rc[from] = expected;
    for (int i = 0; i < 128; ++i) out[i] = rank * 1000 + i, in[i] = -7;
    char says[160];
    snprintf(says, sizeof(says), "rank %d sends %zu elements to rank %d, which expects %zu", from,
             sent, to, expected);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    REFUSED(commuxAllToAllv(out, sc, in, rc, commuxInt32, comm, NULL), commuxInvalidArgument, says);
    clock_gettime(CLOCK_MONOTONIC, &b);
    const double took = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    if (took > 20) fail("checkv: the refusal took %.1f s", took);
    for (int i = 0; i < 128; ++i)
      if (in[i] != -7) fail("checkv: a refused all-to-all wrote element %d", i);
    commuxResult_t async;
    OK(commuxCommGetAsyncError(comm, &async));
    if (async != commuxSuccess) fail("checkv: unhealthy after the refusal: %s", commuxGetLastError(NULL));
  }
  /* The right counts: rank s sends (s + d) % 3 + 1 elements to rank d. */
  for (int d = 0; d < size; ++d) {
    sc[d] = (size_t)((rank + d) % 3 + 1);
    rc[d] = (size_t)((d + rank) % 3 + 1);
  }
  for (int d = 0; d < size; ++d)
    for (size_t i = 0; i < sc[d]; ++i) out[so++] = rank * 1000 + d * 10 + (int32_t)i;
  OK(commuxAllToAllv(out, sc, in, rc, commuxInt32, comm, NULL));
  for (int s = 0; s < size; ++s)
    for (size_t i = 0; i < rc[s]; ++i, ++ro)
      if (in[ro] != s * 1000 + rank * 10 + (int32_t)i) fail("checkv: alltoallv element %zu is %d", ro, in[ro]);
  /* Equal blocks, and another collective: still in step. */
  for (int i = 0; i < size * 2; ++i) out[i] = rank * 100 + i;
  OK(commuxAllToAll(out, in, 2, commuxInt32, comm, NULL));
  for (int s = 0; s < size; ++s)
    for (int i = 0; i < 2; ++i)
      if (in[s * 2 + i] != s * 100 + rank * 2 + i) fail("checkv: alltoall element %d", s * 2 + i);
  int32_t one = 1;
  OK(commuxAllReduce(&one, &one, 1, commuxInt32, commuxSum, comm, NULL));
  if (one != size) fail("checkv: allreduce after the refusals: %d", one);
}

/* Where a rank that is to be killed says so (the harness then takes its SIGKILL as planned). */
static volatile char* g_killed_flags = NULL;

typedef struct {
  int rank;
  unsigned delay_us;
} Killer;

static void* kill_later(void* arg) {
  const Killer* k = (const Killer*)arg;
  usleep(k->delay_us);
  g_killed_flags[k->rank] = 1;
  __sync_synchronize();
  kill(getpid(), SIGKILL);
  return NULL;
}

/* A rank killed with SIGKILL in the middle of a loop of allreduces (COMMUX_SHM=0, so they run
 * over UCX, ring or recursive doubling by size; the victim, the moment and the size drawn
 * from the seed): every survivor's failed call and its asynchronous error name the dead
 * rank, which is what commuxCommShrink needs, and the survivors go on without it. */
static void test_kill(commuxComm_t comm, int rank, int size) {
  const int victim = 1 + (int)shared_random((unsigned)(size - 1)); /* rank 0 serves the store */
  const unsigned delay_us = 2000 + shared_random(150000);
  /* Mostly large: a survivor reading the victim's block (CMA) as it dies gets UCX's
   * "Input/output error" before the death watch has seen the death. */
  const size_t n = (size_t)1 << (10 + shared_random(13)); /* 1 Ki .. 4 Mi floats */
  /* Never freed: a peer's transfer from it that had begun may go on after the calls failed
   * here (UCX's rendezvous reads this process's memory), and reading memory gone aborts that
   * peer. */
  float* buf = malloc(n * sizeof(float));
  OK(commuxCommSetTimeout(comm, 60000));
  OK(commuxBarrier(comm, NULL));
  if (rank == victim) {
    static Killer k;
    k.rank = rank;
    k.delay_us = delay_us;
    pthread_t thread;
    if (pthread_create(&thread, NULL, kill_later, &k) != 0) fail("pthread_create failed");
  }
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  commuxResult_t r = commuxSuccess;
  long calls = 0;
  for (; r == commuxSuccess; ++calls) {
    for (size_t i = 0; i < n; ++i) buf[i] = 1.0f;
    r = commuxAllReduce(buf, buf, n, commuxFloat32, commuxSum, comm, NULL);
    if (r == commuxSuccess && buf[n - 1] != (float)size) fail("kill: allreduce summed %g", buf[n - 1]);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (b.tv_sec - a.tv_sec > 40) fail("kill: no allreduce failed in 40 s");
  }
  if (rank == victim) fail("kill: the victim's allreduce returned %s before it died", commuxGetErrorString(r));
  const double took = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
  char died[32];
  snprintf(died, sizeof(died), "rank %d died", victim);
  if (r != commuxRemoteError)
    fail("kill: allreduce #%ld returned %s: %s", calls, commuxGetErrorString(r), commuxGetLastError(NULL));
  if (strstr(commuxGetLastError(NULL), died) == NULL)
    fail("kill: %zu floats: the error does not say '%s': %s", n, died, commuxGetLastError(NULL));
  if (took > 30) fail("kill: the death took %.1f s to see", took);
  commuxResult_t async = commuxSuccess;
  OK(commuxCommGetAsyncError(comm, &async));
  char listed[32];
  snprintf(listed, sizeof(listed), "(dead ranks: %d)", victim);
  if (async != commuxRemoteError || strstr(commuxGetLastError(NULL), died) == NULL ||
      strstr(commuxGetLastError(NULL), listed) == NULL)
    fail("kill: the async error (%s) does not name rank %d: %s", commuxGetErrorString(async),
         victim, commuxGetLastError(NULL));
  commuxComm_t small = NULL;
  OK(commuxCommShrink(comm, &victim, 1, COMMUX_SHRINK_DEFAULT, &small));
  int32_t one = 1;
  OK(commuxAllReduce(&one, &one, 1, commuxInt32, commuxSum, small, NULL));
  if (one != size - 1) fail("kill: the allreduce after the shrink summed %d", one);
  OK(commuxCommFinalize(small));
  /* Nothing destroyed: UCX may still hold sends to the killed rank, and ucp_worker_destroy
   * purging them calls back into the engine as it is torn down (a crash at exit of its own,
   * with or without the naming). And every survivor has checked before any leaves the old
   * communicator (the allreduce above): one that leaves is a lost member too. */
  if (rank == 0) printf("capi_ranks: rank 0 saw the death named (%zu floats, %ld calls)\n", n, calls);
  fflush(stdout);
  fflush(stderr);
  _exit(0);
}

/* commuxCommAbort from another thread ends a receive that nothing would answer, and every
 * later call but destroy is refused. Each rank on its own communicator's receive from
 * itself, so the ranks do not depend on each other. */
typedef struct {
  commuxComm_t comm;
  int rank;
  commuxResult_t result;
} Blocked;

static void* receive_forever(void* arg) {
  Blocked* b = (Blocked*)arg;
  int32_t never = 0;
  b->result = commuxRecv(&never, 1, commuxInt32, b->rank, 5151, b->comm, NULL, NULL);
  return NULL;
}

static void test_abort(commuxComm_t comm, int rank) {
  OK(commuxCommSetTimeout(comm, 0)); /* no deadline: only the abort can end the receive */
  Blocked b = {comm, rank, commuxSuccess};
  pthread_t thread;
  if (pthread_create(&thread, NULL, receive_forever, &b) != 0) fail("pthread_create failed");
  usleep(300000);
  struct timespec a, z;
  clock_gettime(CLOCK_MONOTONIC, &a);
  OK(commuxCommAbort(comm));
  pthread_join(thread, NULL);
  clock_gettime(CLOCK_MONOTONIC, &z);
  const double took = (z.tv_sec - a.tv_sec) + (z.tv_nsec - a.tv_nsec) / 1e9;
  if (b.result != commuxRemoteError) fail("an aborted receive returned %s", commuxGetErrorString(b.result));
  if (took > 5) fail("the abort took %.1f s to end the receive", took);
  int32_t x = 1;
  REFUSED(commuxSend(&x, 1, commuxInt32, rank, 1, comm, NULL), commuxInvalidUsage, "abort");
}

/* A receive that times out or is freed while its rendezvous transfer is under way (TCP
 * only, half a GiB, a 30 ms timeout) hands its buffer back only once the transfer has
 * ended: nothing lands in it after the call returned. Once, the call returned at once and
 * the rest of the message landed afterwards. Five ways: commuxRecv, commuxIrecv and
 * commuxWait, commuxIrecv and commuxRequestFree, a window freed (its close timed out) while
 * a peer's put fills it, commuxIrecv and commuxCommDestroy (last: it ends the
 * communicator, *comm is NULL after). */
/* Bytes of p[0, n) in 8-byte words that hold b throughout (n a multiple of 8, p aligned:
 * a word at a time, so that the sanitizer builds count half a GiB in well under a second). */
static size_t count_byte(const unsigned char* p, size_t n, unsigned char b) {
  const uint64_t* w = (const uint64_t*)(const void*)p;
  const uint64_t all = 0x0101010101010101ull * b;
  size_t k = 0;
  for (size_t i = 0; i < n / 8; ++i) k += w[i] == all;
  return 8 * k;
}

static void test_cancel(commuxComm_t* handle, int rank) {
  const size_t bytes = (size_t)512 << 20;
  commuxComm_t comm = *handle;
  unsigned char* buffer = malloc(bytes);
  if (buffer == NULL) fail("no memory for %zu bytes", bytes);
  for (int way = 0; way < 5; ++way) {
    OK(commuxCommSetTimeout(comm, 60000));
    OK(commuxBarrier(comm, NULL));
    int32_t done = 0;
    if (way == 3) {
      commuxWin_t win = NULL;
      memset(buffer, rank == 1 ? 0xAB : 0x11, bytes);
      OK(commuxWinCreate(comm, buffer, bytes, &win));
      if (rank == 1) {
        OK(commuxWinPut(win, buffer, bytes, 0, 0));
        OK(commuxWinFree(win));
        OK(commuxSend(&done, 1, commuxInt32, 0, 90 + way, comm, NULL));
        continue;
      }
      usleep(20000); /* the put's data is arriving */
      OK(commuxCommSetTimeout(comm, 30));
      const commuxResult_t r = commuxWinFree(win);
      OK(commuxCommSetTimeout(comm, 60000));
      const size_t landed = count_byte(buffer, bytes, 0xAB);
      OK(commuxRecv(&done, 1, commuxInt32, 1, 90 + way, comm, NULL, NULL));
      const size_t later = count_byte(buffer, bytes, 0xAB);
      printf("capi_ranks: cancel way 3 (window): %s, %zu bytes landed at return, %zu later\n",
             commuxGetErrorString(r), landed, later);
      if (later != landed) fail("way 3: the window changed after commuxWinFree returned");
      continue;
    }
    if (rank == 1) {
      memset(buffer, 0xAB, bytes);
      commuxRequest_t sent;
      OK(commuxIsend(buffer, bytes, commuxUint8, 0, 77 + way, comm, NULL, &sent));
      /* Way 4: rank 0's communicator goes; its notice may fail the send first. */
      const commuxResult_t r = commuxWait(sent, NULL);
      if (r != commuxSuccess && (way < 4 || r != commuxRemoteError)) OK(r);
      /* Way 4: stay a moment, so that the transfer UCX still drives ends here rather than
       * with this process (rank 0's destroy then waits its 10 s for it: allowed, slow). */
      if (way == 4) usleep(2000000);
      if (way < 4) OK(commuxSend(&done, 1, commuxInt32, 0, 90 + way, comm, NULL));
      continue;
    }
    memset(buffer, 0x11, bytes);
    usleep(300000); /* the sender's announcement is here: the receive is matched at once */
    commuxResult_t r;
    if (way == 4) {
      commuxRequest_t request;
      OK(commuxIrecv(buffer, bytes, commuxUint8, 1, 77 + way, comm, NULL, &request));
      usleep(30000);
      r = commuxCommDestroy(comm);
      *handle = comm = NULL;
      const size_t landed = count_byte(buffer, bytes, 0xAB);
      usleep(1000000); /* the process's progress thread goes on driving UCX */
      const size_t later = count_byte(buffer, bytes, 0xAB);
      commuxRequestFree(request);
      printf("capi_ranks: cancel way 4: %s (%s), %zu bytes landed at return, %zu later\n",
             commuxGetErrorString(r), r == commuxSuccess ? "" : commuxGetLastError(NULL), landed,
             later);
      if (later != landed) fail("way 4: the buffer changed after commuxCommDestroy returned");
      continue;
    }
    if (way == 2) {
      commuxRequest_t request;
      OK(commuxIrecv(buffer, bytes, commuxUint8, 1, 77 + way, comm, NULL, &request));
      usleep(30000); /* the progress thread took the receive over and is filling it */
      r = commuxRequestFree(request);
    } else {
      OK(commuxCommSetTimeout(comm, 30));
      if (way == 0) {
        r = commuxRecv(buffer, bytes, commuxUint8, 1, 77 + way, comm, NULL, NULL);
      } else {
        commuxRequest_t request;
        OK(commuxIrecv(buffer, bytes, commuxUint8, 1, 77 + way, comm, NULL, &request));
        r = commuxWait(request, NULL);
      }
      OK(commuxCommSetTimeout(comm, 60000));
    }
    const size_t landed = count_byte(buffer, bytes, 0xAB);
    /* Driving the worker until the sender is done: whatever was still to land would now. */
    OK(commuxRecv(&done, 1, commuxInt32, 1, 90 + way, comm, NULL, NULL));
    const size_t later = count_byte(buffer, bytes, 0xAB);
    printf("capi_ranks: cancel way %d: %s, %zu of %zu bytes landed at return, %zu later\n", way,
           r == commuxSuccess ? "completed" : commuxGetErrorString(r), landed, bytes, later);
    if (later != landed) fail("way %d: the buffer changed after the call returned", way);
  }
  free(buffer);
}

static int run_rank(int mode, int rank, int size, volatile char* shared) {
  g_rank = rank;
  commuxUniqueId id;
  memset(&id, 0, sizeof(id));
  if (mode != 1) share_unique_id(rank, shared, &id);
  commuxComm_t comm = init(mode, rank, size, &id);
  OK(commuxCommSetTimeout(comm, 60000));
  if (mode == 2) {
    test_death(comm, rank, size);
  } else if (mode == 5) {
    test_abort(comm, rank);
  } else if (mode == 6) {
    test_shrink(comm, rank, size);
  } else if (mode == 7) {
    test_checkv(comm, rank, size);
  } else if (mode == 8) {
    test_kill(comm, rank, size); /* ends the process */
  } else if (mode == 9) {
    test_cancel(&comm, rank);
  } else if (mode == 3 || mode == 4) {
    test_reconnect(&comm, rank, size, &id, mode == 4);
  } else {
    test_messages(comm, rank, size);
    test_collectives(comm, rank, size, 12);
    test_refusals(comm, rank, size);
    test_memory(comm, rank, size);
    test_split(comm, rank, size);
    test_windows(comm, rank, size);
    test_halo(comm, rank, size);
    OK(commuxBarrier(comm, NULL));
  }
  if (mode != 2 && mode != 5 && mode != 6 && mode != 9) OK(commuxCommFinalize(comm)); /* no rank leaves while a peer still needs it */
  OK(commuxCommDestroy(comm));
  if (rank == 0) printf("capi_ranks: rank 0 checked %ld collective results\n", g_checked);
  return 0;
}

int main(int argc, char** argv) {
  int ranks = 2, mode = 0, deadline = 120, from_env = 0, held_port = -1;
  g_seed = (unsigned long)time(NULL);
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], "--rank-from-env")) from_env = 1;
  if (from_env) {
    g_seed = 42; /* every rank draws the same sizes and roots unless told another seed */
    for (int i = 1; i + 1 < argc; ++i)
      if (!strcmp(argv[i], "--seed")) g_seed = strtoul(argv[i + 1], NULL, 10);
    g_shared = g_seed;
    const char* r = getenv("COMMUX_RANK");
    const char* n = getenv("COMMUX_SIZE");
    if (!r || !n) fail("--rank-from-env needs COMMUX_RANK and COMMUX_SIZE");
    return run_rank(1, atoi(r), atoi(n), NULL);
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ranks")) ranks = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed")) g_seed = strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--deadline")) deadline = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--mode"))
      mode = !strcmp(argv[i + 1], "env")         ? 1
             : !strcmp(argv[i + 1], "death")     ? 2
             : !strcmp(argv[i + 1], "reconnect") ? 3
             : !strcmp(argv[i + 1], "abort")     ? 5
             : !strcmp(argv[i + 1], "shrink")    ? 6
             : !strcmp(argv[i + 1], "checkv")    ? 7
             : !strcmp(argv[i + 1], "kill")      ? 8
             : !strcmp(argv[i + 1], "cancel")    ? 9
                                                 : 0;
  }
  if (ranks < 1 || ranks > 32) fail("--ranks must be 1 .. 32");
  if ((mode == 2 || mode == 3) && ranks < 2) fail("--mode death and reconnect need 2 ranks or more");
  if (mode == 6 && ranks < 3) fail("--mode shrink needs 3 ranks or more");
  if (mode == 7 && ranks < 3) fail("--mode checkv needs 3 ranks or more");
  if (mode == 8 && ranks < 3) fail("--mode kill needs 3 ranks or more");
  if (mode == 9 && ranks != 2) fail("--mode cancel needs 2 ranks");
  if (mode == 9) setenv("UCX_TLS", "tcp", 1); /* a rendezvous slow enough to time out in */
  if (mode == 7 || mode == 8) {
    /* Before any rank reads its settings: the collectives run as UCX schedules. */
    setenv("COMMUX_SHM", "0", 1);
    if (mode == 7) setenv("COMMUX_CHECK_COLLECTIVES", "1", 1);
  }
  g_shared = g_seed;
  printf("capi_ranks: %d ranks, mode %d, seed %lu (replay with --seed %lu)\n", ranks, mode, g_seed, g_seed);
  fflush(stdout);
  volatile char* shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) fail("mmap: %s", strerror(errno));
  g_killed_flags = shared + 2048;
  if (mode == 1) {
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%d", reserve_port(&held_port));
    setenv("COMMUX_BOOTSTRAP", where, 1);
    setenv("COMMUX_BOOTSTRAP_SECRET", "capi-test", 1);
    char n[16];
    snprintf(n, sizeof(n), "%d", ranks);
    setenv("COMMUX_SIZE", n, 1);
  }
  pid_t pids[32];
  for (int r = 0; r < ranks; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      if (held_port >= 0) close(held_port);
      if (mode == 1) {
        char v[16];
        snprintf(v, sizeof(v), "%d", r);
        setenv("COMMUX_RANK", v, 1);
      }
      exit(run_rank(mode, r, ranks, shared));
    }
  }
  int failed = 0, left = ranks;
  time_t end = time(NULL) + deadline;
  while (left > 0) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      if (mode == 3 && p == pids[ranks - 1] && WIFEXITED(status) && WEXITSTATUS(status) == 42) {
        /* The rank that died on purpose: a new process takes its place. */
        pids[ranks - 1] = fork();
        if (pids[ranks - 1] == 0) exit(run_rank(4, ranks - 1, ranks, shared));
        continue;
      }
      --left;
      int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      for (int r = 0; r < ranks; ++r) /* a rank killed on purpose (--mode kill) */
        if (p == pids[r] && g_killed_flags[r] && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ok = 1;
      if (!ok) {
        fprintf(stderr, "capi_ranks: a rank (pid %d) failed (status %d); seed %lu\n", (int)p, status, g_seed);
        failed = 1;
      }
      continue;
    }
    if (time(NULL) > end) {
      fprintf(stderr, "capi_ranks: deadline of %d s passed; killing the ranks (seed %lu)\n", deadline, g_seed);
      for (int r = 0; r < ranks; ++r) kill(pids[r], SIGKILL);
      while (waitpid(-1, NULL, 0) > 0) {}
      return 1;
    }
    usleep(10000);
  }
  if (held_port >= 0) close(held_port);
  printf("capi_ranks: %s\n", failed ? "FAILED" : "passed");
  return failed;
}
