/* Open MPI in C, timed by the same rules as commux.bench's Python ranks (measure.py), so
 * its column sits next to commux's and gloo's: per point, calibrate the iterations per
 * block (1, 8, 64, 512 until a run lasts a quarter block; the slowest rank decides), then
 * `rounds` blocks of a short warm-up, a barrier and k timed iterations; each block's time
 * is the max over ranks; rank 0 prints the median and minimum over blocks, one JSON object
 * per line. Every buffer is written before timing (untouched pages would all read as the
 * kernel's shared zero page).
 *
 *   mpirun -n R mpi_bench ROUNDS BLOCK_SECONDS MAX_ITERS OP:ELEMENTS [OP:ELEMENTS ...]
 *
 * ELEMENTS is each rank's float32 input count (commux.bench.sizes.element_count). Compiled
 * on demand by commux.bench (mpicc), so commux itself never links MPI. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char* op;
  long n;
  int rank, size;
  float *a, *b;
} Point;

static float* filled(long n) {
  float* p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) {
    fprintf(stderr, "mpi_bench: out of memory for %ld floats\n", n);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(p, 0, (size_t)n * sizeof(float));
  return p;
}

static void once(Point* p) {
  const int n = (int)p->n;
  if (strcmp(p->op, "p2p") == 0) {
    if (p->rank == 0) {
      MPI_Send(p->a, n, MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(p->a, n, MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (p->rank == 1) {
      MPI_Recv(p->a, n, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(p->a, n, MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
    }
  } else if (strcmp(p->op, "allreduce") == 0) {
    MPI_Allreduce(MPI_IN_PLACE, p->a, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  } else if (strcmp(p->op, "allgather") == 0) {
    MPI_Allgather(p->a, n, MPI_FLOAT, p->b, n, MPI_FLOAT, MPI_COMM_WORLD);
  } else if (strcmp(p->op, "reduce_scatter") == 0) {
    MPI_Reduce_scatter_block(p->a, p->b, n / p->size, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  } else if (strcmp(p->op, "broadcast") == 0) {
    MPI_Bcast(p->a, n, MPI_FLOAT, 0, MPI_COMM_WORLD);
  } else if (strcmp(p->op, "alltoall") == 0) {
    MPI_Alltoall(p->a, n / p->size, MPI_FLOAT, p->b, n / p->size, MPI_FLOAT, MPI_COMM_WORLD);
  } else {
    fprintf(stderr, "mpi_bench: unknown op %s\n", p->op);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

static double timed(Point* p, long k) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (long i = 0; i < k; ++i) once(p);
  return MPI_Wtime() - t0;
}

static double slowest(double t) {
  double m;
  MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

static int cmp(const void* x, const void* y) {
  const double a = *(const double*)x, b = *(const double*)y;
  return a < b ? -1 : a > b;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 5) {
    if (rank == 0) fprintf(stderr, "usage: mpi_bench ROUNDS BLOCK_SECONDS MAX_ITERS OP:ELEMENTS...\n");
    MPI_Finalize();
    return 2;
  }
  const int rounds = atoi(argv[1]);
  const double block = atof(argv[2]);
  const long maxIters = atol(argv[3]);
  double* per = malloc(sizeof(double) * (size_t)rounds);
  for (int i = 4; i < argc; ++i) {
    char op[64];
    long n = 0;
    if (sscanf(argv[i], "%63[^:]:%ld", op, &n) != 2) {
      if (rank == 0) fprintf(stderr, "mpi_bench: bad point %s\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    Point p = {op, n, rank, size, NULL, NULL};
    long out = strcmp(op, "allgather") == 0 ? n * size : n;
    p.a = filled(n);
    p.b = filled(out);
    once(&p); /* untimed first call */
    long k = 1;
    double t;
    for (;;) {
      t = slowest(timed(&p, k));
      if (t >= block / 4 || k >= 512) break;
      k *= 8;
    }
    double perIter = t / (double)k;
    if (perIter < 1e-9) perIter = 1e-9;
    long iters = (long)(block / perIter + 0.5);
    if (iters < 1) iters = 1;
    if (iters > maxIters) iters = maxIters;
    long warm = perIter >= block ? 0 : (iters / 10 < 1 ? 1 : (iters / 10 > 10 ? 10 : iters / 10));
    for (int r = 0; r < rounds; ++r) {
      for (long w = 0; w < warm; ++w) once(&p);
      per[r] = slowest(timed(&p, iters)) / (double)iters;
    }
    if (rank == 0) {
      qsort(per, (size_t)rounds, sizeof(double), cmp);
      const double median =
          rounds % 2 ? per[rounds / 2] : (per[rounds / 2 - 1] + per[rounds / 2]) / 2;
      printf("{\"op\": \"%s\", \"elements\": %ld, \"median_s\": %.9g, \"min_s\": %.9g, "
             "\"iterations\": %ld, \"warmup\": %ld, \"blocks\": %d}\n",
             op, n, median, per[0], iters, warm, rounds);
      fflush(stdout);
    }
    free(p.a);
    free(p.b);
  }
  free(per);
  MPI_Finalize();
  return 0;
}
