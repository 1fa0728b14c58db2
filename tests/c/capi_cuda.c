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

static int g_rank = -1;
static unsigned long g_seed = 1;
static long g_checked = 0;

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d (seed %lu): ", g_rank, g_seed);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

#define OK(call)                                                                          \
  do {                                                                                    \
    commuxResult_t r_ = (call);                                                           \
    if (r_ != commuxSuccess)                                                              \
      fail("%s:%d: %s -> %s: %s", __FILE__, __LINE__, #call, commuxGetErrorString(r_),    \
           commuxGetLastError(NULL));                                                     \
  } while (0)

#define CUDA(call)                                                                        \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) fail("%s:%d: %s -> %s", __FILE__, __LINE__, #call,             \
                                cudaGetErrorString(e_));                                  \
  } while (0)

#define REFUSED(call, code, says)                                                         \
  do {                                                                                    \
    commuxResult_t r_ = (call);                                                           \
    if (r_ != (code))                                                                     \
      fail("%s:%d: %s returned %s, expected %s (%s)", __FILE__, __LINE__, #call,          \
           commuxGetErrorString(r_), commuxGetErrorString(code), commuxGetLastError(NULL)); \
    if (strstr(commuxGetLastError(NULL), (says)) == NULL)                                 \
      fail("%s:%d: %s: message '%s' does not say '%s'", __FILE__, __LINE__, #call,        \
           commuxGetLastError(NULL), (says));                                             \
  } while (0)

/* The same draws on every rank. */
static unsigned long g_shared = 1;
static unsigned long draw(unsigned long n) {
  g_shared = g_shared * 6364136223846793005UL + 1442695040888963407UL;
  return (g_shared >> 33) % n;
}

/* Small integers: exact in every type below, also in bfloat16 sums of a few ranks. */
static int value_of(int rank, size_t i) { return (int)((rank * 7 + i * 3) % 11) + 1; }

static uint16_t to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

typedef struct {
  commuxDataType_t type;
  size_t size;
  const char* name;
} Type;
static const Type kTypes[] = {{commuxFloat32, 4, "float32"},
                              {commuxBfloat16, 2, "bfloat16"},
                              {commuxInt32, 4, "int32"},
                              {commuxFloat64, 8, "float64"}};

static void put(const Type* t, void* host, size_t i, double v) {
  switch (t->type) {
    case commuxFloat32: ((float*)host)[i] = (float)v; break;
    case commuxBfloat16: ((uint16_t*)host)[i] = to_bf16((float)v); break;
    case commuxInt32: ((int32_t*)host)[i] = (int32_t)v; break;
    default: ((double*)host)[i] = v; break;
  }
}
static double get(const Type* t, const void* host, size_t i) {
  switch (t->type) {
    case commuxFloat32: return ((const float*)host)[i];
    case commuxBfloat16: return from_bf16(((const uint16_t*)host)[i]);
    case commuxInt32: return ((const int32_t*)host)[i];
    default: return ((const double*)host)[i];
  }
}

static double fold(commuxRedOp_t op, int size, size_t i, int offset_rank_block) {
  double acc = value_of(0, i + (size_t)offset_rank_block);
  for (int r = 1; r < size; ++r) {
    double v = value_of(r, i + (size_t)offset_rank_block);
    acc = op == commuxSum ? acc + v : (v > acc ? v : acc);
  }
  return acc;
}

static void expect(const Type* t, const void* host, size_t i, double want, const char* what) {
  double got = get(t, host, i);
  if (got != want) fail("%s (%s) element %zu: %g, expected %g", what, t->name, i, got, want);
  ++g_checked;
}

/* --- the device cases --------------------------------------------------------------- */

static void run_collectives(commuxComm_t comm, int rank, int size, cudaStream_t stream) {
  const size_t sizes[] = {0, 1, 4099, (1u << 18) + 3};
  for (int round = 0; round < 8; ++round) {
    const Type* t = &kTypes[draw(4)];
    const size_t n = sizes[draw(4)];
    const commuxRedOp_t op = draw(2) ? commuxSum : commuxMax;
    const int root = (int)draw((unsigned long)size);
    const size_t bytes = n * t->size, all = bytes * (size_t)size;
    void* host = malloc(all + 16);
    void *dev_a = NULL, *dev_b = NULL;
    CUDA(cudaMalloc(&dev_a, all + 16));
    CUDA(cudaMalloc(&dev_b, all + 16));

    /* allreduce, out of place: the input written on the stream right before the call. */
    for (size_t i = 0; i < n; ++i) put(t, host, i, value_of(rank, i));
    CUDA(cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice, stream));
    OK(commuxAllReduce(dev_a, dev_b, n, t->type, op, comm, stream));
    CUDA(cudaMemcpyAsync(host, dev_b, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; ++i) expect(t, host, i, fold(op, size, i, 0), "allreduce");

    /* allreduce in place */
    for (size_t i = 0; i < n; ++i) put(t, host, i, value_of(rank, i));
    CUDA(cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice, stream));
    OK(commuxAllReduce(dev_a, dev_a, n, t->type, op, comm, stream));
    CUDA(cudaMemcpyAsync(host, dev_a, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; ++i) expect(t, host, i, fold(op, size, i, 0), "allreduce in place");

    /* reduce to `root`: the others' inputs keep their values */
    for (size_t i = 0; i < n; ++i) put(t, host, i, value_of(rank, i));
    CUDA(cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice, stream));
    OK(commuxReduce(dev_a, dev_b, n, t->type, op, root, comm, stream));
    CUDA(cudaMemcpyAsync(host, rank == root ? dev_b : dev_a, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; ++i)
      expect(t, host, i, rank == root ? fold(op, size, i, 0) : value_of(rank, i), "reduce");

    /* broadcast from `root` */
    for (size_t i = 0; i < n; ++i) put(t, host, i, rank == root ? value_of(root, i) : -1);
    CUDA(cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice, stream));
    OK(commuxBroadcast(dev_a, dev_a, n, t->type, root, comm, stream));
    CUDA(cudaMemcpyAsync(host, dev_a, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; ++i) expect(t, host, i, value_of(root, i), "broadcast");

    /* allgather */
    for (size_t i = 0; i < n; ++i) put(t, host, i, value_of(rank, i));
    CUDA(cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice, stream));
    OK(commuxAllGather(dev_a, dev_b, n, t->type, comm, stream));
    CUDA(cudaMemcpyAsync(host, dev_b, all, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (int r = 0; r < size; ++r)
      for (size_t i = 0; i < n; ++i) expect(t, host, (size_t)r * n + i, value_of(r, i), "allgather");

    /* reduce_scatter: block `rank` of the fold of size blocks */
    for (size_t i = 0; i < n * (size_t)size; ++i) put(t, host, i, value_of(rank, i));
    CUDA(cudaMemcpyAsync(dev_a, host, all, cudaMemcpyHostToDevice, stream));
    OK(commuxReduceScatter(dev_a, dev_b, n, t->type, op, comm, stream));
    CUDA(cudaMemcpyAsync(host, dev_b, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; ++i)
      expect(t, host, i, fold(op, size, i, rank * (int)n), "reduce_scatter");

    /* messages: a ring with a tag per round, posted together in a group */
    const int next = (rank + 1) % size, before = (rank + size - 1) % size;
    for (size_t i = 0; i < n; ++i) put(t, host, i, value_of(rank, i));
    CUDA(cudaMemcpyAsync(dev_a, host, bytes, cudaMemcpyHostToDevice, stream));
    OK(commuxGroupStart());
    OK(commuxSend(dev_a, n, t->type, next, 100 + round, comm, stream));
    OK(commuxRecv(dev_b, n, t->type, before, 100 + round, comm, stream, NULL));
    OK(commuxGroupEnd());
    CUDA(cudaMemcpyAsync(host, dev_b, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < n; ++i) expect(t, host, i, value_of(before, i), "ring message");

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
      fail("a stream with host memory returned %s (%s)", commuxGetErrorString(r), commuxGetLastError(NULL));
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
    if (!strcmp(argv[i], "--ranks")) ranks = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed")) g_seed = strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--deadline")) deadline = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--mode")) mode = !strcmp(argv[i + 1], "refusals") ? 1 : 0;
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
  volatile char* shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
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
        fprintf(stderr, "capi_cuda: a rank (pid %d) failed (status %d); seed %lu\n", (int)p, status, g_seed);
        failed = 1;
      }
      continue;
    }
    if (time(NULL) > end) {
      fprintf(stderr, "capi_cuda: deadline of %d s passed; killing the ranks (seed %lu)\n", deadline, g_seed);
      for (int r = 0; r < ranks; ++r) kill(pids[r], SIGKILL);
      while (waitpid(-1, NULL, 0) > 0) {}
      return 1;
    }
    usleep(10000);
  }
  printf("capi_cuda: %s\n", failed ? "FAILED" : "passed");
  return failed;
}
