/* commux's C API beside Open MPI's C API, in the same processes and the same minutes: the
 * job starts under mpirun, rank 0 makes a commux unique id and MPI_Bcast hands it to the
 * others (NCCL's way), and every point alternates blocks between the two libraries, so a
 * noisy machine slows both alike. Per point: calibrate the iterations per block (1, 8, 64,
 * ... until one lasts a quarter of a block), then ROUNDS blocks per library of a short
 * warm-up, a barrier and k timed calls; a block's time is the max over ranks; the median
 * block is reported (p2p one way: half a ping-pong between ranks 0 and 1). Every buffer is
 * written before timing (untouched pages would read as the kernel's shared zero page).
 *
 *   mpirun -np N capi_vs_mpi [ROUNDS] [BLOCK_SECONDS]       (scripts: benchmarks/capi_vs_mpi.sh)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <commux/commux.h>

#define CHECK(call)                                                                     \
  do {                                                                                  \
    commuxResult_t r_ = (call);                                                         \
    if (r_ != commuxSuccess) {                                                          \
      fprintf(stderr, "%s: %s\n", #call, commuxGetLastError(NULL));                     \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                     \
    }                                                                                   \
  } while (0)

typedef struct {
  const char* op; /* "p2p" or "allreduce" */
  long bytes;
} Point;

static int g_rank, g_size;
static commuxComm_t g_comm;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One call of `point` with library `lib` (0 commux, 1 MPI) on `buf`. */
static void once(const Point* point, int lib, float* buf) {
  const size_t n = (size_t)(point->bytes / 4);
  if (strcmp(point->op, "p2p") == 0) {
    if (g_rank > 1) return;
    const int peer = 1 - g_rank;
    if (lib == 0) {
      if (g_rank == 0) {
        CHECK(commuxSend(buf, n, commuxFloat32, peer, 0, g_comm, NULL));
        CHECK(commuxRecv(buf, n, commuxFloat32, peer, 0, g_comm, NULL, NULL));
      } else {
        CHECK(commuxRecv(buf, n, commuxFloat32, peer, 0, g_comm, NULL, NULL));
        CHECK(commuxSend(buf, n, commuxFloat32, peer, 0, g_comm, NULL));
      }
    } else {
      if (g_rank == 0) {
        MPI_Send(buf, (int)n, MPI_FLOAT, peer, 0, MPI_COMM_WORLD);
        MPI_Recv(buf, (int)n, MPI_FLOAT, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, (int)n, MPI_FLOAT, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, (int)n, MPI_FLOAT, peer, 0, MPI_COMM_WORLD);
      }
    }
  } else {
    if (lib == 0) {
      CHECK(commuxAllReduce(buf, buf, n, commuxFloat32, commuxSum, g_comm, NULL));
    } else {
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
  }
}

static void barrier(int lib) {
  if (lib == 0) {
    CHECK(commuxBarrier(g_comm, NULL));
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

/* Seconds per call of k calls, the max over ranks. */
static double block(const Point* point, int lib, float* buf, long k) {
  for (long i = 0; i < (k < 8 ? k : 8); ++i) once(point, lib, buf); /* warm-up */
  barrier(lib);
  const double start = now();
  for (long i = 0; i < k; ++i) once(point, lib, buf);
  double mine = (now() - start) / (double)k, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const int rounds = argc > 1 ? atoi(argv[1]) : 7;
  const double block_seconds = argc > 2 ? atof(argv[2]) : 0.2;

  commuxUniqueId id;
  if (g_rank == 0) CHECK(commuxGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  CHECK(commuxCommInitRank(&g_comm, g_size, id, g_rank));

  static const Point points[] = {{"p2p", 8}, {"allreduce", 8}, {"allreduce", 1 << 20},
                                 {"allreduce", 64 << 20}};
  const int npoints = (int)(sizeof(points) / sizeof(points[0]));
  if (g_rank == 0) {
    printf("%d ranks, %d blocks per library, median block (us per call; p2p one way)\n", g_size, rounds);
    printf("%-10s %10s %12s %12s %14s\n", "op", "bytes", "commux C", "Open MPI C", "commux / MPI");
  }
  for (int p = 0; p < npoints; ++p) {
    const Point* point = &points[p];
    const size_t n = (size_t)(point->bytes / 4);
    float* buf = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; ++i) buf[i] = 1.0f; /* written: no zero-page reads */
    /* Calibrate on commux, the same k for both libraries. */
    long k = 1;
    while (k < (1L << 20)) {
      if (block(point, 0, buf, k) * (double)k >= block_seconds / 4) break;
      k *= 8;
    }
    double times[2][64];
    const int r = rounds < 64 ? rounds : 64;
    for (int i = 0; i < r; ++i) {
      /* Alternate which library goes first, so neither always follows the other. */
      const int first = i % 2;
      times[first][i] = block(point, first, buf, k);
      times[1 - first][i] = block(point, 1 - first, buf, k);
    }
    qsort(times[0], (size_t)r, sizeof(double), by_value);
    qsort(times[1], (size_t)r, sizeof(double), by_value);
    const double scale = strcmp(point->op, "p2p") == 0 ? 0.5e6 : 1e6;
    const double cx = times[0][r / 2] * scale, mpi = times[1][r / 2] * scale;
    if (g_rank == 0) {
      printf("%-10s %10ld %12.2f %12.2f %14.2f\n", point->op, point->bytes, cx, mpi, cx / mpi);
      fflush(stdout);
    }
    free(buf);
  }
  CHECK(commuxCommFinalize(g_comm));
  CHECK(commuxCommDestroy(g_comm));
  MPI_Finalize();
  return 0;
}
