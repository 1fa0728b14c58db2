/* The C API on CUDA device memory, as a C program sees it: forked ranks (CUDA is touched
 * only after the fork) share the GPUs, meet through a unique id, and run messages and the
 * collectives that take device memory on a stream of their own, with seeded sizes, types,
 * operations and roots. Inputs are written with an asynchronous copy on the call's stream
 * just before the call and read back with one just after it, so a call that did not wait
 * for its stream, or that returned before its result was there in the stream's order,
 * fails. Every result is checked element by element.
 *
 *   capi_cuda --mode device [--ranks N] [--seed S]   needs a GPU; exits 77 (skipped) without
 *   capi_cuda --mode refusals                        runs anywhere: a stream with host memory
 *                                                    is refused, the communicator goes on
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
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

#define CUDA(call)                                                                \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess)                                                        \
      fail("%s:%d: %s -> %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
  } while (0)

/* --- the device cases --------------------------------------------------------------- */

static void run_collectives(commuxComm_t comm, int rank, int size, cudaStream_t stream) {
  const size_t sizes[] = {0, 1, 4099, (1u << 18) + 3};
  for (int round = 0; round < 8; ++round) {
    const TypeInfo* t = &kTypes[shared_random(sizeof(kTypes) / sizeof(kTypes[0]))];
    const size_t n = sizes[shared_random(4)];
    const commuxRedOp_t op = shared_random(2) ? commuxSum : commuxMax;
    const int root = (int)shared_random((unsigned)size);
    const size_t bytes = n * t->size, all = bytes * (size_t)size;
    void* host = malloc(all + 16);
    void *dev_a = NULL, *dev_b = NULL;
    CUDA(cudaMalloc(&dev_a, all + 16));
    CUDA(cudaMalloc(&dev_b, all + 16));

    /* allreduce, out of place: the input written on the stream right before the call. */
    for (size_t i = 0; i < n; ++i) put(host, t->type, i, value_of(rank, i));
    CUDA(cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice, stream));
    OK(commuxAllReduce(dev_a, dev_b, n, t->type, op, comm, stream));
    CUDA(cudaMemcpyAsync(host, dev_b, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; ++i) check_value("allreduce", t, host, i, fold(op, size, i));

    /* allreduce in place */
    for (size_t i = 0; i < n; ++i) put(host, t->type, i, value_of(rank, i));
    CUDA(cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice, stream));
    OK(commuxAllReduce(dev_a, dev_a, n, t->type, op, comm, stream));
    CUDA(cudaMemcpyAsync(host, dev_a, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; ++i) check_value("allreduce in place", t, host, i, fold(op, size, i));

    /* reduce to `root`: the others' inputs keep their values */
    for (size_t i = 0; i < n; ++i) put(host, t->type, i, value_of(rank, i));
    CUDA(cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice, stream));
    OK(commuxReduce(dev_a, dev_b, n, t->type, op, root, comm, stream));
    CUDA(
        cudaMemcpyAsync(host, rank == root ? dev_b : dev_a, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; ++i)
      check_value("reduce", t, host, i, rank == root ? fold(op, size, i) : value_of(rank, i));

    /* broadcast from `root` */
    for (size_t i = 0; i < n; ++i) put(host, t->type, i, rank == root ? value_of(root, i) : 0);
    CUDA(cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice, stream));
    OK(commuxBroadcast(dev_a, dev_a, n, t->type, root, comm, stream));
    CUDA(cudaMemcpyAsync(host, dev_a, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; ++i) check_value("broadcast", t, host, i, value_of(root, i));

    /* allgather */
    for (size_t i = 0; i < n; ++i) put(host, t->type, i, value_of(rank, i));
    CUDA(cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice, stream));
    OK(commuxAllGather(dev_a, dev_b, n, t->type, comm, stream));
    CUDA(cudaMemcpyAsync(host, dev_b, all, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (int r = 0; r < size; ++r)
      for (size_t i = 0; i < n; ++i)
        check_value("allgather", t, host, (size_t)r * n + i, value_of(r, i));

    /* reduce_scatter: block `rank` of the fold of size blocks */
    for (size_t i = 0; i < n * (size_t)size; ++i) put(host, t->type, i, value_of(rank, i));
    CUDA(cudaMemcpyAsync(dev_a, host, all, cudaMemcpyHostToDevice, stream));
    OK(commuxReduceScatter(dev_a, dev_b, n, t->type, op, comm, stream));
    CUDA(cudaMemcpyAsync(host, dev_b, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; ++i)
      check_value("reduce_scatter", t, host, i, fold(op, size, (size_t)rank * n + i));

    /* messages: a ring with a tag per round, posted together in a group */
    const int next = (rank + 1) % size, before = (rank + size - 1) % size;
    for (size_t i = 0; i < n; ++i) put(host, t->type, i, value_of(rank, i));
    CUDA(cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice, stream));
    OK(commuxGroupStart());
    OK(commuxSend(dev_a, n, t->type, next, 100 + round, comm, stream));
    OK(commuxRecv(dev_b, n, t->type, before, 100 + round, comm, stream, NULL));
    OK(commuxGroupEnd());
    CUDA(cudaMemcpyAsync(host, dev_b, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; ++i) check_value("ring message", t, host, i, value_of(before, i));

    CUDA(cudaFree(dev_a));
    CUDA(cudaFree(dev_b));
    free(host);
  }
}

static void run_device_refusals(commuxComm_t comm, int size, cudaStream_t stream) {
  void* dev = NULL;
  CUDA(cudaMalloc(&dev, 64 * (size_t)size));
  REFUSED(commuxAllReduce(dev, dev, 4, commuxFloat32, commuxSum, comm, NULL), commuxInvalidArgument,
          "but the stream is NULL");
  REFUSED(commuxAllToAll(dev, (char*)dev + 32, 1, commuxFloat32, comm, stream), commuxUnsupported,
          "takes host memory");
  OK(commuxAllReduce(dev, dev, 4, commuxFloat32, commuxSum, comm, stream)); /* still usable */
  CUDA(cudaStreamSynchronize(stream));
  CUDA(cudaFree(dev));
}

static int run_rank(int mode, int rank, int size, volatile char* shared) {
  g_rank = rank;
  g_shared = g_seed;
  commuxUniqueId id;
  if (rank == 0) {
    OK(commuxGetUniqueId(&id));
    memcpy((char*)shared + 8, &id, sizeof id);
    __atomic_store_n((volatile int*)shared, 1, __ATOMIC_RELEASE);
  } else {
    while (!__atomic_load_n((volatile int*)shared, __ATOMIC_ACQUIRE)) usleep(1000);
    memcpy(&id, (const char*)shared + 8, sizeof id);
  }
  commuxComm_t comm;
  OK(commuxCommInitRank(&comm, size, id, rank));
  if (mode == 0) {
    int gpus = 0;
    CUDA(cudaGetDeviceCount(&gpus));
    CUDA(cudaSetDevice(rank % gpus));
    cudaStream_t stream;
    CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    run_collectives(comm, rank, size, stream);
    run_device_refusals(comm, size, stream);
    CUDA(cudaStreamDestroy(stream));
  } else {
    /* No GPU needed: a stream with host memory is refused before anything moves (or, in a
     * build without the device path, the stream itself is), and the communicator goes on. */
    float x[4] = {1, 2, 3, 4};
    commuxResult_t r = commuxAllReduce(x, x, 4, commuxFloat32, commuxSum, comm, (void*)1);
    if (r != commuxInvalidArgument && r != commuxUnsupported)
      fail("a stream with host memory returned %s (%s)", commuxGetErrorString(r),
           commuxGetLastError(NULL));
    if (r == commuxInvalidArgument && !strstr(commuxGetLastError(NULL), "is host memory"))
      fail("the refusal does not say why: %s", commuxGetLastError(NULL));
    OK(commuxAllReduce(x, x, 4, commuxFloat32, commuxSum, comm, NULL));
    for (int i = 0; i < 4; ++i)
      if (x[i] != (float)((i + 1) * size)) fail("the host allreduce after the refusal: %g", x[i]);
    g_checked += 4;
  }
  OK(commuxCommFinalize(comm));
  OK(commuxCommDestroy(comm));
  if (rank == 0) printf("capi_cuda: rank 0 checked %ld results\n", g_checked);
  return 0;
}

int main(int argc, char** argv) {
  int ranks = 2, mode = 0, deadline = 240;
  g_seed = (unsigned long)time(NULL);
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ranks"))
      ranks = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed"))
      g_seed = strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--deadline"))
      deadline = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--mode"))
      mode = !strcmp(argv[i + 1], "refusals") ? 1 : 0;
  }
  if (ranks < 1 || ranks > 16) fail("--ranks must be 1 .. 16");
  printf("capi_cuda: %d ranks, mode %s, seed %lu (replay with --seed %lu)\n", ranks,
         mode ? "refusals" : "device", g_seed, g_seed);
  fflush(stdout);
  if (mode == 0) {
    /* Whether there is a GPU, asked in a child: CUDA must not be initialised before fork. */
    pid_t probe = fork();
    if (probe == 0) {
      int gpus = 0;
      exit(cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0 ? 0 : 77);
    }
    int status = 0;
    waitpid(probe, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      printf("capi_cuda: no GPU here: skipped\n");
      return 77;
    }
  }
  volatile char* shared =
      mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) fail("mmap: %s", strerror(errno));
  pid_t pids[16];
  for (int r = 0; r < ranks; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) exit(run_rank(mode, r, ranks, shared));
  }
  int failed = 0, left = ranks;
  time_t end = time(NULL) + deadline;
  while (left > 0) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      --left;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "capi_cuda: a rank (pid %d) failed (status %d); seed %lu\n", (int)p, status,
                g_seed);
        failed = 1;
      }
      continue;
    }
    if (time(NULL) > end) {
      fprintf(stderr, "capi_cuda: deadline of %d s passed; killing the ranks (seed %lu)\n",
              deadline, g_seed);
      for (int r = 0; r < ranks; ++r) kill(pids[r], SIGKILL);
      while (waitpid(-1, NULL, 0) > 0) {
      }
      return 1;
    }
    usleep(10000);
  }
  printf("capi_cuda: %s\n", failed ? "FAILED" : "passed");
  return failed;
}
